"""What common XID codes mean, for alert texts (from NVIDIA's XID catalogue)."""

XID_MEANINGS = {
    13: "graphics engine exception (often an application bug; if it repeats across jobs, suspect the GPU)",
    31: "GPU memory page fault (usually an application bug)",
    32: "invalid or corrupted push buffer stream (PCIe or driver trouble)",
    38: "driver firmware error",
    43: "GPU stopped processing (the job hit an error)",
    45: "preemptive cleanup after a previous error",
    48: "double-bit ECC error: uncorrectable memory error",
    56: "display engine error",
    57: "error programming video memory interface",
    61: "internal micro-controller breakpoint or warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remap recorded",
    64: "ECC page retirement or row remap failed",
    68: "video decoder exception",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "GPU has fallen off the bus (power, PCIe link, riser or seating)",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (the application was stopped; the GPU is usable)",
    95: "uncontained ECC error (reset the GPU)",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
    121: "C2C link error",
    140: "unrecovered ECC error",
}


def xid_meaning(code: int | None) -> str:
    if not code:
        return ""
    return XID_MEANINGS.get(code, "see NVIDIA's XID catalogue")
