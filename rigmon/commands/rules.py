"""``rigmon rules list|test`` and ``rigmon doctor``."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

from ..model import nvml_state
from ..model.recording import Recording, RecordingError
from ..model.text import fit, terminal_width
from .common import UsageError, add_config, add_source, demo_path, load_settings, replay_source

if TYPE_CHECKING:
    from ..alerts.rules import Rule


def add_parser(sub) -> None:
    rules = sub.add_parser("rules", help="list the alert rules, or test them on a recording")
    rsub = rules.add_subparsers(dest="rules_command", required=True, metavar="ACTION")
    listing = rsub.add_parser("list", help="every rule in effect, with its condition")
    listing.add_argument(
        "--variables", action="store_true", help="the variables a rule of each kind can use, with what they mean"
    )
    add_config(listing)
    listing.set_defaults(func=cmd_rules_list)
    test = rsub.add_parser("test", help="print every transition the rules make on a recording")
    add_config(test)
    add_source(test)
    test.add_argument("--all", action="store_true", help="show info alerts too")
    test.set_defaults(func=cmd_rules_test)

    doctor = sub.add_parser("doctor", help="which rules cannot evaluate on this machine, and why")
    add_config(doctor)
    add_source(doctor)
    doctor.set_defaults(func=cmd_doctor)


def cmd_rules_list(args) -> int:
    """Each rule as a block that fits the terminal: its name, severity, kind and wait, then its
    condition, its resolve condition and its params, wrapped."""
    import textwrap

    from ..model.durations import format_duration

    width = max(60, terminal_width() or 100)
    if args.variables:
        from ..model.readings import KINDS

        for kind, variables in KINDS.items():
            print(f"{kind}:")
            for name, doc in variables.items():
                print(textwrap.fill(doc, width, initial_indent=f"  {name:<38} ", subsequent_indent=" " * 41))
        return 0
    config = load_settings(args)
    for spec in config.alerts.effective_rules():
        head = f"{spec.name:<26} {spec.severity:<8} {spec.kind:<6}"
        head += f" for {format_duration(spec.for_)}" if spec.for_ else ""
        print(head + ("" if spec.enabled else "  (disabled)"))
        fields = [("when", spec.when), ("clear", spec.clear or f"not ({spec.when})")]
        if spec.params:
            fields.append(("params", ", ".join(f"{k}={v}" for k, v in spec.params.items())))
        if spec.inhibits:
            fields.append(("inhibits", ", ".join(spec.inhibits)))
        for name, text in fields:
            print(
                textwrap.fill(
                    " ".join(text.split()), width, initial_indent=f"  {name + ':':<10}", subsequent_indent=" " * 12
                )
            )
    return 0


def cmd_rules_test(args) -> int:
    from ..offline import replay_rules

    config = load_settings(args)
    if args.replay is None and not args.demo:
        raise UsageError(
            "rules test runs the rules on a recording: give --replay FILE (rigmon record makes one), "
            "or --demo for the bundled H200 one"
        )
    path = str(demo_path()) if args.demo else args.replay
    recording = Recording.load(path)
    if args.replay_gpus is not None:
        recording = recording.widened(args.replay_gpus)
    if not recording.ticks:
        raise RecordingError(f"{path}: the recording has no ticks to test the rules on")
    t0 = recording.ticks[0]["t"]
    transitions = replay_rules(recording, config)
    shown = [t for t in transitions if args.all or t.severity != "info"]
    width = terminal_width()
    print(
        fit(
            f"{path}: {len(recording.ticks)} ticks over {recording.duration:.1f} s, "
            f"{recording.gpu_count} GPU(s), {sum(1 for s in config.alerts.effective_rules() if s.enabled)} rules",
            width,
        )
    )
    for t in shown:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t.time))
        subject = t.subject
        line = (
            f"{t.time - t0:8.1f} s  {stamp}Z  {t.status.upper():<8} {t.severity:<8} {t.alertname} [{subject}]  "
            f"{t.summary}"
        )
        print(fit(line, width, hang=21))  # a long one goes on under its status
    counts = {}
    for t in transitions:
        if t.status == "firing":
            counts[t.severity] = counts.get(t.severity, 0) + 1
    hidden = len(transitions) - len(shown)
    if hidden:
        print(f"({hidden} info transition(s) not shown: --all shows them)")
    print(
        f"{len(transitions)} transition(s); fired: "
        + (", ".join(f"{n} {sev}" for sev, n in sorted(counts.items())) or "none")
    )
    return 0


RULE_HANG = 29  # a rule's line continues under its verdict
# what NvmlUnavailable reads: whether rigmon can read the GPUs at all, known without NVML
WATCHER_VARIABLES = frozenset({"nvml_up", "nvml_error", "nvml_cause", "nvml_fix", "gpus_known"})


def cmd_doctor(args) -> int:
    from ..pipeline import Inputs, Outputs, Pipeline, opened
    from ..sinks.alerts import build_engine

    config = load_settings(args)
    source, label = replay_source(args)
    pipeline = Pipeline.from_config(config, Outputs.NOTHING, inputs=Inputs(source=source, event_thread=False))
    with opened(pipeline):
        if source is None:
            time.sleep(0.25)
        sample = pipeline.step().sample
    poller = pipeline.poller
    engine = build_engine(config.alerts)  # every rule, the disabled ones too: each gets a line
    entities = engine.entities(sample)
    width = terminal_width()

    def say(text: str = "", hang: int | None = None) -> None:  # every line within the terminal
        print(fit(text, width, hang))

    print(fit(f"rigmon doctor {label}".rstrip(), width))
    for line in _facts(sample, poller, config):
        say(f"  {line}")
    say()
    problems = evaluable = 0
    said: dict[str, list[str]] = {}  # each reason, said in full once, and the rules it keeps from evaluating
    from ..alerts.rules import Rule

    for rule in [Rule(s) for s in config.alerts.effective_rules()]:
        if not rule.spec.enabled:
            say(f"  {rule.name:<26} disabled in the config", RULE_HANG)
            continue
        why = _why_not(rule, entities, sample, poller, config)
        if why and why.startswith("partly: "):
            evaluable += 1
            say(f"  {rule.name:<26} ok, {why}", RULE_HANG)
        elif why:
            problems += 1
            say(f"  {rule.name:<26} cannot evaluate: {why if why not in said else why.split(' (')[0]}", RULE_HANG)
            said.setdefault(why, []).append(rule.name)
        elif rule.variables <= WATCHER_VARIABLES:  # it watches rigmon's own reading, not the hardware
            say(f"  {rule.name:<26} ok", RULE_HANG)
        else:
            evaluable += 1
            say(f"  {rule.name:<26} ok", RULE_HANG)
    say(f"\n{problems} rule(s) cannot evaluate here")
    fixes = [(why, names, _remedy(why, sample)) for why, names in said.items()]
    if any(fix for _, _, fix in fixes):
        say("\nWhat to do:")
        for why, names, fix in fixes:
            if fix:
                say(f"  {why.split(' (')[0]} ({len(names)} rule(s)): {fix}", 4)
    if not evaluable:
        say("\nNo rule can evaluate here: rigmon would watch nothing on this machine.")
        return 1
    return 0


_REMEDIES = (
    (
        "no fan sensors",
        "load the board's Super-I/O driver: sensors-detect (lm-sensors) names it, then modprobe it "
        "(nct6775, it87…); a VM or a container shows no fans",
    ),
    ("no CPU temperature", "modprobe coretemp (Intel) or k10temp (AMD); a VM shows none"),
    (
        "no power budget",
        "set [alerts.power_budget] watts to what the PSU may deliver (or the groups of a box with two PSUs)",
    ),
    (
        "no GPU fans",
        "nothing to do on passively cooled boards: a stopped chassis fan shows as GPU temperature rising against power",
    ),
)


def _remedy(why: str, sample) -> str:
    error = sample.system.nvml_error if sample.system is not None else None
    if error and why.startswith("NVML cannot start"):  # the fix for this error, not a guess
        return nvml_state.fix(error) or ""
    return next((fix for start, fix in _REMEDIES if why.startswith(start)), "")


def _facts(sample, poller, config) -> list[str]:
    from ..readers.nvml import bindings_version

    out = []
    gpu = poller.gpu
    system = sample.system
    if gpu is not None and system is not None:
        out += [
            f"GPU {g.index} ({g.name}, {g.uuid}): this box had it and NVML no longer lists it (GpuMissing)"
            for g in system.missing_gpus
        ]
    if gpu is None:
        out.append("GPUs: disabled in the config")
    elif gpu.unavailable:
        out.append(f"GPUs: {gpu.unavailable}")
        if system is not None and system.nvml_error:
            out.append(
                f"GPUs: to mend it: {nvml_state.fix(system.nvml_error)}; rigmon tries NVML again every "
                f"{config.gpu.nvml_retry:.0f} s and reads the GPUs once it answers"
            )
    else:
        out.append(
            f"GPUs: {len(sample.gpus)} ({', '.join(sorted({i.name for i in sample.gpu_info}))}), driver "
            f"{sample.system.driver_version}"
        )
        driver = sample.system.driver_version or "?"
        lacking, unbound = gpu.not_in_driver(), gpu.not_in_bindings()
        for calls_of, said in (
            (
                lacking,
                f"NVML calls driver {driver} does not have (each asked once, then left "
                f"out; where an older call answers, it is used and not listed)",
            ),
            (
                unbound,
                f"NVML calls nvidia-ml-py {bindings_version()} has no function for (an older call is used where "
                "there is one; pip install -U nvidia-ml-py reads them)",
            ),
            (
                {
                    i: tuple(set(c) - set(lacking.get(i, ())) - set(unbound.get(i, ())))
                    for i, c in gpu.missing().items()
                },
                "NVML calls not supported here (each asked once, then left out)",
            ),
        ):
            by_calls: dict[tuple[str, ...], list[int]] = {}
            for index, calls in calls_of.items():
                # with its arguments: a threshold the board lacks is not every threshold
                shown = tuple(sorted({c.replace(":", "(", 1) + ")" if ":" in c else c for c in calls}))
                if shown:
                    by_calls.setdefault(shown, []).append(index)
            for calls, indices in by_calls.items():
                out.append(f"GPU {','.join(map(str, indices))}: {said}: {', '.join(calls)}")
        major = (sample.system.driver_version or "").split(".")[0]
        if major.isdigit() and int(major) < 510:
            out.append(
                f"driver {sample.system.driver_version}: before R510 NVML's memory used includes the "
                f"driver's own reservation (a few hundred MB above what nvidia-smi shows on newer drivers)"
            )
        missing = gpu.not_recorded()
        if missing:
            out.append(
                f"recording: no answer for {', '.join(missing)}: what they read is unknown in this replay "
                f"(not recorded, not known to be unsupported)"
            )
        for g in sample.gpus:
            if g.asleep:
                out.append(
                    f"GPU {g.index}: asleep (its PCI device is runtime-suspended): asked nothing until it wakes, "
                    "so as not to wake it; no rule reads its silence as a fault"
                )
        for info in sample.gpu_info:
            if info.mig_enabled:
                mine = next((g for g in sample.gpus if g.index == info.index), None)
                count = len(mine.mig_instances or ()) if mine is not None else 0
                out.append(
                    f"GPU {info.index}: MIG mode is on ({count} instance(s)): NVML gives no GPU utilisation, so "
                    "the rules on it cannot evaluate there; each instance's memory and processes are read"
                )
            elif info.mig_pending:
                out.append(f"GPU {info.index}: MIG mode is set to go on at the next GPU reset")
            if info.fan_count == 0:
                out.append(
                    f"GPU {info.index}: no fans (passively cooled, fan speed NotSupported): a failing "
                    f"chassis fan shows only as temperature rising against power"
                )
            if info.persistence_mode is False:
                out.append(
                    f"GPU {info.index}: persistence mode is off (the GPU re-initialises when the last "
                    f"client exits; rigmon keeps NVML open, other tools may not)"
                )
    host = sample.host
    if host is not None:
        out.append(f"hwmon: {len(host.temperatures)} temperature(s), {len(host.fans)} fan(s)")
        for note in host.notes:
            out.append(f"host: {note}")
        if config.host.rapl and not host.cpu_energy:
            out.append("RAPL: no CPU energy readable (no intel-rapl zones, or root-only on this kernel)")
    out.append(f"notifiers: {len(config.notifiers) or 'none configured (transitions go to the log only)'}")
    hidden = hidden_from_the_service()
    if hidden:
        out.append(
            f"service: {hidden[0]} is under {hidden[1]}, which rigmon.service hides (ProtectHome=yes): "
            f"run from there the unit fails with status 203/EXEC. "
            f"Make its venv from the system Python: sudo /usr/bin/python3 -m venv /opt/rigmon"
        )
    return out


PROTECTED_HOMES = ("/root", "/home", "/run/user")  # what ProtectHome=yes makes inaccessible


def hidden_from_the_service(paths: tuple[str, ...] | None = None) -> tuple[str, str] | None:
    """The first of this interpreter and rigmon's own files (after symlinks: a venv's python
    links to the Python it was made from) that ProtectHome=yes would hide from the service, and
    the directory that hides it."""
    import rigmon

    for path in paths if paths is not None else (sys.executable, rigmon.__file__):
        real = os.path.realpath(path)
        for home in PROTECTED_HOMES:
            if real == home or real.startswith(home + "/"):
                return real, home
    return None


def _why_no_drift(sample, config) -> str:
    """Why the GPUs have no cooling drift yet: the baselines off, learning, or not comparing."""
    from ..model.durations import format_duration

    if not config.cooling.enabled:
        return "the cooling baselines are off ([cooling] enabled = false)"
    gpus = [g for g in sample.gpus if g.cooling_state is not None]
    learning = [g.cooling_learning_seconds for g in gpus if g.cooling_state == "learning"]
    if learning:
        return (
            f"learning each GPU's cooling baseline from its steady load: {format_duration(max(learning))} "
            "to go ([cooling] learn; rigmon baseline show)"
        )
    if any(g.cooling_state == "measuring" for g in gpus):
        return "the first window of steady load after the baselines ([cooling] window)"
    if gpus:
        return "the GPUs ran at powers their baselines never saw (rigmon baseline show)"
    return "no GPU's cooling seen yet"


def _why_not(rule: Rule, entities: dict, sample, poller, config) -> str | None:
    from ..alerts.entities import MISSING

    # a GPU the box had and NVML no longer lists has nothing but ``missing`` to read
    mine = [
        v for k, v in entities.items() if k[0] == rule.kind and (k[1:2] != (MISSING,) or "missing" in rule.when.reads)
    ]
    if not mine:
        return {
            "gpu": (poller.gpu.unavailable if poller.gpu and poller.gpu.unavailable else "no GPUs"),
            "gpu_fan": "no GPU fans reported (passively cooled boards: H100/H200/A100/T4, or no GPUs)",
            "fan": "no fan sensors visible (no hwmon fan inputs: a VM, a container, or no Super-I/O driver "
            "such as nct6775/it87 loaded)",
            "cpu": "no CPU temperature sensor (no coretemp/k10temp/zenpower in hwmon)",
            "psu": "no power budget configured ([alerts.power_budget])",
            "sensor": "no sensors seen",
            "host": "no host reading",
        }[rule.kind]
    gpu_vars = {v for v in rule.variables if v.startswith("gpu") and v not in WATCHER_VARIABLES}
    if rule.kind == "host" and gpu_vars and (poller.gpu is None or poller.gpu.unavailable):
        return poller.gpu.unavailable if poller.gpu else "GPUs are disabled in the config"
    why_processes = "process list not readable (containers hide other PIDs)"
    if poller.gpu is not None:
        lacking = {c for calls in poller.gpu.not_in_driver().values() for c in calls}
        if any(c.startswith("nvmlDeviceGetComputeRunningProcesses") for c in lacking):
            why_processes = f"driver {sample.system.driver_version or '?'} has no process list call rigmon can use"
        elif any(
            c.startswith("nvmlDeviceGetComputeRunningProcesses")
            for calls in poller.gpu.unsupported().values()
            for c in calls
        ):
            why_processes = "NVML gives no process list on this board"
    why_cooling = _why_no_drift(sample, config)
    mig = [i.index for i in sample.gpu_info if i.mig_enabled]
    why_utilization = f"MIG mode is on (GPU {', '.join(map(str, mig))}): NVML gives no GPU utilisation" if mig else None
    detail = {
        "processes": why_processes,
        "processes_memory_bytes": why_processes,
        "cpu_utilization_ratio": "CPU utilisation not read",
        "cooling_drift_own_celsius": why_cooling,
        "gpu_cooling_drift_shared_celsius": (
            "a box with one GPU: its drift is its own" if len(sample.gpus) == 1 else why_cooling
        ),
    }
    if why_utilization:
        detail.update(utilization_gpu_ratio=why_utilization, utilization_memory_ratio=why_utilization)

    from ..model.readings import KINDS

    def absent(variables: set[str]) -> list[str]:
        return sorted(v for v in variables if v in KINDS[rule.kind] and all(e.get(v) is None for e in mine))

    def why(var: str) -> str:
        return f"{var} not available" + (f" ({detail[var]})" if var in detail else " on this hardware")

    terms = rule.when.terms()
    blind = [(text, absent(names)) for text, names in terms if absent(names)]
    if not blind:
        return None
    said = "; ".join(f"'{text}': {', '.join(why(v) for v in missing)}" for text, missing in blind)
    missing = set().union(*(set(m) for _, m in blind))
    if len(blind) == len(terms) or not rule.when.can_be_true(missing):
        return said
    return f"partly: {said}; the other terms still evaluate"
