/* A stand-in libnvidia-ml.so.1 for the tests: the symbols and struct layouts of one NVIDIA
 * driver branch, answering for consumer cards, so that nvidia-ml-py's real ctypes code and
 * rigmon's reader run against it as they would against that driver.
 *
 * Built by the tests (tests/nvml_stub.py) three times:
 *   -DDRIVER=470   the R470 branch: no nvmlDeviceGetComputeRunningProcesses_v3 (v1 and v2 only),
 *                  no nvmlDeviceGetTemperatureV, no nvmlDeviceGetMemoryInfo_v2;
 *   -DDRIVER=535   535.54.03: _v3 writes 32-byte records (usedGpuCcProtectedMemory), as 535.43
 *                  to 535.86 did;
 *   -DDRIVER=580   a current driver: _v3 with 24-byte records, TemperatureV, MemoryInfo_v2.
 * Every other NVML symbol is absent: nvidia-ml-py raises FunctionNotFound for it.
 *
 * Two GPUs (an RTX 3090 and a GTX 1660 SUPER), each with two compute processes: PIDs 4242 and
 * 4343 holding 2 GiB and 1 GiB on GPU 0, 5252 and 5353 holding 512 MiB and 256 MiB on GPU 1. */
#include <string.h>

#ifndef DRIVER
#error "build with -DDRIVER=470, 535 or 580"
#endif

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7

typedef struct { int index; } device_t;
static device_t devices[2] = {{0}, {1}};

static const char *names[2] = {"NVIDIA GeForce RTX 3090", "NVIDIA GeForce GTX 1660 SUPER"};
static const char *uuids[2] = {"GPU-3090aaaa-0000-4000-8000-000000000000",
                               "GPU-1660bbbb-0000-4000-8000-000000000001"};
static const unsigned power_mw[2] = {312000, 67000};
static const unsigned limit_mw[2] = {350000, 125000};
static const unsigned temperature[2] = {71, 58};
static const unsigned long long total[2] = {25769803776ULL, 6442450944ULL};
static const unsigned pids[2][2] = {{4242, 4343}, {5252, 5353}};
static const unsigned long long used[2][2] = {{2147483648ULL, 1073741824ULL}, {536870912ULL, 268435456ULL}};

#if DRIVER == 470
static const char *version = "470.256.02";
static const int cuda = 11040;
#elif DRIVER == 535
static const char *version = "535.54.03";
static const int cuda = 12020;
#else
static const char *version = "580.95.05";
static const int cuda = 13000;
#endif

static int copy(char *out, unsigned length, const char *text) {
    if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, text);
    return NVML_SUCCESS;
}

static int which(void *device) {
    return device == &devices[0] ? 0 : device == &devices[1] ? 1 : -1;
}

nvmlReturn_t nvmlInit(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlInitWithFlags(unsigned flags) { (void)flags; return NVML_SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
const char *nvmlErrorString(nvmlReturn_t r) { (void)r; return "stand-in NVML error"; }

nvmlReturn_t nvmlSystemGetDriverVersion(char *out, unsigned length) { return copy(out, length, version); }
nvmlReturn_t nvmlSystemGetNVMLVersion(char *out, unsigned length) {
    char text[32] = "12.";
    strcat(text, version);
    return copy(out, length, text);
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *out) { *out = cuda; return NVML_SUCCESS; }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *out) { *out = cuda; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetCount(unsigned *count) { *count = 2; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) { *count = 2; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned index, void **device) {
    if (index > 1) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, void **device) {
    return nvmlDeviceGetHandleByIndex(index, device);
}

#define DEVICE(d) int n = which(d); if (n < 0) return NVML_ERROR_INVALID_ARGUMENT

nvmlReturn_t nvmlDeviceGetName(void *d, char *out, unsigned length) { DEVICE(d); return copy(out, length, names[n]); }
nvmlReturn_t nvmlDeviceGetUUID(void *d, char *out, unsigned length) { DEVICE(d); return copy(out, length, uuids[n]); }
nvmlReturn_t nvmlDeviceGetPowerUsage(void *d, unsigned *mw) { DEVICE(d); *mw = power_mw[n]; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(void *d, unsigned *mw) {
    DEVICE(d); *mw = limit_mw[n]; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTemperature(void *d, int sensor, unsigned *celsius) {
    DEVICE(d);
    if (sensor != 0) return NVML_ERROR_NOT_SUPPORTED;
    *celsius = temperature[n];
    return NVML_SUCCESS;
}

typedef struct { unsigned gpu, memory; } utilization_t;
nvmlReturn_t nvmlDeviceGetUtilizationRates(void *d, utilization_t *u) {
    DEVICE(d); u->gpu = 100; u->memory = 40; return NVML_SUCCESS;
}

typedef struct { unsigned long long total, free, used; } memory_t;
nvmlReturn_t nvmlDeviceGetMemoryInfo(void *d, memory_t *m) {
    DEVICE(d);
    /* before R510 "used" counted the driver's reservation too */
    m->used = used[n][0] + used[n][1] + (DRIVER < 510 ? 314572800ULL : 0);
    m->total = total[n];
    m->free = total[n] - m->used;
    return NVML_SUCCESS;
}

/* the process records, as each call and driver writes them */
typedef struct { unsigned pid; unsigned long long usedGpuMemory; } process_v1_t;
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; } process_v2_t;
typedef struct {
    unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} process_v3_cc_t;

#define PROCESSES(TYPE, FILL)                                       \
    DEVICE(d);                                                      \
    if (infos == 0 || *count < 2) { *count = 2; return NVML_ERROR_INSUFFICIENT_SIZE; } \
    TYPE *out = (TYPE *)infos;                                      \
    for (int k = 0; k < 2; k++) {                                   \
        memset(&out[k], 0, sizeof(TYPE));                           \
        out[k].pid = pids[n][k];                                    \
        out[k].usedGpuMemory = used[n][k];                          \
        FILL                                                        \
    }                                                               \
    *count = 2;                                                     \
    return NVML_SUCCESS

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(void *d, unsigned *count, void *infos) {
    PROCESSES(process_v1_t, );
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(void *d, unsigned *count, void *infos) {
    PROCESSES(process_v2_t, out[k].gpuInstanceId = 0xFFFFFFFF; out[k].computeInstanceId = 0xFFFFFFFF;);
}

#if DRIVER >= 510
#if DRIVER == 535
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *d, unsigned *count, void *infos) {
    PROCESSES(process_v3_cc_t, out[k].gpuInstanceId = 0xFFFFFFFF; out[k].computeInstanceId = 0xFFFFFFFF;
              out[k].usedGpuCcProtectedMemory = 0;);
}
#else
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *d, unsigned *count, void *infos) {
    PROCESSES(process_v2_t, out[k].gpuInstanceId = 0xFFFFFFFF; out[k].computeInstanceId = 0xFFFFFFFF;);
}
#endif

typedef struct { unsigned version; unsigned long long total, reserved, free, used; } memory_v2_t;
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void *d, memory_v2_t *m) {
    DEVICE(d);
    m->reserved = 314572800ULL;
    m->used = used[n][0] + used[n][1];
    m->total = total[n];
    m->free = total[n] - m->used - m->reserved;
    return NVML_SUCCESS;
}
#endif

#if DRIVER >= 580
typedef struct { unsigned version; int sensorType; int temperature; } temperature_v1_t;
nvmlReturn_t nvmlDeviceGetTemperatureV(void *d, temperature_v1_t *t) {
    DEVICE(d);
    if (t->sensorType != 0) return NVML_ERROR_NOT_SUPPORTED;
    t->temperature = (int)temperature[n];
    return NVML_SUCCESS;
}
#endif
