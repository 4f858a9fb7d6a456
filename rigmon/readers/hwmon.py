"""What psutil leaves out of hwmon: fan PWM duty and mode, fan minimum and alarm flags,
voltages, power and current inputs, and which device each chip is.

psutil groups hwmon chips by name, so two sockets' ``coretemp`` or two ``nvme`` drives fall
under one key (and their repeated labels collide). This reader walks ``/sys/class/hwmon``
itself, names each chip by its device path (``coretemp.1``, ``nvme1``, ``0000:00:18.3``), and
pairs psutil's entries with those devices in psutil's own order. Temperatures and fan speeds
still come from psutil (the readings it gives); the rest comes from here.

``raw(root)`` is what a recording stores (file contents as text, as the kernel gave them);
``parse(raw)`` turns it into readings, so a replay runs the same parsing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, NamedTuple

from ..sample import Electrical, FanControl

_WANTED = re.compile(r"^(name|(temp|fan|pwm|in|power|curr)\d+(_(input|label|min|alarm|enable))?)$")
MAX_FILES = 512  # per chip: a driver that exposes thousands of attributes is read in part


class Chip(NamedTuple):
    dir: str  # hwmonN
    name: str  # the driver's name: coretemp, nct6798, corsair-psu
    device: str  # which one: the device path's last part (coretemp.1, nvme1, 0000:00:18.3), else hwmonN


class Hwmon(NamedTuple):
    chips: tuple[Chip, ...] = ()
    fans: tuple[FanControl, ...] = ()
    voltages: tuple[Electrical, ...] = ()
    powers: tuple[Electrical, ...] = ()
    currents: tuple[Electrical, ...] = ()


def raw(root: str | Path = "/sys") -> dict[str, dict[str, Any]]:
    """``{hwmonN: {"name": …, "device": …, "files": {attribute: text}}}`` for every chip."""
    base = Path(root) / "class" / "hwmon"
    out: dict[str, dict[str, Any]] = {}
    try:
        dirs = sorted(base.iterdir(), key=lambda p: p.name)
    except OSError:
        return out
    for d in dirs:
        files: dict[str, str] = {}
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            if _WANTED.match(name) and len(files) < MAX_FILES:
                try:
                    files[name] = (d / name).read_text(errors="replace").strip()
                except OSError:  # an attribute the chip cannot read now (EIO, ENODATA)
                    continue
        out[d.name] = {"name": files.pop("name", d.name), "device": _device(d), "files": files}
    return out


def _device(d: Path) -> str:
    try:
        target = os.path.realpath(d / "device")
    except OSError:
        return d.name
    if not os.path.exists(target) or target == str(d / "device"):
        return d.name
    return os.path.basename(target)


def parse(answer: dict[str, dict[str, Any]]) -> Hwmon:
    chips, fans, voltages, powers, currents = [], [], [], [], []
    for dir_name, chip in answer.items():
        name, device, files = str(chip.get("name", dir_name)), str(chip.get("device", dir_name)), chip.get("files", {})
        chips.append(Chip(dir_name, name, device))
        for n in _indices(files, "fan", "_input") | _indices(files, "pwm", ""):
            label = files.get(f"fan{n}_label") or f"fan{n}"
            pwm = _number(files.get(f"pwm{n}"))
            fans.append(FanControl(name, device, label, min(pwm / 255, 1.0) if pwm is not None else None,
                                   _int(files.get(f"pwm{n}_enable")), _number(files.get(f"fan{n}_min")),
                                   _flag(files.get(f"fan{n}_alarm"))))
        for prefix, divisor, out in (("in", 1000, voltages), ("power", 1_000_000, powers), ("curr", 1000, currents)):
            for n in sorted(_indices(files, prefix, "_input")):
                value = _number(files.get(f"{prefix}{n}_input"))
                if value is not None:
                    label = files.get(f"{prefix}{n}_label") or f"{prefix}{n}"
                    out.append(Electrical(name, device, label, value / divisor))  # mV, µW, mA in sysfs
    return Hwmon(tuple(chips), tuple(fans), tuple(voltages), tuple(powers), tuple(currents))


def devices_for(answer: dict[str, dict[str, Any]], kind: str) -> dict[str, list[str]]:
    """For each chip name, the device of each of psutil's entries of ``kind`` ("temp" or
    "fan"), in psutil's order: it sorts the attribute paths as text and skips what it cannot
    read, so the same walk pairs each entry with its chip."""
    paths = []
    for dir_name, chip in answer.items():
        files = chip.get("files", {})
        for attribute in files:
            if attribute.startswith(kind) and attribute.endswith("_input") and _number(files[attribute]) is not None:
                paths.append((f"/sys/class/hwmon/{dir_name}/{attribute.removesuffix('_input')}", chip))
    out: dict[str, list[str]] = {}
    for _, chip in sorted(paths, key=lambda p: p[0]):
        out.setdefault(str(chip.get("name")), []).append(str(chip.get("device")))
    return out


def _indices(files: dict[str, str], prefix: str, suffix: str) -> set[int]:
    pattern = re.compile(rf"^{prefix}(\d+){re.escape(suffix)}$")
    return {int(m.group(1)) for f in files if (m := pattern.match(f))}


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def _int(text: str | None) -> int | None:
    value = _number(text)
    return int(value) if value is not None else None


def _flag(text: str | None) -> bool | None:
    value = _number(text)
    return bool(value) if value is not None else None
