"""Who the GPU processes are: user, command line, and the job they belong to, from /proc.

NVML names the processes that hold a GPU by PID only. For each, this reads /proc/PID once
(while it keeps holding a GPU): the user, the command line (shortened), the start time, the
parent, process group and session, and the cgroup, which says whether it runs in a container,
a systemd service or a Slurm job. A job is what its owner launched, found in this order:

1. that unit (container, Slurm job, systemd service);
2. else the nearest ancestor that is a known launcher (``torchrun`` and ``python -m
   torch.distributed.run``, ``accelerate launch``, ``deepspeed``, ``mpirun``/``mpiexec``,
   ``horovodrun``, ``srun``, Ray's ``raylet``, and the names ``jobs.launchers`` adds):
   ``torchrun:<pid>``. torch's elastic agent starts each worker in a session of its own,
   so without this one DDP run would be one job per worker;
3. else its process group (a training script and the workers it started, ``mp.spawn``, a
   shell's ``a & b`` pair), ``pgid:<pgid>``.

A job's key begins with its owner (``alice/pgid:4242``, ``root/docker:4f3c2a1b0e9d``): two
users never share one. In a user's delegated cgroup subtree (``user@UID.service/…``), where
the names are the user's own, only a container counts (a rootless podman or docker one:
``erin/podman:<id>``, one job for all its process groups), never a service or Slurm job name.
A process group is told apart from an earlier one with the same PGID by its leader's start time.

The ancestors are read with the process, at most ``MAX_ANCESTORS`` up, stopping at a launcher
or at the session's leader (the login shell); they are kept in the same answer, so a
recording groups on replay as the live box did.

``raw(pids, proc)`` is what a recording stores; ``parse`` turns it into ``ProcessInfo``.
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ..model.sample import ProcessInfo
from ..model.text import decode, printable

MAX_COMMAND = 160  # characters of a command line shown
MAX_COMMAND_BYTES = 4096  # of /proc/PID/cmdline read (a command line can be megabytes)
MAX_CGROUP_BYTES = 8192
MAX_ANCESTORS = 16  # parents read above a GPU process, at most

# launcher: a program (or the script an interpreter runs) -> the name its jobs are keyed by
LAUNCHERS = {
    "torchrun": "torchrun",
    "deepspeed": "deepspeed",
    "mpirun": "mpirun",
    "mpiexec": "mpirun",
    "orterun": "mpirun",
    "prterun": "mpirun",
    "horovodrun": "horovodrun",
    "srun": "srun",
    "raylet": "ray",
}
# launcher: a module run with python -m
LAUNCHER_MODULES = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "accelerate.commands.launch": "accelerate",
    "deepspeed.launcher.launch": "deepspeed",
    "deepspeed.launcher.runner": "deepspeed",
    "horovod.runner.launch": "horovodrun",
}


def raw(pids: list[int], proc: str | Path = "/proc", launchers: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """``{pid: {"user", "uid", "cmdline", "cgroup", "ppid", "pgid", "sid", "start"}}`` for these
    PIDs and the ancestors that say which job each belongs to (see the module's text); a PID
    that is gone (or hidden: another PID namespace) is left out."""
    base = Path(proc)
    boot = _boot_time(base)
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, dict[str, Any]] = {}

    def read(pid: int) -> dict[str, Any] | None:
        if str(pid) not in out:
            try:
                out[str(pid)] = _read(base / str(pid), boot, ticks)
            except (OSError, ValueError, IndexError):  # gone, hidden, or unreadable: this process only
                return None
        return out[str(pid)]

    for pid in pids:
        entry = read(pid)
        if entry is None or unit_of(entry["cgroup"]) is not None:
            continue  # a container's, a service's or a Slurm job's: the unit is the job
        # up to a launcher, or to the session's leader (the login shell): nothing above is the job's
        for _ in walk_up(pid, read, lambda p, e: e["sid"] == p or launcher_of(e["cmdline"], launchers) is not None):
            pass
    return out


def start_times(pids: list[int], proc: str | Path = "/proc") -> dict[str, float]:
    """``{pid: start}`` from /proc/PID/stat alone (one read a process): what tells, poll by poll,
    that a PID now names another process than the one read before."""
    base = Path(proc)
    boot = _boot_time(base)
    if boot is None:
        return {}
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            out[str(pid)] = _started(_stat(base / str(pid)), boot, ticks)
        except (OSError, ValueError, IndexError):
            continue
    return out


def _read(d: Path, boot: float | None, ticks: int) -> dict[str, Any]:
    """One process's entry, read as bytes: a name that is not UTF-8 is replaced in that
    process's entry alone, never an error for the others."""
    fields = _stat(d)
    uid = d.stat().st_uid
    cmdline = (d / "cmdline").read_bytes()[:MAX_COMMAND_BYTES]
    cgroup = decode((d / "cgroup").read_bytes()[:MAX_CGROUP_BYTES])
    ppid, pgid, sid, start = int(fields[1]), int(fields[2]), int(fields[3]), _started(fields, boot, ticks)
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return {
        "user": user,
        "uid": uid,
        "cmdline": decode(cmdline.replace(b"\0", b" ")).strip(),
        "cgroup": cgroup,
        "ppid": ppid,
        "pgid": pgid,
        "sid": sid,
        "start": start,
    }


def _stat(d: Path) -> list[str]:
    """/proc/PID/stat's fields after the command name (which may hold spaces and any byte)."""
    return decode((d / "stat").read_bytes()).rsplit(")", 1)[-1].split()


def _started(fields: list[str], boot: float | None, ticks: int) -> float | None:
    """When the process started (unix seconds), from its stat fields and the boot time."""
    return round(boot + int(fields[19]) / ticks, 2) if boot is not None else None


def _boot_time(base: Path) -> float | None:
    try:
        for line in (base / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def parse(
    answer: dict[str, dict[str, Any]], launchers: tuple[str, ...] = (), pids: Iterable[int] | None = None
) -> dict[int, ProcessInfo]:
    """Entries of ``raw`` (live or recorded) as ``ProcessInfo``: those of ``pids`` (every one
    where None; the ancestors the answer holds serve to name the jobs). Every string is made
    printable here, once: a user's command line, cgroup or name reaches terminals, logs, the
    ledger and the line protocol only as text without control characters or line breaks."""
    out = {}
    for key in answer if pids is None else map(str, pids):
        try:
            pid = int(key)
        except (TypeError, ValueError):
            continue
        p = answer.get(key)
        if not isinstance(p, dict):
            continue
        command = _shown(p.get("cmdline"))
        unit = unit_of(_text(p.get("cgroup")))
        unit = printable(unit) if unit is not None else None
        pgid, start = _int(p.get("pgid")), _float(p.get("start"))
        job, job_start, job_command = unit, None, None
        if unit is None:
            found = _launcher_above(pid, answer, launchers)
            if found is not None:
                name, above = found
                job, job_start = f"{name}:{above}", _float(answer[str(above)].get("start"))
                job_command = _shown(answer[str(above)].get("cmdline"))
            else:
                group = pgid if pgid is not None else pid
                job = f"pgid:{group}"
                leader = answer.get(str(group))
                if isinstance(leader, dict):  # the group's leader: who it is tells a reused PGID apart
                    job_start = _float(leader.get("start"))
                    job_command = _shown(leader.get("cmdline")) if group != pid else None
        user = p.get("user")
        user = printable(user) if user is not None else None
        # whose it is, in its key: two users never share a job, whatever they name their units
        owner = (user or printable(str(p.get("uid", "?")))).replace("/", "_")
        out[pid] = ProcessInfo(
            pid, user, command, unit, f"{owner}/{job}", start, _int(p.get("ppid")), pgid, job_start, job_command
        )
    return out


def _shown(cmdline: Any) -> str | None:
    command = printable(_text(cmdline)) or None
    if command and len(command) > MAX_COMMAND:
        command = command[: MAX_COMMAND - 1] + "…"
    return command


def _launcher_above(pid: int, answer: dict, launchers: tuple[str, ...]) -> tuple[str, int] | None:
    """(launcher name, its PID) of the nearest ancestor of ``pid`` in ``answer`` that is a launcher."""
    for parent, entry in walk_up(pid, lambda p: answer.get(str(p))):
        name = launcher_of(_text(entry.get("cmdline")), launchers)
        if name is not None:
            return name, parent
    return None


def walk_up(
    pid: int, lookup: Callable[[int], Any], stop: Callable[[int, dict], bool] | None = None
) -> Iterator[tuple[int, dict]]:
    """The ancestors of ``pid``, nearest first, as ``lookup(pid)`` gives their /proc answers: at
    most MAX_ANCESTORS, never init, never round a loop (a damaged recording), and none after the
    first one ``stop(pid, answer)`` is true of. The one walk /proc, a recording and a replay share."""
    seen = {pid}
    entry = lookup(pid)
    for _ in range(MAX_ANCESTORS):
        parent = _int(entry.get("ppid")) if isinstance(entry, dict) else None
        if parent is None or parent <= 1 or parent in seen:
            return
        seen.add(parent)
        entry = lookup(parent)
        if not isinstance(entry, dict):
            return
        yield parent, entry
        if stop is not None and stop(parent, entry):
            return


def launcher_of(cmdline: str, extra: tuple[str, ...] = ()) -> str | None:
    """The launcher a command line runs (``torchrun``, ``accelerate``…), or None: its program,
    or the script or module an interpreter runs, is a known launcher or one of ``extra``
    (names of programs, scripts or ``-m`` modules)."""
    words = cmdline.split()
    if not words:
        return None
    program = words[0].rsplit("/", 1)[-1]
    rest = words[1:]
    if _INTERPRETER.match(program):
        for i, word in enumerate(rest):
            if word == "-m" or (word.startswith("-m") and len(word) > 2):
                module = rest[i + 1] if word == "-m" and i + 1 < len(rest) else word[2:]
                return LAUNCHER_MODULES.get(module) or (module if module in extra else None)
            if word in ("-c", "-"):
                return None
            if not word.startswith("-"):
                program, rest = word.rsplit("/", 1)[-1], rest[i + 1 :]
                break
        else:
            return None
    if program == "accelerate":
        return "accelerate" if rest[:1] == ["launch"] else None
    return LAUNCHERS.get(program) or (program if program in extra else None)


def executable(command: str | None) -> str | None:
    """What a command line names without its arguments (which may hold a token or a password):
    the program's file name, and for an interpreter the script or module it runs
    (``python train.py``, ``python -m torch.distributed.run``)."""
    if not command:
        return None
    words = command.split()
    program = words[0].rsplit("/", 1)[-1]
    if _INTERPRETER.match(program):
        rest = iter(words[1:])
        for word in rest:
            if word == "-m":
                return f"{program} -m {next(rest, '')}".rstrip()
            if word.startswith("-m") and len(word) > 2:
                return f"{program} -m {word[2:]}"
            if word == "-c":
                return f"{program} -c"
            if not word.startswith("-"):
                return f"{program} {word.rsplit('/', 1)[-1]}"
    return program


_INTERPRETER = re.compile(r"^(python[0-9.]*|pypy[0-9.]*|perl|ruby|node|bash|sh)$")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


_UNITS = (
    (re.compile(r"docker[-/]([0-9a-f]{12})[0-9a-f]*"), "docker"),
    (re.compile(r"libpod-([0-9a-f]{12})[0-9a-f]*"), "podman"),
    (re.compile(r"(?:cri-containerd|crio)-([0-9a-f]{12})[0-9a-f]*"), "k8s"),
    (re.compile(r"kubepods.*?pod([0-9a-f_-]{8,})"), "k8s"),
    (re.compile(r"/job_(\d+)"), "slurm"),
    (re.compile(r"/([^/]+\.service)(?:/|$)"), "systemd"),
)


_CONTAINERS = _UNITS[:2]  # docker and podman: what a user runs rootless in her own subtree
_DELEGATED = re.compile(r"/user@\d+\.service(?:/|$)")


def unit_of(cgroup: str) -> str | None:
    """The container, Slurm job or systemd service a process runs in, from /proc/PID/cgroup
    (v2's single line or v1's controllers); None for a login session's scope. In a user's own
    delegated subtree (``user@UID.service/…``) the names are the user's to choose (a
    ``train-alice.service``, a ``job_<n>`` of her own making): there only a container counts (a
    rootless podman or docker one, ``podman:<id>``), and the job's key begins with its owner,
    so a name she made up joins none but her own jobs; no service or Slurm job is taken from it."""
    paths = [line.split(":", 2)[2] for line in cgroup.splitlines() if line.count(":") >= 2]
    system = [path for path in paths if not _DELEGATED.search(path)]
    for units, where in ((_UNITS, system), (_CONTAINERS, [path for path in paths if path not in system])):
        for pattern, kind in units:
            for path in where:
                candidates = [m.group(1) for m in pattern.finditer(path)]
                if candidates:
                    return f"{kind}:{candidates[-1]}"
    return None


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _float(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
