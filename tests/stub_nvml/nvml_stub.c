/* A stand-in libnvidia-ml.so.1 for the tests: the symbols and struct layouts of one NVIDIA
 * driver branch, answering for consumer cards, so that nvidia-ml-py's real ctypes code and
 * rigmon's reader run against it as they would against that driver.
 *
 * Built by the tests (tests/nvml_stub.py) once per branch:
 *   -DDRIVER=470   the R470 branch: no nvmlDeviceGetComputeRunningProcesses_v3 (v1 and v2 only),
 *                  no nvmlDeviceGetTemperatureV, no nvmlDeviceGetMemoryInfo_v2;
 *   -DDRIVER=535   535.54.03: _v3 writes 32-byte records (usedGpuCcProtectedMemory), as 535.43
 *                  to 535.86 did;
 *   -DDRIVER=550   550.127.08: _v3 writes 16-byte records (the first call's layout), as that
 *                  driver does (nvitop #226);
 *   -DDRIVER=580   a current driver: _v3 with 24-byte records, TemperatureV, MemoryInfo_v2.
 * Every other NVML symbol is absent: nvidia-ml-py raises FunctionNotFound for it.
 *
 * Two GPUs (an RTX 3090 and a GTX 1660 SUPER), each with two compute processes: PIDs 4242 and
 * 4343 holding 2 GiB and 1 GiB on GPU 0, 5252 and 5353 holding 512 MiB and 256 MiB on GPU 1.
 *
 * The states a real box gets into come from a control file, named by $RIGMON_NVML_STUB and read
 * again whenever it changes (one "key=value" a line), so a test moves the library from one
 * state to another while rigmon runs:
 *   init=DriverNotLoaded | LibRmVersionMismatch | NoPermission   nvmlInit fails so (a module not
 *                  loaded, a driver upgraded under its loaded module, no access to /dev/nvidia*);
 *                  without the line it succeeds: the box is mended;
 *   mig=1          GPU 0 is an H100 in MIG mode with two GPU instances (3g.40gb), one process in
 *                  each; utilisation is NotSupported on it, as NVML answers in MIG mode;
 *   reasons=N      the clock-event reasons mask every GPU reports (0x200 board limit, 0x400
 *                  reliability: R570's);
 *   log=PATH       every call on a device is appended to PATH as "GPU FUNCTION", except
 *                  nvmlDeviceGetHandleByIndex and nvmlDeviceGetPciInfo_v3, which NVML answers from
 *                  the table nvmlInit built (they never wake a runtime-suspended GPU).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef DRIVER
#error "build with -DDRIVER=470, 535, 550 or 580"
#endif

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NO_PERMISSION 4
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_LIB_RM_VERSION_MISMATCH 18

/* --- the control file ------------------------------------------------------------------------ */
static struct {
    int init;
    int mig;
    unsigned long long reasons;
    char log[512];
} control;
static time_t control_mtime = -1;
static long control_size = -1;

static void load_control(void) {
    const char *path = getenv("RIGMON_NVML_STUB");
    struct stat st;
    if (!path || stat(path, &st) != 0) {
        if (control_mtime != 0) memset(&control, 0, sizeof control);
        control_mtime = 0;
        return;
    }
    if (st.st_mtime == control_mtime && st.st_size == control_size) return;
    control_mtime = st.st_mtime;
    control_size = st.st_size;
    memset(&control, 0, sizeof control);
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[600];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        char *value = strchr(line, '=');
        if (!value) continue;
        *value++ = 0;
        if (!strcmp(line, "init")) {
            control.init = !strcmp(value, "DriverNotLoaded")        ? NVML_ERROR_DRIVER_NOT_LOADED
                           : !strcmp(value, "LibRmVersionMismatch") ? NVML_ERROR_LIB_RM_VERSION_MISMATCH
                           : !strcmp(value, "NoPermission")         ? NVML_ERROR_NO_PERMISSION
                                                                    : 0;
        } else if (!strcmp(line, "mig")) {
            control.mig = atoi(value);
        } else if (!strcmp(line, "reasons")) {
            control.reasons = strtoull(value, 0, 0);
        } else if (!strcmp(line, "log")) {
            strncpy(control.log, value, sizeof control.log - 1);
        }
    }
    fclose(f);
}

static void called(int gpu, const char *function) {
    if (!control.log[0]) return;
    FILE *f = fopen(control.log, "a");
    if (!f) return;
    fprintf(f, "%d %s\n", gpu, function);
    fclose(f);
}

/* --- the GPUs ----------------------------------------------------------------------------------- */
typedef struct { int index; } device_t;
static device_t devices[2] = {{0}, {1}};
typedef struct { int slot; } mig_device_t;
static mig_device_t mig_devices[2] = {{0}, {1}};

static const char *names[2] = {"NVIDIA GeForce RTX 3090", "NVIDIA GeForce GTX 1660 SUPER"};
static const char *mig_name = "NVIDIA H100 80GB HBM3";
static const char *uuids[2] = {"GPU-3090aaaa-0000-4000-8000-000000000000",
                               "GPU-1660bbbb-0000-4000-8000-000000000001"};
static const char *bus_ids[2] = {"00000000:01:00.0", "00000000:02:00.0"};
static const unsigned power_mw[2] = {312000, 67000};
static const unsigned limit_mw[2] = {350000, 125000};
static const unsigned temperature[2] = {71, 58};
static const unsigned long long total[2] = {25769803776ULL, 6442450944ULL};
static const unsigned pids[2][2] = {{4242, 4343}, {5252, 5353}};
static const unsigned long long used[2][2] = {{2147483648ULL, 1073741824ULL}, {536870912ULL, 268435456ULL}};
/* MIG: GPU 0 as an H100 of 80 GiB in two 3g.40gb instances (GPU instances 1 and 2), PID 4242 in
 * the first and 4343 in the second */
static const unsigned long long mig_total = 85899345920ULL, mig_slice = 42949672960ULL;
static const char *mig_uuids[2] = {"MIG-aaaa1111-0000-4000-8000-000000000001",
                                   "MIG-aaaa2222-0000-4000-8000-000000000002"};

#if DRIVER == 470
static const char *version = "470.256.02";
static const int cuda = 11040;
#elif DRIVER == 535
static const char *version = "535.54.03";
static const int cuda = 12020;
#elif DRIVER == 550
static const char *version = "550.127.08";
static const int cuda = 12040;
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

static int mig_slot(void *device) {
    return device == &mig_devices[0] ? 0 : device == &mig_devices[1] ? 1 : -1;
}

static int in_mig(int n) { return n == 0 && control.mig; }

nvmlReturn_t nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    load_control();
    return control.init;
}
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
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

/* A call on a GPU: logged, and the control file read again (a test changes it mid-run). */
#define DEVICE(d)                                        \
    int n = which(d);                                    \
    if (n < 0) return NVML_ERROR_INVALID_ARGUMENT;       \
    load_control();                                      \
    called(n, __func__)

typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_info_t;
nvmlReturn_t nvmlDeviceGetPciInfo_v3(void *d, pci_info_t *info) {
    int n = which(d); /* from NVML's own table: no call on the GPU, never logged */
    if (n < 0) return NVML_ERROR_INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    strcpy(info->busId, bus_ids[n]);
    strcpy(info->busIdLegacy, bus_ids[n] + 4);
    info->bus = (unsigned)n + 1;
    info->pciDeviceId = n == 0 ? 0x220410de : 0x21c410de;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(void *d, char *out, unsigned length) {
    int m = mig_slot(d);
    if (m >= 0) return copy(out, length, m == 0 || m == 1 ? "NVIDIA H100 80GB HBM3 MIG 3g.40gb" : "");
    DEVICE(d);
    return copy(out, length, in_mig(n) ? mig_name : names[n]);
}
nvmlReturn_t nvmlDeviceGetUUID(void *d, char *out, unsigned length) {
    int m = mig_slot(d);
    if (m >= 0) return copy(out, length, mig_uuids[m]);
    DEVICE(d);
    return copy(out, length, uuids[n]);
}
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
    DEVICE(d);
    if (in_mig(n)) return NVML_ERROR_NOT_SUPPORTED; /* NVML gives no utilisation in MIG mode */
    u->gpu = 100; u->memory = 40; return NVML_SUCCESS;
}

/* the clock-event reasons: the mask the control file says, every reason supported */
static nvmlReturn_t reasons(void *d, unsigned long long *out, int supported) {
    DEVICE(d);
    *out = supported ? 0x7FFULL : control.reasons;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(void *d, unsigned long long *out) { return reasons(d, out, 0); }
nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(void *d, unsigned long long *out) { return reasons(d, out, 1); }
#if DRIVER >= 535
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(void *d, unsigned long long *out) { return reasons(d, out, 0); }
nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(void *d, unsigned long long *out) { return reasons(d, out, 1); }
#endif

/* MIG */
nvmlReturn_t nvmlDeviceGetMigMode(void *d, unsigned *current, unsigned *pending) {
    DEVICE(d);
    if (n != 0) return NVML_ERROR_NOT_SUPPORTED; /* a GeForce card has no MIG */
    *current = *pending = control.mig ? 1 : 0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(void *d, unsigned *count) {
    DEVICE(d);
    if (!in_mig(n)) return NVML_ERROR_NOT_SUPPORTED;
    *count = 7; /* an H100 has room for seven; two are made */
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(void *d, unsigned index, void **mig) {
    DEVICE(d);
    if (!in_mig(n)) return NVML_ERROR_NOT_SUPPORTED;
    if (index > 6) return NVML_ERROR_INVALID_ARGUMENT;
    if (index > 1) return NVML_ERROR_NOT_FOUND;
    *mig = &mig_devices[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(void *d, unsigned *is_mig) {
    *is_mig = mig_slot(d) >= 0;
    return mig_slot(d) >= 0 || which(d) >= 0 ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceId(void *d, unsigned *id) {
    int m = mig_slot(d);
    if (m < 0) return NVML_ERROR_NOT_SUPPORTED;
    *id = (unsigned)m + 1;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetComputeInstanceId(void *d, unsigned *id) {
    if (mig_slot(d) < 0) return NVML_ERROR_NOT_SUPPORTED;
    *id = 0;
    return NVML_SUCCESS;
}

typedef struct { unsigned long long total, free, used; } memory_t;
nvmlReturn_t nvmlDeviceGetMemoryInfo(void *d, memory_t *m) {
    int slot = mig_slot(d);
    if (slot >= 0) { /* an instance: its own slice and its own process */
        m->total = mig_slice;
        m->used = used[0][slot];
        m->free = m->total - m->used;
        return NVML_SUCCESS;
    }
    DEVICE(d);
    /* before R510 "used" counted the driver's reservation too */
    m->used = used[n][0] + used[n][1] + (DRIVER < 510 ? 314572800ULL : 0);
    m->total = in_mig(n) ? mig_total : total[n];
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

/* the process records, as each call and driver writes them */
typedef struct { unsigned pid; unsigned long long usedGpuMemory; } process_v1_t;
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; } process_v2_t;
typedef struct {
    unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} process_v3_cc_t;

/* in MIG mode each process carries the GPU instance it runs in (1 or 2) and its compute instance (0) */
#define INSTANCES                                                          \
    out[k].gpuInstanceId = in_mig(n) ? (unsigned)k + 1 : 0xFFFFFFFF;       \
    out[k].computeInstanceId = in_mig(n) ? 0 : 0xFFFFFFFF;

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
    PROCESSES(process_v2_t, INSTANCES);
}

#if DRIVER >= 510
#if DRIVER == 535
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *d, unsigned *count, void *infos) {
    PROCESSES(process_v3_cc_t, INSTANCES out[k].usedGpuCcProtectedMemory = 0;);
}
#elif DRIVER == 550
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *d, unsigned *count, void *infos) {
    PROCESSES(process_v1_t, );
}
#else
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *d, unsigned *count, void *infos) {
    PROCESSES(process_v2_t, INSTANCES);
}
#endif

typedef struct { unsigned version; unsigned long long total, reserved, free, used; } memory_v2_t;
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void *d, memory_v2_t *m) {
    int slot = mig_slot(d);
    if (slot >= 0) {
        m->reserved = 0;
        m->total = mig_slice;
        m->used = used[0][slot];
        m->free = m->total - m->used;
        return NVML_SUCCESS;
    }
    DEVICE(d);
    m->reserved = 314572800ULL;
    m->used = used[n][0] + used[n][1];
    m->total = in_mig(n) ? mig_total : total[n];
    m->free = m->total - m->used - m->reserved;
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
