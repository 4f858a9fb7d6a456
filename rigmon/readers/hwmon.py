"""hwmon as the kernel lays it out: each sensor named by its own attribute (``fan2``,
``temp3``), each chip by its device (``coretemp.1``, ``nvme1``, ``0000:00:18.3``), and what
psutil leaves out: fan PWM duty and mode, fan minimum and alarm flags, voltages (and their
alarms), power and current inputs, the chassis intrusion alarm.

psutil groups hwmon chips by name, so two sockets' ``coretemp`` or two ``nvme`` drives fall
under one key, gives no attribute (a chip whose only fan is ``fan2`` shows one unnamed fan),
reads a chip's ``device/`` attributes (applesmc, older it87 and w83627 drivers put them there)
for temperatures but for fans only where no chip has one of its own, and skips a chip without
a ``name``. This reader walks ``/sys/class/hwmon`` itself (a ``device/`` attribute where the
chip has none of that kind of its own; a chip without a name under its directory's), and joins
psutil's values to its sensors by attribute: psutil's entries are matched with the paths
psutil itself lists, in its own order (``psutil_bases``), never by position in the walk.

``raw(root)`` is what a recording stores (file contents as text, as the kernel gave them);
``parse(raw)`` and ``plan(raw)`` turn it into readings, so a replay runs the same parsing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, NamedTuple

from ..model.sample import Electrical, FanControl

_WANTED = re.compile(r"^(name|(temp|fan|pwm|in|power|curr|intrusion)\d+(_(input|label|min|max|crit|alarm|enable))?)$")
MAX_FILES = 512  # per chip: a driver that exposes thousands of attributes is read in part
DEVICE = "device/"  # a file read from the chip's device directory is kept under this prefix


class Hwmon(NamedTuple):
    fans: tuple[FanControl, ...] = ()
    voltages: tuple[Electrical, ...] = ()
    powers: tuple[Electrical, ...] = ()
    currents: tuple[Electrical, ...] = ()
    intrusions: tuple[Electrical, ...] = ()  # a chassis intrusion alarm: its value 1 while raised


def raw(root: str | Path = "/sys") -> dict[str, dict[str, Any]]:
    """``{hwmonN: {"name": …, "device": …, "files": {attribute: text}}}`` for every chip: its own
    attributes, and its ``device/`` directory's (kept as ``device/<attribute>``) of the kinds it
    has none of; its name, else its device's, else its directory's."""
    base = Path(root) / "class" / "hwmon"
    out: dict[str, dict[str, Any]] = {}
    try:
        dirs = sorted(base.iterdir(), key=lambda p: p.name)
    except OSError:
        return out
    for d in dirs:
        files: dict[str, str] = {}
        try:
            _read(d, sorted(os.listdir(d)), "", files)
        except OSError:
            continue
        own = {m.group(1) for m in map(_ATTRIBUTE.match, files) if m}
        try:
            below = sorted(os.listdir(d / "device"))
        except OSError:
            below = []
        _read(d / "device", [n for n in below if n == "name" or _kind(n) not in own], DEVICE, files)
        name = files.get("name") or files.get(DEVICE + "name") or d.name
        out[d.name] = {"name": name, "device": _device(d), "files": files}
    return out


def _read(d: Path, names: list[str], prefix: str, files: dict[str, str]) -> None:
    for name in names:
        if _WANTED.match(name) and len(files) < MAX_FILES:
            try:
                files[prefix + name] = (d / name).read_text(errors="replace").strip()
            except OSError:  # an attribute the chip cannot read now (EIO, ENODATA), or a directory
                continue


def _kind(name: str) -> str | None:
    m = _ATTRIBUTE.match(name)
    return m.group(1) if m else None


def _device(d: Path) -> str:
    try:
        target = os.path.realpath(d / "device")
    except OSError:
        return d.name
    if not os.path.exists(target) or target == str(d / "device"):
        return d.name
    return os.path.basename(target)


_ATTRIBUTE = re.compile(r"^(fan|pwm|in|power|curr|temp|intrusion)(\d+)(?:_(\w+))?$")


def _by_index(files: dict[str, str]) -> dict[str, dict[int, dict[str, str]]]:
    """{"fan": {1: {"input": "1150", "min": "300"}, …}, "pwm": {1: {"": "128", "enable": "5"}}, …}:
    each kind from the chip's own attributes, else from its device directory's."""
    own: dict[str, dict[int, dict[str, str]]] = {}
    below: dict[str, dict[int, dict[str, str]]] = {}
    for name, text in files.items():
        where = own
        if name.startswith(DEVICE):
            name, where = name[len(DEVICE) :], below
        m = _ATTRIBUTE.match(name)
        if m and int(m.group(2)) < 1 << 16:
            where.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3) or ""] = text
    return {**below, **own}


def parse(answer: dict[str, dict[str, Any]]) -> Hwmon:
    fans, voltages, powers, currents, intrusions = [], [], [], [], []
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
                    label = a.get("label") or f"{prefix}{n}"
                    out.append(Electrical(name, device, label, value / divisor, _flag(a.get("alarm"))))
        for n, a in sorted(attributes.get("intrusion", {}).items()):
            raised = _flag(a.get("alarm"))
            if raised is not None:
                intrusions.append(Electrical(name, device, f"intrusion{n}", 1.0 if raised else 0.0, raised))
    return Hwmon(tuple(fans), tuple(voltages), tuple(powers), tuple(currents), tuple(intrusions))


class Planned(NamedTuple):
    """A temperature or fan of the walk: where its files are, and where psutil lists it."""

    kind: str  # "temp" or "fan"
    chip: str  # its chip's name, else its directory's (hwmon5)
    device: str
    dir: str  # the walk's directory (hwmon3)
    attribute: str  # temp3, fan2
    files: tuple[str | None, str | None, str | None, str | None]  # its input's, label's, max's and crit's keys
    psutil: tuple[str, int] | None  # its chip's name and its place in psutil's list of it (psutil_bases)


_PLANS: dict[tuple, tuple[tuple[Planned, ...], dict[tuple[str, str], int]]] = {}


def plan(answer: dict[str, dict[str, Any]]) -> tuple[tuple[Planned, ...], dict[tuple[str, str], int]]:
    """Every temperature and fan the walk found (from a chip's own attributes of a kind, else its
    device directory's), each with where psutil lists it, and how many psutil lists of each
    (kind, chip name). The same layout gives the same plan: worked out once, the values read
    from it at each poll."""
    key = tuple(
        (d, c.get("name"), c.get("device"), tuple(c.get("files") or ()))
        for d, c in answer.items()
        if isinstance(c, dict)
    )
    found = _PLANS.get(key)
    if found is None:
        found = _plan(answer)
        if len(_PLANS) >= 16:
            _PLANS.clear()
        _PLANS[key] = found
    return found


def _plan(answer: dict[str, dict[str, Any]]) -> tuple[tuple[Planned, ...], dict[tuple[str, str], int]]:
    places: dict[tuple[str, str, str], tuple[str, int]] = {}
    counts: dict[tuple[str, str], int] = {}
    for kind in ("temp", "fan"):
        for name, bases in psutil_bases(answer, kind).items():
            counts[(kind, name)] = len(bases)
            places.update(((kind, d, base), (name, n)) for n, (d, base) in enumerate(bases))
    out = []
    for dir_name, chip in answer.items():
        if not isinstance(chip, dict):
            continue
        name, device = str(chip.get("name", dir_name)), str(chip.get("device", dir_name))
        own: dict[tuple[str, int], dict[str, str]] = {}
        below: dict[tuple[str, int], dict[str, str]] = {}
        for path in chip.get("files") or ():
            where, attribute = (below, path[len(DEVICE) :]) if path.startswith(DEVICE) else (own, path)
            m = _ATTRIBUTE.match(attribute)
            if m and m.group(1) in ("temp", "fan") and int(m.group(2)) < 1 << 16:
                where.setdefault((m.group(1), int(m.group(2))), {})[m.group(3) or ""] = path
        own_kinds = {kind for kind, _ in own}
        merged = {k: v for k, v in below.items() if k[0] not in own_kinds} | own
        for (kind, n), keys in sorted(merged.items()):
            if "input" in keys:
                attribute = f"{kind}{n}"
                files = (keys.get("input"), keys.get("label"), keys.get("max"), keys.get("crit"))
                out.append(
                    Planned(kind, name, device, dir_name, attribute, files, places.get((kind, dir_name, attribute)))
                )
    return tuple(out), counts


def psutil_bases(answer: dict[str, dict[str, Any]], kind: str) -> dict[str, list[tuple[str, str]]]:
    """For each chip name, the sensors psutil lists of ``kind`` ("temp" or "fan"), in its order,
    as (the walk's directory, attribute): psutil sorts the attribute paths as text, reads a
    chip's ``device/`` ones for temperatures and, for fans, only where no chip has one of its
    own, and skips an input it cannot read and a directory without a name."""
    bases = []
    own_fans = any(
        _kind(f) == "fan" for chip in answer.values() if isinstance(chip, dict) for f in chip.get("files") or {}
    )
    for dir_name, chip in answer.items():
        if not isinstance(chip, dict):
            continue
        files = chip.get("files") or {}
        for path, text in files.items():
            below = path.startswith(DEVICE)
            attribute = path[len(DEVICE) :] if below else path
            if not attribute.startswith(kind) or not attribute.endswith("_input") or _number(text) is None:
                continue
            if kind == "fan" and below == own_fans:
                continue
            # psutil reads the name beside the attribute, and skips it without one (a walk an
            # earlier rigmon recorded kept the chip's name apart from its files)
            named = chip.get("name") if chip.get("name") != dir_name else None
            name = files.get(DEVICE + "name") if below else files.get("name") or named
            if not name:
                continue
            base = attribute.removesuffix("_input")
            bases.append((f"/sys/class/hwmon/{dir_name}/{DEVICE if below else ''}{base}", name, dir_name, base))
    out: dict[str, list[tuple[str, str]]] = {}
    for _, name, dir_name, base in sorted(bases):
        out.setdefault(str(name), []).append((dir_name, base))
    return out


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
