"""The stand-in ``libnvidia-ml.so.1`` (``tests/stub_nvml/nvml_stub.c``), built with the machine's
gcc for one driver branch: a directory to put first on LD_LIBRARY_PATH, so that nvidia-ml-py's
own ctypes code, and rigmon's reader above it, meet that driver's symbols and struct layouts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("stub_nvml") / "nvml_stub.c"
DRIVERS = {"470": "470.256.02", "535": "535.54.03", "550": "550.127.08", "580": "580.95.05"}


def build(branch: str, where: Path) -> Path:
    """The directory holding the stand-in library of driver ``branch`` (470, 535, 550 or 580)."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    assert gcc, "gcc builds the stand-in NVML library"
    out = where / f"nvml-{branch}"
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            gcc,
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Werror",
            f"-DDRIVER={branch}",
            "-o",
            str(out / "libnvidia-ml.so.1"),
            str(SOURCE),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return out
