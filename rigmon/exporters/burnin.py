"""The last burn-in's result as metrics: the daemon reads the newest report's small
``summary.json`` under ``[burnin] reports_dir`` (where the scheduled burn-in writes its
reports), never the full ``burnin.json`` with its timelines, so Prometheus and the box
dashboard show when the box was last judged and how it did."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily

log = logging.getLogger(__name__)

RESCAN_SECONDS = 60.0
NEVER_RUN = "never run"  # rigmon_burnin_last_verdict where no report was found


class BurninReports:
    def __init__(self, directory: Path, clock=time.monotonic):
        self.directory = Path(directory)
        self._clock = clock
        self._scanned = float("-inf")
        self._path: Path | None = None
        self._mtime = 0.0
        self._report: dict | None = None

    def latest(self) -> dict | None:
        now = self._clock()
        if now - self._scanned < RESCAN_SECONDS:
            return self._report
        self._scanned = now
        try:
            newest = max(self.directory.glob("*/summary.json"), key=lambda p: p.stat().st_mtime, default=None)
        except OSError:
            newest = None
        if newest is None:
            return self._report
        mtime = newest.stat().st_mtime
        if newest != self._path or mtime != self._mtime:
            try:
                self._report = json.loads(newest.read_text())
                self._path, self._mtime = newest, mtime
            except (OSError, ValueError) as e:
                log.warning("cannot read burn-in report %s: %s", newest, e)
        return self._report

    def html_path(self) -> Path | None:
        """The last report's page (beside its summary), where one was found."""
        return self._path.parent / "burnin.html" if self._path is not None else None

    def collect(self):
        report = self.latest()
        started = GaugeMetricFamily(
            "rigmon_burnin_last_run_timestamp_seconds", "Unix time the last burn-in started.", labels=[]
        )
        passed = GaugeMetricFamily(
            "rigmon_burnin_last_passed",
            "1 if the last burn-in passed, 0 if it failed; none when it could not run or was interrupted.",
            labels=[],
        )
        verdict = GaugeMetricFamily(
            "rigmon_burnin_last_verdict",
            "1 for the last burn-in's verdict: pass, fail, "
            "could not run, interrupted; never run where "
            "there is no report.",
            labels=["verdict"],
        )
        duration = GaugeMetricFamily("rigmon_burnin_last_duration_seconds", "Length of the last burn-in.", labels=[])
        rate = GaugeMetricFamily(
            "rigmon_burnin_tokens_per_second", "Training throughput in the last burn-in.", labels=["unit", "gpu"]
        )
        mfu = GaugeMetricFamily(
            "rigmon_burnin_mfu_ratio", "Model FLOPs utilisation in the last burn-in.", labels=["unit", "gpu"]
        )
        if report is not None and report.get("format") == "rigmon-burnin-summary":
            if report.get("started_unix") is not None:
                started.add_metric([], report["started_unix"])
            said = str(report.get("verdict"))
            if said in ("pass", "fail"):  # an interrupted run judged no hardware
                passed.add_metric([], 1 if said == "pass" else 0)
            verdict.add_metric([said], 1)
            duration.add_metric([], report.get("duration_seconds") or 0)
            for unit in report.get("units", []):
                labels = [unit["name"], "" if unit.get("gpu") is None else str(unit["gpu"])]
                if unit.get("tokens_per_s") is not None:
                    rate.add_metric(labels, unit["tokens_per_s"])
                if unit.get("mfu") is not None:
                    mfu.add_metric(labels, unit["mfu"])
        else:  # a value the dashboards show, not an empty panel that reads like a broken one
            verdict.add_metric([NEVER_RUN], 1)
        yield from (started, passed, verdict, duration, rate, mfu)
