"""The box every output names: built once from ``[daemon]`` and ``[prometheus]``, then handed to
the sinks and the page, which read their own section of the config and this, nothing else."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..model.text import url_authority, url_host

if TYPE_CHECKING:
    from .schema import Config
    from .settings import Settings


class Box(NamedTuple):
    host: str  # its name: ``[daemon] hostname``, else this machine's
    named: bool  # the operator named it (a replay's page shows the recorded box's name otherwise)
    labels: tuple[tuple[str, str], ...]  # ``[daemon] labels``, sorted: site, rack…
    state_dir: Path  # where its outputs keep what a restart must find
    port: int  # where /metrics and the page are served
    page_url: str  # its page as a link from an alert ("": no page)
    instance: str = ""  # what Prometheus calls it: [daemon] instance, else hostname:port
    runbook_base: str = ""  # the page where Prometheus reaches it, whose /runbook an alert links to ("": none)

    @classmethod
    def of(cls, config: Config | Settings, host: str | None = None) -> Box:
        daemon, prometheus = config.daemon, config.prometheus
        name = host or daemon.hostname or socket.gethostname()
        scheme = "https" if prometheus.tls_cert is not None else "http"
        # a machine named what no URL can hold has no link in its alerts (a configured hostname
        # like it is refused by config check, unless external_url names the page)
        linked = daemon.page and url_host(name)
        page = daemon.external_url or (f"{scheme}://{name}:{prometheus.port}/" if linked else "")
        instance = daemon.instance or f"{name}:{prometheus.port}"
        # exported as rigmon_runbook_info, which the PromQL rules' runbook_url reads: one link on both paths
        runbook = daemon.external_url or (f"{scheme}://{instance}/" if daemon.page and url_authority(instance) else "")
        return cls(
            host=name,
            named=bool(host or daemon.hostname),
            labels=tuple(sorted(dict(daemon.labels).items())),
            state_dir=Path(daemon.state_dir),
            port=prometheus.port,
            page_url=page,
            instance=instance,
            runbook_base=runbook,
        )
