"""The daemon's page at ``/`` and its API (``/api/state``, ``/api/history``, ``/api/jobs``),
on the metrics listener with its TLS and basic auth.

The page is one self-contained HTML file (inline CSS and script, no CDN, no font): it asks
``api/state`` every poll and ``api/charts`` for its charts, which are drawn here by
``rigmon.http.charts``, the burn-in report's module, so the two read alike. It reads what the
pipeline's sinks already hold (the latest sample, the alerts' state, the history, the job
ledger, the last burn-in's summary) and changes none of it. Every text it shows came from
NVML, hwmon, /proc or a file: the script sets it as text, never as markup, and the charts'
SVG escapes its own.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from .. import DATA, __version__
from ..alerts import runbook
from ..alerts.engine import subject_of
from ..model import nvml_state
from ..model.readings import PAGE
from ..model.sample import mean_of, to_jsonable
from ..model.text import printable
from ..sinks.history import History
from .charts import CHART_CSS, COLORS, chart
from .server import Static

if TYPE_CHECKING:
    from ..config.schema import JobsConfig
    from ..config.settings import Settings
    from ..pipeline import Pipeline

RANGES = {"1h": 3600.0, "6h": 6 * 3600.0, "24h": 86400.0, "7d": 7 * 86400.0}
CHART_POINTS = 240  # per series and chart: about two pixels each, with the min-max band for the rest
MIN_CHART_SECONDS = 10.0  # a range younger than its span is drawn from its first data (10 s at least)
MAX_QUERY_SERIES = 64
MAX_QUERY_POINTS = 20000
MAX_REPORT_BYTES = 32 << 20
RECENT_JOBS = 20
MARK_COLORS = {"firing": "#d62728", "resolved": "#2ca02c"}
JSON = "application/json"
REPORT_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'none'"
)


def _page() -> tuple[Static, str]:
    """The page, and its Content-Security-Policy: its own script alone runs (by its hash),
    nothing is loaded from elsewhere, no other site may frame it. Shipped without its
    indentation and its comments (a quarter less to send)."""
    text = (DATA / "page.html").read_text(encoding="utf-8")
    text = "\n".join(line.strip() for line in text.splitlines() if not line.lstrip().startswith("// "))
    text = re.sub(r"  // .*", "", text)  # and the script's comments after code (two spaces, as written)
    text = text.replace("/*CHART_CSS*/", CHART_CSS)
    # what a card shows besides its summary, from the table of readings: in the page, not in
    # every poll's state (it changes only with rigmon)
    shown = [{"name": r.name, "unit": r.unit, "doc": r.doc} for r, _ in PAGE]
    text = text.replace("/*READINGS*/[]", json.dumps(shown, ensure_ascii=True).replace("<", "\\u003c"))
    scripts = re.findall(r"<script>(.*?)</script>", text, re.S)
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'" for s in scripts)
    csp = (
        f"default-src 'self'; script-src {hashes or chr(39) + 'none' + chr(39)}; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )
    return Static(text.encode()), csp


class Page:
    """The routes: ``routes`` answered on the serving loop (small), ``slow_routes`` off it."""

    def __init__(
        self,
        pipeline: Pipeline,
        history: History,
        jobs: JobsConfig | Settings,
        started: float | None = None,
        host: str | None = None,
    ):
        """``jobs``: the config's [jobs] (the price of a kWh); the box is the pipeline's."""
        self.pipeline = pipeline
        self.history = history
        from ..sinks.jobs import ledger_path

        box = pipeline.box
        # the box the samples come from: the name configured, else a replay's recorded box (never
        # this machine's name for a recording of another), else this machine's
        self.host = host or (box.host if box.named else self._replay_host() or box.host)
        self.labels = dict(box.labels)
        self.interval = history.interval  # the polls' spacing, as the history keeps them
        self.price_per_kwh, self.currency = jobs.price_per_kwh, jobs.currency
        self.ledger = ledger_path(box.state_dir)
        # one clock: the samples' (a replay's, run at --speed, too), from the first poll on
        first = pipeline.latest
        self.started = started if started is not None else first.time if first is not None else time.time()
        self._html, self._csp = _page()
        self._charts: dict[tuple[str, str], tuple[float | None, float, list[str]]] = {}  # (range, card): drawn
        self._lock = threading.Lock()
        # the week of every series, as a script asks /api/history for it: its closed groups'
        # text made ahead, in the history's background
        history.keep_ready(lambda: self.history_json(f"since=-{RANGES['7d']:.0f}"))

    @property
    def routes(self) -> dict:
        return {"/": self.index, "/api/state": self.state, "/runbook": self.runbook}

    @property
    def slow_routes(self) -> dict:
        return {
            "/api/charts": self.charts,
            "/api/history": self.history_json,
            "/api/jobs": self.jobs,
            "/burnin/report": self.burnin_report,
        }

    # --- the page and its state -------------------------------------------------------------
    def index(self, query: str) -> tuple[str, bytes, tuple]:
        return "text/html; charset=utf-8", self._html, (("Content-Security-Policy", self._csp),)

    def _drift_alert(self) -> float | None:
        """GpuCoolingDrift's threshold as this daemon runs it (drawn on the drift chart); None where it is off."""
        alerts = self.pipeline.alerts
        for rule in alerts.engine.rules if alerts is not None else ():
            if rule.spec.name == "GpuCoolingDrift":
                value = rule.spec.params.get("min_celsius")
                return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        return None

    def runbook(self, query: str) -> tuple[str, bytes, tuple]:
        """The rules this daemon evaluates, each at its #name: where an alert's runbook_url goes."""
        alerts = self.pipeline.alerts
        specs = [rule.spec for rule in alerts.engine.rules] if alerts is not None else []
        return "text/html; charset=utf-8", runbook.html(specs, self.host), (("Content-Security-Policy", runbook.CSP),)

    def _replay_host(self) -> str | None:
        source = self.pipeline.source
        if source is None:
            return None
        path = source.recording.path
        named = path.name.removesuffix(".jsonl").removesuffix(".rec") if path is not None else None
        return source.recording.hostname or (f"replay of {printable(named)[:200]}" if named else "a replay")

    def _replay(self) -> dict | None:
        """The recording replayed in place of this box's hardware: its file and what it says it is."""
        source = self.pipeline.source
        if source is None:
            return None
        path = source.recording.path
        said = source.recording.header.get("source")
        return {
            "file": printable(path.name)[:200] if path is not None else None,
            "source": printable(said)[:300] if isinstance(said, str) else None,
        }

    def state(self, query: str) -> tuple[str, bytes]:
        return JSON, _json(self.state_dict())

    def state_dict(self) -> dict:
        sample = self.pipeline.latest
        alerts = self.pipeline.alerts.state if self.pipeline.alerts is not None else None
        now = sample.time if sample is not None else time.time()
        out = {
            "host": self.host,
            "labels": self.labels,
            "rigmon": __version__,
            "started": self.started,
            "time": now,
            "interval": self.interval,
            "boot": None if self.pipeline.source is not None else _boot_time(),  # a replay: not this box's
            "driver": None,
            "cuda": None,
            "replay": self._replay(),  # what is shown is a recording, not this box: said at the top
            "gpus_note": None,
            "nvml": None,  # NVML that cannot start: its error, what it means, what mends it
            "missing_gpus": [],  # GPUs the box has had that NVML no longer lists
            "gpus": [],
            "sensors": None,
            "budgets": [],
            "alerts": [],
            "transitions": [],
            "burnin": None,
        }
        if sample is not None:
            system = sample.system  # None where the GPUs are not read
            if system is not None:
                out["driver"], out["cuda"] = system.driver_version, system.cuda_driver_version
                error = system.nvml_error
                if error and (error != nvml_state.NO_DRIVER or system.missing_gpus):
                    out["nvml"] = {"error": error, "cause": nvml_state.cause(error), "fix": nvml_state.fix(error)}
                out["missing_gpus"] = [{"index": g.index, "uuid": g.uuid, "name": g.name} for g in system.missing_gpus]
            if not sample.gpus:  # an empty GPUs section says why
                gpu = next((r for r in sample.readers if r.name == "gpu"), None)
                out["gpus_note"] = (
                    "GPUs not read ([gpu] enabled = false)"
                    if gpu is None
                    else f"no GPU: {gpu.error}"
                    if gpu.error
                    else "no NVIDIA GPU found"
                )
            info = {i.index: i for i in sample.gpu_info}
            for g in sample.gpus:
                i = info.get(g.index)
                out["gpus"].append(
                    {
                        "index": g.index,
                        "uuid": g.uuid,
                        "name": i.name if i else None,
                        "lost": g.lost,
                        "asleep": g.asleep,
                        "mig": {
                            "enabled": i.mig_enabled,
                            "pending": i.mig_pending,
                            "instances": [m._asdict() for m in g.mig_instances or ()],
                        }
                        if i is not None and (i.mig_enabled or i.mig_pending)
                        else None,
                        # the table of readings' page=True, each under its name
                        **{reading.name: getattr(g, field) for reading, field in PAGE},
                        "slowdown_celsius": i.temperature_thresholds.slowdown if i else None,
                        "fan_speed_ratio": mean_of(g.fan_speed_ratios or ()),
                        "fan_target_ratio": mean_of(g.fan_target_ratios or ()),
                        "cooling": {  # against its own baseline (rigmon.readers.cooling), where one is kept
                            "state": g.cooling_state,
                            "learning_seconds": g.cooling_learning_seconds,
                            "drift": g.cooling_drift_celsius,
                            "own": g.cooling_drift_own_celsius,
                            "at_watts": g.cooling_at_watts,
                            "fan_drift": g.cooling_fan_drift_ratio,
                            "blind_seconds": g.cooling_blind_seconds,
                            "excess": g.cooling_baseline_excess_celsius,
                        }
                        if g.cooling_state is not None
                        else None,
                        "max_pcie_generation": i.max_pcie_generation if i else None,
                        "max_pcie_width": i.max_pcie_width if i else None,
                        "clock_events": list(g.clock_events.active()) if g.clock_events is not None else [],
                    }
                )
            host = sample.host
            if host is not None:
                rapl = self.history.query(["host/rapl_watts"], now - 30, now)["series"].get("host/rapl_watts")
                out["sensors"] = {
                    "cpu_temperatures": [
                        {
                            "socket": t.socket,
                            "sensor": f"{t.chip}/{t.sensor}",
                            "celsius": t.celsius,
                            "high_celsius": t.high_celsius,
                        }
                        for t in host.cpu_temperatures
                    ],
                    "fans": [
                        {"name": f"{f.chip}/{f.label}", "rpm": f.rpm, "turned": f.turned, "duty": f.duty}
                        for f in host.fans
                    ],
                    "load1": host.load1,
                    "cpu_utilization_ratio": host.cpu_utilization_ratio,
                    "cpu_count": host.cpu_count,
                    "rapl_watts": rapl[-1][2] if rapl else None,
                }
        if alerts is not None:
            out["budgets"] = [b._asdict() for b in alerts.budgets]
            out["alerts"] = [
                {**a.as_dict(), "age_seconds": now - a.since if a.since is not None else None} for a in alerts.firing
            ]
        out["transitions"] = [
            {"time": t, "status": status, "alertname": name, "labels": labels, "subject": subject_of(labels)}
            for t, status, name, labels in self.history.marks_since(now - 86400)
        ]
        burnin = self._burnin()
        if burnin is not None:
            summary, html = burnin
            out["burnin"] = {
                "verdict": summary.get("verdict"),
                "started_unix": summary.get("started_unix"),
                "duration_seconds": summary.get("duration_seconds"),
                "report": "burnin/report" if html is not None else None,
            }
        return out

    # --- the charts -----------------------------------------------------------------------------
    def charts(self, query: str) -> tuple[str, bytes]:
        """The cards' charts for ``range`` as SVG: ``cards`` (GPU indexes and ``host``, comma-
        separated; every card where not given), as the page asks for the cards on its screen.
        Each card's are drawn again once a third of the range's bucket has passed (5 s for the
        hour's 15 s buckets), or every poll where polls are further apart, and shared by every
        open page meanwhile. Drawing 8 GPUs' charts takes tens of milliseconds: every poll, it
        would cost an open page several per cent of a core. The answer says when each card was
        drawn (``drawn``), how often each is drawn again (``every``), and when the first of them
        will be (``next``)."""
        span_name = _one(query, "range", "1h")
        if span_name not in RANGES:
            raise ValueError(f"range: one of {', '.join(RANGES)}")
        sample = self.pipeline.latest
        known = [str(g.index) for g in sample.gpus] if sample is not None else []
        known.append("host")
        asked = set(_one(query, "cards", "").split(","))
        cards = [c for c in known if c in asked] if asked != {""} else known  # no more than there are
        latest = self.history.latest
        every = max(RANGES[span_name] / CHART_POINTS / 3, self.interval)
        with self._lock:
            got = {card: self._charts.get((span_name, card)) for card in cards}
        stale = [
            card
            for card, cached in got.items()
            if cached is None
            or not (
                cached[0] == latest or (latest is not None and cached[0] is not None and latest - cached[0] < every)
            )
        ]
        if stale:
            drawn = self.draw(span_name, stale)
            with self._lock:
                for card in stale:
                    got[card] = self._charts[(span_name, card)] = (latest, drawn["time"], drawn["cards"].get(card, []))
        oldest = min((cached[0] for cached in got.values() if cached[0] is not None), default=None)
        answer = {
            "range": span_name,
            "time": max((cached[1] for cached in got.values()), default=latest),
            "every": every,
            "next": oldest + every if oldest is not None else None,  # drawn again from then
            "drawn": {card: cached[1] for card, cached in got.items()},
            "gpus": {card: cached[2] for card, cached in got.items() if card != "host"},
        }
        if "host" in got:
            answer["host"] = got["host"][2]
        return JSON, json.dumps(answer).encode()

    def draw(self, span_name: str, cards: list[str] | None = None) -> dict:
        """``{"time", "cards": {card: [svg, ...]}}``: the charts of ``cards`` (GPU indexes as
        text, and ``host``; every card where None), from the series they chart only."""
        span = RANGES[span_name]
        sample = self.pipeline.latest
        now = self.history.latest or time.time()
        since = now - span
        step = span / CHART_POINTS
        gpus_now = sample.gpus if sample is not None else ()
        wanted = set(cards) if cards is not None else {*(str(g.index) for g in gpus_now), "host"}
        prefixes = tuple(f"gpu{c}/" for c in wanted if c != "host") + (("host/", "psu/") if "host" in wanted else ())
        names = [n for n in self.history.series_names() if n.startswith(prefixes)]
        got = self.history.query(names, since, now, step=step)["series"]
        first = min((points[0][0] for points in got.values() if points), default=None)
        if first is not None and first > since + step:  # younger than the range: it starts where its data does
            span = max(now - first, MIN_CHART_SECONDS) * 1.05
            since, step = now - span, span / CHART_POINTS
            got = self.history.query(names, since, now, step=step)["series"]
            # read at its finest, the first poll may come after the first bucket began
            first = min((points[0][0] for points in got.values() if points), default=first)
            span = max(now - first, MIN_CHART_SECONDS) * 1.05
            since = now - span

        def pts(name: str, scale: float = 1.0) -> list:
            return [(p[0] - since, p[1] * scale, p[2] * scale, p[3] * scale) for p in got.get(name, ())]

        def marks(match) -> list:  # (t, colour, what the line's title says, the name written beside it)
            return [
                (
                    t - since,
                    MARK_COLORS.get(status, "#555"),
                    f"{status} {name} {subject_of(labels)}",
                    name if status == "firing" else "",
                )
                for t, status, name, labels in self.history.marks_since(since)
                if match(labels)
            ]

        kw = {"span": span, "ago": True, "width": 460, "height": 190}
        info = {i.index: i for i in sample.gpu_info} if sample is not None else {}
        gpus = {}
        for g in gpus_now:
            if str(g.index) not in wanted:
                continue
            time.sleep(0)  # drawn on the page thread: the serving loop gets the GIL between cards
            p = f"gpu{g.index}/"
            i = info.get(g.index)
            m = marks(lambda labels, index=str(g.index): labels.get("gpu") == index)
            limit = g.power_limit_watts
            slowdown = i.temperature_thresholds.slowdown if i else None
            total = g.memory_total_bytes
            gpus[str(g.index)] = [
                chart(
                    "power",
                    [("power", pts(p + "power_watts"), COLORS[0]), ("limit", pts(p + "power_limit_watts"), "#888")],
                    "W",
                    [("limit", limit, "#555")] if limit else [],
                    zero=True,
                    above=limit,
                    marks=m,
                    **kw,
                ),
                chart(
                    "temperature",
                    [
                        ("GPU", pts(p + "temperature_celsius"), COLORS[1]),
                        ("memory", pts(p + "memory_temperature_celsius"), COLORS[4]),
                    ],
                    "°C",
                    [("slowdown", slowdown, "#d62728")] if slowdown else [],
                    above=slowdown,
                    mark_over=("slowdown", slowdown) if slowdown else None,
                    marks=m,
                    **kw,
                ),
                chart(
                    "utilisation",
                    [("GPU", pts(p + "utilization_gpu_ratio", 100), COLORS[2])],
                    "%",
                    zero=True,
                    above=100,
                    marks=m,
                    **kw,
                ),
                chart(
                    "SM clock",
                    [("SM", pts(p + "sm_clock_hertz", 1e-6), COLORS[3])],
                    "MHz",
                    [("max", i.max_sm_clock_hertz / 1e6, "#555")] if i and i.max_sm_clock_hertz else [],
                    zero=True,
                    marks=m,
                    **kw,
                ),
                chart(
                    "memory used",
                    [("used", pts(p + "memory_used_bytes", 2**-30), COLORS[5])],
                    "GiB",
                    [("total", total / 2**30, "#555")] if total else [],
                    zero=True,
                    marks=m,
                    **kw,
                ),
                chart(
                    "fans",
                    [
                        ("asked", pts(p + "fan_target_ratio", 100), COLORS[6]),
                        ("turning", pts(p + "fan_speed_ratio", 100), COLORS[7]),
                    ],
                    "%",
                    zero=True,
                    above=100,
                    marks=m,
                    **kw,
                ),
                # one unit an axis: the link's generation, its lanes, its replays
                chart(
                    "PCIe generation",
                    [("generation", pts(p + "pcie_generation"), COLORS[0])],
                    "gen",
                    [(f"max {i.max_pcie_generation}", i.max_pcie_generation, "#555")]
                    if i and i.max_pcie_generation
                    else [],
                    zero=True,
                    marks=m,
                    **kw,
                ),
                chart(
                    "PCIe lanes",
                    [("width", pts(p + "pcie_width"), COLORS[3])],
                    "lanes",
                    [(f"max x{i.max_pcie_width}", i.max_pcie_width, "#555")] if i and i.max_pcie_width else [],
                    zero=True,
                    marks=m,
                    **kw,
                ),
                chart(
                    "PCIe replays",
                    [("replays", pts(p + "pcie_replays"), COLORS[1])],
                    "since boot",
                    zero=True,
                    marks=m,
                    **kw,
                ),
            ]
            drift = pts(p + "cooling_drift_celsius")
            threshold = self._drift_alert()
            if drift:  # once it compares: how much hotter than its baseline, against the alert's threshold
                gpus[str(g.index)].append(
                    chart(
                        "cooling drift",
                        [("over its baseline", drift, COLORS[1])],
                        "°C",
                        [(f"alert {threshold:g} °C", threshold, "#d62728")] if threshold else [],
                        zero=True,
                        marks=m,
                        **kw,
                    )
                )
        if "host" not in wanted:
            return {"time": now, "cards": gpus}
        hm = marks(lambda labels: "gpu" not in labels)
        cpus = sample.host.cpu_count if sample is not None and sample.host is not None else None
        sockets = sorted(n for n in names if n.startswith("host/cpu") and n.endswith("_celsius"))
        fans = sorted(n for n in names if n.startswith("host/fan/"))
        psus = sorted({n.split("/")[1] for n in names if n.startswith("psu/")})
        host = [
            chart(
                "CPU temperature",
                [(n[5:-8], pts(n), COLORS[k % 8]) for k, n in enumerate(sockets)],
                "°C",
                marks=hm,
                **kw,
            ),
            chart(
                "fans", [(n[9:], pts(n), COLORS[k % 8]) for k, n in enumerate(fans)], "rpm", zero=True, marks=hm, **kw
            ),
            chart(
                "load average",
                [("1 min", pts("host/load1"), COLORS[0])],
                "runnable",
                [("CPUs", float(cpus), "#555")] if cpus else [],
                zero=True,
                marks=hm,
                **kw,
            ),
            chart(
                "CPU busy",
                [("CPU", pts("host/cpu_utilization_ratio", 100), COLORS[2])],
                "%",
                zero=True,
                above=100,
                marks=hm,
                **kw,
            ),
            chart(
                "CPU package power (RAPL)",
                [("RAPL", pts("host/rapl_watts"), COLORS[4])],
                "W",
                zero=True,
                marks=hm,
                **kw,
            ),
        ]
        if psus:
            host.append(
                chart(
                    "PSU budgets",
                    [(name, pts(f"psu/{name}/draw_watts"), COLORS[k % 8]) for k, name in enumerate(psus)],
                    "W",
                    [
                        (f"{name} budget", got[f"psu/{name}/budget_watts"][-1][2], COLORS[k % 8])
                        for k, name in enumerate(psus)
                        if got.get(f"psu/{name}/budget_watts")
                    ],
                    zero=True,
                    marks=hm,
                    **kw,
                )
            )
        return {"time": now, "cards": {**gpus, "host": host}}

    # --- for scripts ----------------------------------------------------------------------------
    def history_json(self, query: str) -> tuple[str, bytes]:
        """``series`` (names, or prefixes ending in ``*``; comma-separated), ``since`` (unix
        seconds, or negative: seconds before the last poll; default -3600), ``until``,
        ``step`` (seconds)."""
        q = parse_qs(query, max_num_fields=8)
        now = self.history.latest or time.time()
        known = self.history.series_names()
        wanted = [w for part in q.get("series", ["*"]) for w in part.split(",") if w][:MAX_QUERY_SERIES]
        names = [n for n in known if any(n == w or (w.endswith("*") and n.startswith(w[:-1])) for w in wanted)]
        since = _number(q, "since", -3600.0)
        since = now + since if since < 0 else since
        until = _number(q, "until", now)
        step = _number(q, "step", 0.0) or None
        if step is not None and step <= 0:
            raise ValueError("step: seconds, above 0")
        found = self.history.query(
            names[:MAX_QUERY_SERIES],
            since,
            until,
            step,
            max_points=MAX_QUERY_POINTS // max(1, len(names)),
            encode=_point_json,
        )
        series = found.pop("series")
        head = _json(found)[:-1]  # the rest as plain JSON, then the points written as they are
        parts = [f"{json.dumps(name)}:[{','.join(points)}]" for name, points in series.items()]
        return JSON, head + (b"," if len(head) > 1 else b"") + b'"series":{' + ",".join(parts).encode() + b"}}"

    def jobs(self, query: str) -> tuple[str, bytes]:
        """The running jobs and the last RECENT_JOBS that ended, as ``rigmon jobs --json``."""
        from ..sinks.jobs import LedgerError, load

        price, currency = self.price_per_kwh, self.currency
        ledger = self.pipeline.jobs
        running = ledger.snapshot(price, currency) if ledger is not None else []
        ended, error = [], None
        try:
            ended = [
                j.as_dict(price, currency) for j in load(self.ledger, limit=RECENT_JOBS * 4) if j.ended is not None
            ][:RECENT_JOBS]
        except LedgerError as e:
            error = str(e)
        return JSON, _json({"running": running, "recent": ended, "error": error})

    def burnin_report(self, query: str) -> tuple[str, bytes] | None:
        found = self._burnin()
        if found is None or found[1] is None:
            return None
        with open(found[1], "rb") as f:
            body = f.read(MAX_REPORT_BYTES + 1)
        if len(body) > MAX_REPORT_BYTES:
            raise ValueError("the report is larger than the page serves")
        # a file on disk, served as a page of ours: it may style itself, never run a script
        return "text/html; charset=utf-8", body, (("Content-Security-Policy", REPORT_CSP),)

    def _burnin(self) -> tuple[dict, Path | None] | None:
        reports = self.pipeline.reports
        summary = reports.latest() if reports is not None else None
        if summary is None:
            return None
        page = reports.html_path()
        return summary, page if page is not None and page.is_file() else None


def _one(query: str, name: str, default: str) -> str:
    got = parse_qs(query, max_num_fields=8).get(name)
    return got[0] if got else default


def _point_json(point: tuple) -> str:
    """A (t, min, mean, max) point as JSON: float32's digits, no more (what the history keeps)."""
    try:
        written = "[%.3f,%.6g,%.6g,%.6g]" % point  # noqa: UP031 (one format a point)
    except (TypeError, ValueError):
        written = None
    if written is None or "n" in written:  # a NaN or an infinity ("nan", "inf"): JSON has none
        written = json.dumps(to_jsonable(list(point)), allow_nan=False)
    return written


def _number(q: dict, name: str, default: float) -> float:
    if name not in q:
        return default
    try:
        value = float(q[name][0])
    except ValueError:
        raise ValueError(f"{name}: a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{name}: a finite number")
    return value


def _json(value) -> bytes:
    """Plain JSON: records as objects, NaN and infinities as null, every string ASCII-escaped."""
    return json.dumps(to_jsonable(value), allow_nan=False).encode()


@functools.cache
def _boot_time() -> float | None:
    try:
        import psutil

        return psutil.boot_time()
    except Exception:
        return None
