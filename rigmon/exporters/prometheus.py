"""The Prometheus exporter: a collector over the latest sample (served by ``rigmon.http.server``).

Metric families are built afresh from the latest sample on every render, on a private
registry. Every metric and its unit is listed in docs/metrics.md. Values are those
of the last poll, so no sample carries a timestamp; the exposition is rendered once per
poll and per format and shared by every scrape until the next poll.
"""

from __future__ import annotations

import logging
import platform
import threading
from collections import Counter
from typing import TYPE_CHECKING

from prometheus_client.core import InfoMetricFamily

from .. import __version__
from ..model.project import fill_prometheus
from ..model.readings import FAMILIES, LAST, family_labels
from ..model.sample import Sample
from ..sinks.base import PollResult
from .exposition import Family

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


class BuildInfo:
    """rigmon_build: the version and the Python running it; rigmon_runbook: where this box's
    alerts link their runbook (its page's /runbook), which the PromQL rules' runbook_url reads,
    so both paths link the same page whatever its scheme or external URL (none: no page)."""

    def __init__(self, runbook: str = ""):
        self.runbook = runbook  # the page's /runbook ("": no page)

    def collect(self):
        yield InfoMetricFamily(
            "rigmon_build",
            "rigmon build information.",
            value={"version": __version__, "python": platform.python_version()},
        )
        if self.runbook:
            yield InfoMetricFamily(
                "rigmon_runbook", "Where this box's alerts link their runbook.", value={"url": self.runbook}
            )


class SampleCollector:
    """A sink: the latest sample as metric families. It also counts XID events, which arrive
    in one sample each, so it must see every sample (the pipeline hands each one over)."""

    name = "prometheus"

    def __init__(self, process_series: int = 0):
        self.process_series = process_series  # the top GPU processes as series (gpu.process_series)
        self._sample: Sample | None = None
        self._xids: Counter[tuple[str, str, str]] = Counter()
        self._lock = threading.Lock()

    def consume(self, result: PollResult) -> None:
        sample = result.sample
        if sample is None:
            return
        with self._lock:
            for event in sample.events:
                self._xids[(str(event.gpu_index), event.uuid, str(event.xid))] += 1
            self._sample = sample

    def close(self, deadline: float | None = None) -> None:
        pass  # nothing held: a scrape reads the latest sample

    def collect(self):
        with self._lock:
            sample, xids = self._sample, dict(self._xids)
        if sample is None:
            return
        yield from _families(sample, xids, self.process_series)


# Every reading's family, empty: each render fills copies of these.
_FAMILIES = {
    name: Family(name, family.help + LAST, "gauge" if family.type == "info" else family.type, family_labels(name))
    for name, family in FAMILIES.items()
}


def _families(sample: Sample, xids: dict, process_series: int = 0):
    """Every reading's family (docs/metrics.md), filled by the code the table generates."""
    families = {name: family.empty() for name, family in _FAMILIES.items()}
    system = sample.system
    info = families["rigmon_gpu_info"]
    for i in sample.gpu_info:
        info.add_metric(
            (
                str(i.index),
                i.uuid,
                i.name,
                i.pci_bus_id or "",
                i.serial or "",
                i.vbios_version or "",
                (system.driver_version if system else None) or "",
                (system.cuda_driver_version if system else None) or "",
                i.compute_capability or "",
            ),
            1,
        )
    if system is not None:
        for g in system.missing_gpus:
            families["rigmon_gpu_missing"].add_metric((str(g.index), g.uuid, g.name), 1)
        if system.nvml_error:
            families["rigmon_nvml_error_info"].add_metric((system.nvml_error,), 1)
    fill_prometheus(sample, families, process_series)
    xid = families["rigmon_gpu_xid_errors"]
    for labels, count in sorted(xids.items()):
        xid.add_metric(labels, count)
    groups = {"gpu", *(["host"] if sample.host is not None else []), *(["processes"] if process_series else [])}
    return [f for name, f in families.items() if FAMILIES[name].group in groups]
