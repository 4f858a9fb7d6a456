"""What it means when NVML cannot start, and what mends it: for each error ``nvmlInit`` gives,
its cause and its fix, in the words the alert, ``status``, ``doctor`` and the page all use.

A box without NVIDIA's driver answers ``LibraryNotFound``: nothing is wrong there unless the box
had GPUs. Every other error is a box whose GPUs go unwatched (a driver upgraded under its loaded
module, a module that did not load after a kernel update, no access to the devices)."""

from __future__ import annotations

NO_DRIVER = "LibraryNotFound"  # libnvidia-ml.so.1 is not there: no NVIDIA driver on this box

# error name (pynvml's NVMLError_<Name>) -> (what it means, what mends it)
PROBLEMS: dict[str, tuple[str, str]] = {
    NO_DRIVER: (
        "no NVIDIA driver is installed (libnvidia-ml.so.1 is not found)",
        "install the NVIDIA driver (nvidia-smi must work); in a container, start it with the GPUs "
        "(--gpus all, the NVIDIA container toolkit)",
    ),
    "LibRmVersionMismatch": (
        "the NVIDIA driver was upgraded while its old kernel module stayed loaded (Driver/library version "
        "mismatch, as after unattended-upgrades until the next reboot)",
        "reboot, or stop what holds the GPUs and reload the modules (sudo rmmod nvidia_uvm nvidia_drm "
        "nvidia_modeset nvidia; sudo modprobe nvidia); nvidia-smi answers again once it is mended",
    ),
    "DriverNotLoaded": (
        "the NVIDIA kernel module is not loaded (after a kernel update its DKMS build may have failed)",
        "sudo modprobe nvidia; where that fails, rebuild the module for the running kernel (dkms status, "
        "then sudo dkms autoinstall, or reinstall the driver package) and reboot",
    ),
    "NoPermission": (
        "rigmon may not open the NVIDIA devices (/dev/nvidiactl, /dev/nvidia*)",
        "run rigmon as a user the devices admit (root, or the video group where the distribution uses "
        "it); under systemd keep the unit's DeviceAllow=char-nvidiactl and DeviceAllow=char-nvidia-frontend "
        "lines; in a container, pass the GPUs (--gpus all)",
    ),
    "InsufficientPower": (
        "a GPU's external power cables are not connected or not enough",
        "connect every power input of each card (one cable per 8-pin or 12VHPWR input), then reboot",
    ),
    "IrqIssue": (
        "the NVIDIA driver could not set up a GPU's interrupt",
        "look at dmesg | grep -i nvrm; reseat the card or try another slot",
    ),
    "OperatingSystem": (
        "the operating system blocked NVML's request",
        "look at dmesg | grep -i nvrm; a security module (SELinux, AppArmor) may deny the devices",
    ),
}


def cause(error: str | None) -> str | None:
    """What an nvmlInit error means; None while NVML answers (no error)."""
    if not error:
        return None
    known = PROBLEMS.get(error)
    return known[0] if known else f"NVML failed to start ({error})"


def fix(error: str | None) -> str | None:
    """What mends it; None while NVML answers."""
    if not error:
        return None
    known = PROBLEMS.get(error)
    return (
        known[1]
        if known
        else "run nvidia-smi, which says what NVML says; dmesg | grep -i nvrm shows the driver's own messages"
    )
