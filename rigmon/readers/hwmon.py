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

from ..model.sample import Electrical, FanControl

_WANTED = re.compile(r"^(name|(temp|fan|pwm|in|power|curr)\d+(_(input|label|min|alarm|enable))?)$")
MAX_FILES = 512  # per chip: a driver that exposes thousands of attributes is read in part


class Hwmon(NamedTuple):
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


_ATTRIBUTE = re.compile(r"^(fan|pwm|in|power|curr|temp)(\d+)(?:_(\w+))?$")


def _by_index(files: dict[str, str]) -> dict[str, dict[int, dict[str, str]]]:
    """{"fan": {1: {"input": "1150", "min": "300"}, …}, "pwm": {1: {"": "128", "enable": "5"}}, …}"""
    out: dict[str, dict[int, dict[str, str]]] = {}
    for name, text in files.items():
        m = _ATTRIBUTE.match(name)
        if m:
            out.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3) or ""] = text
    return out


def parse(answer: dict[str, dict[str, Any]]) -> Hwmon:
    fans, voltages, powers, currents = [], [], [], []
    for dir_name, chip in answer.items():
        name, device = str(chip.get("name", dir_name)), str(chip.get("device", dir_name))
        attributes = _by_index(chip.get("files", {}))
        fan, pwm = attributes.get("fan", {}), attributes.get("pwm", {})
        for n in sorted({i for i, f in fan.items() if "input" in f} | set(pwm)):
            f, p = fan.get(n, {}), pwm.get(n, {})
            duty = _number(p.get(""))
            fans.append(
                FanControl(
                    name,
                    device,
                    f.get("label") or f"fan{n}",
                    min(duty / 255, 1.0) if duty is not None else None,
                    _int(p.get("enable")),
                    _number(f.get("min")),
                    _flag(f.get("alarm")),
                )
            )
        for prefix, divisor, out in (("in", 1000, voltages), ("power", 1_000_000, powers), ("curr", 1000, currents)):
            for n, a in sorted(attributes.get(prefix, {}).items()):
                value = _number(a.get("input"))
                if value is not None:  # mV, µW, mA in sysfs
                    out.append(Electrical(name, device, a.get("label") or f"{prefix}{n}", value / divisor))
    return Hwmon(tuple(fans), tuple(voltages), tuple(powers), tuple(currents))


_DEVICES_CACHE: dict[tuple, dict[str, list[str]]] = {}


def devices_for(answer: dict[str, dict[str, Any]], kind: str) -> dict[str, list[str]]:
    """For each chip name, the device of each of psutil's entries of ``kind`` ("temp" or
    "fan"), in psutil's order: it sorts the attribute paths as text and skips what it cannot
    read, so the same walk pairs each entry with its chip. The same layout gives the same
    answer: worked out once."""
    inputs = tuple(
        (
            dir_name,
            str(chip.get("name")),
            str(chip.get("device")),
            tuple(
                a
                for a, text in chip.get("files", {}).items()
                if a.startswith(kind) and a.endswith("_input") and _number(text) is not None
            ),
        )
        for dir_name, chip in answer.items()
    )
    key = (kind, inputs)
    found = _DEVICES_CACHE.get(key)
    if found is None:
        paths = sorted(
            (f"/sys/class/hwmon/{dir_name}/{a.removesuffix('_input')}", name, device)
            for dir_name, name, device, attributes in inputs
            for a in attributes
        )
        found = {}
        for _, name, device in paths:
            found.setdefault(name, []).append(device)
        if len(_DEVICES_CACHE) > 64:
            _DEVICES_CACHE.clear()
        _DEVICES_CACHE[key] = found
    return found


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
