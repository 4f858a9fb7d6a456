"""Configuration: one TOML file, validated by pydantic, with defaults good enough that no
file is needed. ``${NAME}`` in any string is replaced by the environment variable NAME, so
secrets need not sit in the file."""

from __future__ import annotations

import difflib
import logging
import os
import re
import tomllib
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..alerts.rules import analysed
from ..alerts.specs import Duration, RuleOverride, RuleSpec, merge
from ..model.args import DEFAULT_CONFIG
from .settings import AlertsSettings, ConfigError, Secret, Settings

DEFAULT_PATH = DEFAULT_CONFIG
# Not node_exporter's 9100, dcgm-exporter's 9400 or nvidia_gpu_exporter's 9835. Prometheus's
# 9100-9999 exporter range is fully allocated, so any default collides with something: it is a setting.
DEFAULT_PORT = 9963


MAX_PEERS = 8  # an Alertmanager cluster's peers in one notifier


def _check_http(url: str) -> str:
    if not re.match(r"^https?://[^/\s]+", url):
        raise ValueError("must be an http:// or https:// URL")
    bad = next((c for c in url if c.isspace() or ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:  # a newline from an environment variable, a pasted space
        raise ValueError(
            f"contains {'a space' if bad == ' ' else 'a control character'} ({bad!r}) at position "
            f"{url.index(bad)}: quote or escape it"
        )
    return url


class _Section(BaseModel):
    # no NaN or infinity in a setting: they are neither valid thresholds nor TOML
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class DaemonConfig(_Section):
    interval: Annotated[
        Duration,
        Field(
            gt=0,
            le=3600,
            description="Time between polls; NVML's power reading is a 1 s average, so below 1 s gains little.",
        ),
    ] = 1.0
    state_dir: Annotated[Path, Field(description="Where spools and state live (systemd's StateDirectory).")] = Path(
        "/var/lib/rigmon"
    )
    log_level: Annotated[
        Literal["debug", "info", "warning", "error"], Field(description="Least severe log message written.")
    ] = "info"
    page: Annotated[
        bool,
        Field(
            description="Serve the page at / and its API, and keep the last week of the charted readings for them "
            "(about 8 MB for 8 GPUs, saved in state_dir)."
        ),
    ] = True
    hostname: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=253,
            pattern=r"^[^\x00-\x20\x7f]+$",
            description="The box's name in notifications, InfluxDB's host tag, the page and status (default: the "
            "machine's hostname; set it where containers or several daemons share one).",
            examples=["rig-04"],
        ),
    ] = None
    instance: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=300,
            pattern=r"^[^\x00-\x20\x7f]+$",
            description="What Prometheus calls this box: its target as the scrape config lists it (10.0.0.5:9963, "
            "gpu-box-01.lab:9963). It is the instance label of the alerts rigmon posts to Alertmanager, so both "
            "paths' alerts of one box group, inhibit and silence together. Default: hostname:port.",
            examples=["gpu-box-01.lab:9963"],
        ),
    ] = None
    external_url: Annotated[
        str | None,
        Field(
            max_length=2048,
            description="The box's page as people reach it (behind a proxy, a name other than the hostname): "
            "the link in every notification (Alertmanager's generatorURL and externalURL). Default: "
            "http(s)://hostname:port/ where the page is served.",
            examples=["https://rig-04.lab.example/"],
        ),
    ] = None
    labels: Annotated[
        dict[
            Annotated[str, Field(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]{0,63}$")],
            Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")],
        ],
        Field(
            max_length=16,
            description="The box's own labels (site, rack…): on every notification, every "
            "InfluxDB point (as tags), the page and status. Prometheus takes them "
            "from its targets instead.",
            examples=[{"site": "lab"}],
        ),
    ] = {}

    @field_validator("external_url")
    @classmethod
    def _a_url(cls, v: str | None) -> str | None:
        return _check_http(v) if v is not None else None

    @field_validator("labels")
    @classmethod
    def _not_ours(cls, v: dict[str, str]) -> dict[str, str]:
        from ..alerts.entities import LABELS
        from ..model.readings import own_labels

        ours = own_labels() | {name for names in LABELS.values() for name in names}
        taken = sorted(set(v) & ours)
        if taken:
            raise ValueError(
                f"{taken[0]} is a label or tag rigmon sets itself (on a reading, a point or an alert): "
                f"choose another name"
            )
        reserved = sorted(k for k in v if k.startswith("_"))
        if reserved:
            raise ValueError(f"{reserved[0]}: a name starting with _ is Prometheus's or InfluxDB's own: choose another")
        return v

    @model_validator(mode="after")
    def _hostname_in_a_url(self):
        from ..model.text import url_host

        if self.hostname is not None and self.page and self.external_url is None and not url_host(self.hostname):
            raise ValueError(
                f"hostname: {self.hostname!r} cannot be a URL's host, and it is the page's link in every alert "
                "(Alertmanager refuses an alert whose generatorURL is no URL): use letters, digits, - and ., or "
                "set daemon.external_url"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _deprecated(cls, data: Any) -> Any:
        if isinstance(data, dict) and "history" in data:
            # the daemon kept samples nothing read; the alert rules keep their own history
            logging.getLogger(__name__).warning("daemon.history is no longer used and is ignored: remove it")
            data = {k: v for k, v in data.items() if k != "history"}
        return data


class GpuConfig(_Section):
    enabled: Annotated[bool, Field(description="Read the GPUs through NVML.")] = True
    indices: Annotated[
        list[Annotated[int, Field(ge=0)]] | None,
        Field(description="GPU indices to watch; all when absent.", examples=[[0, 1]]),
    ] = None
    slow_interval: Annotated[
        Duration,
        Field(
            ge=0,
            description="Time between reads of the slow counters: energy (~3 ms a GPU) and cumulative throttle times.",
        ),
    ] = 5.0
    pcie_throughput: Annotated[bool, Field(description="Read PCIe throughput (costs ~21 ms a GPU per read).")] = False
    processes: Annotated[
        bool,
        Field(
            description="Read the compute processes: memory, SM share, and who they are "
            "(user, command, container or job, from /proc)."
        ),
    ] = True
    process_series: Annotated[
        int,
        Field(
            ge=0,
            le=64,
            description="Export the N processes holding the most GPU "
            "memory as Prometheus series (pid, user, job "
            "labels); 0: none, only the counts.",
        ),
    ] = 0
    xid_events: Annotated[bool, Field(description="Listen for XID critical errors.")] = True
    nvml_retry: Annotated[
        Duration,
        Field(
            ge=1,
            le=86400,
            description="While NVML cannot start (a driver upgraded under its loaded module, a module not "
            "loaded, no access to the devices), how often it is tried again; the first tries come sooner. A "
            "mended driver is read without a restart.",
        ),
    ] = 60.0
    pcie_expected_generation: Annotated[
        dict[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=1, le=6)]] | None,
        Field(
            description="PCIe generation a GPU's link is meant to run at, by GPU "
            "index, where less than the slot allows: a riser forced "
            "to Gen3 in the BIOS. PcieLinkDegraded compares with it.",
            examples=[{0: 3, 1: 3}],
        ),
    ] = None
    pcie_expected_width: Annotated[
        dict[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=1, le=32)]] | None,
        Field(
            description="PCIe width (lanes) a GPU's link is meant to run at, by GPU "
            "index, where less than NVML's maximum: a card on an x1 or x4 "
            "riser or a chipset slot. PcieLinkDegraded compares with it.",
            examples=[{2: 1, 3: 4}],
        ),
    ] = None


class HostConfig(_Section):
    enabled: Annotated[bool, Field(description="Read CPU temperatures, fans and load through psutil.")] = True
    sysfs: Annotated[
        Path, Field(description="Root of sysfs: hwmon, RAPL energy, and the GPUs' runtime power states.")
    ] = Path("/sys")
    rapl: Annotated[bool, Field(description="Read CPU package energy from RAPL (root-only on recent kernels).")] = True
    cpu_limit_celsius: Annotated[
        float | None,
        Field(
            ge=40,
            le=150,
            description="The temperature the CPUs run at by design at most (their TjMax), where neither the "
            "sensor nor rigmon's table of CPU families gives one.",
            examples=[95],
        ),
    ] = None
    sysfs_sensors: Annotated[
        bool,
        Field(
            description="Read what psutil leaves out of hwmon: fan PWM, fan minimum "
            "and alarm, voltages, power and current inputs, and which "
            "device each chip is."
        ),
    ] = True


class BasicAuth(_Section):
    username: Annotated[str, Field(min_length=1, description="User name Prometheus sends.", examples=["prometheus"])]
    password_bcrypt: Annotated[
        SecretStr | None,
        Field(
            description='bcrypt hash of the password, as Prometheus\'s web config takes: htpasswd -nBC 10 "" | '
            "tr -d ':\\n'",
            examples=["${RIGMON_METRICS_PASSWORD_BCRYPT}"],
        ),
    ] = None
    password_sha256: Annotated[
        SecretStr | None,
        Field(
            description="Hex SHA-256 of the password (older configs; unsalted and fast to guess: prefer "
            "password_bcrypt): printf %s 'password' | sha256sum",
            examples=["${RIGMON_METRICS_PASSWORD_SHA256}"],
        ),
    ] = None

    @field_validator("password_sha256")
    @classmethod
    def _hex(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", v.get_secret_value()):
            raise ValueError("must be 64 hex digits (sha256sum of the password)")
        return v

    @field_validator("password_bcrypt")
    @classmethod
    def _bcrypt(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and not re.fullmatch(r"\$2[abyx]?\$\d\d\$[./A-Za-z0-9]{53}", v.get_secret_value()):
            raise ValueError("must be a bcrypt hash ($2y$10$… from htpasswd -B, or bcrypt.hashpw)")
        return v

    @model_validator(mode="after")
    def _one_password(self) -> BasicAuth:
        if (self.password_bcrypt is None) == (self.password_sha256 is None):
            raise ValueError("set one of password_bcrypt (preferred) or password_sha256")
        return self


class PrometheusConfig(_Section):
    enabled: Annotated[bool, Field(description="Serve /metrics.")] = True
    listen: Annotated[
        str, Field(description='Address to bind; "::" or "0.0.0.0" for every interface, "127.0.0.1" for this box only.')
    ] = "0.0.0.0"
    port: Annotated[int, Field(ge=0, le=65535, description="TCP port of /metrics.")] = DEFAULT_PORT
    tls_cert: Annotated[
        Path | None,
        Field(description="PEM certificate (chain); serve HTTPS when set.", examples=["/etc/rigmon/tls/cert.pem"]),
    ] = None
    tls_key: Annotated[
        Path | None, Field(description="PEM private key for tls_cert.", examples=["/etc/rigmon/tls/key.pem"])
    ] = None
    basic_auth: Annotated[BasicAuth | None, Field(description="Ask scrapers for a user name and password.")] = None

    @model_validator(mode="after")
    def _tls_pair(self) -> PrometheusConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: set both or neither")
        for name in ("tls_cert", "tls_key"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise ValueError(f"{name}: no such file: {path}")
        return self


class PsuGroupConfig(_Section):
    name: Annotated[str, Field(min_length=1, description="The PSU's name in alerts.", examples=["psu1"])]
    watts: Annotated[float, Field(gt=0, description="The PSU's (or group's) budget in watts.", examples=[1500])]
    gpus: Annotated[
        list[Annotated[int, Field(ge=0)]] | None,
        Field(description="GPU indices on this PSU; all when absent.", examples=[[0, 1]]),
    ] = None
    include_cpu: Annotated[bool, Field(description="Add the CPU package power (RAPL) to this group.")] = False
    sensor: Annotated[
        str | None,
        Field(
            description="An hwmon power input that measures this PSU's draw (chip/sensor or chip/device/sensor, as "
            "rigmon status shows it, e.g. a corsair-psu's); its reading replaces the GPUs' sum while it "
            "answers.",
            examples=["corsair-psu/power total"],
        ),
    ] = None


class PowerBudgetConfig(_Section):
    watts: Annotated[
        float | None,
        Field(
            gt=0,
            description="Budget for all GPUs (plus the CPU package when include_cpu); no whole-box budget when absent.",
            examples=[1800],
        ),
    ] = None
    include_cpu: Annotated[bool, Field(description="Add the CPU package power (RAPL) to the whole-box budget.")] = True
    groups: Annotated[list[PsuGroupConfig], Field(description="One budget per PSU (or circuit).")] = []


class AlertsConfig(_Section):
    enabled: Annotated[bool, Field(description="Evaluate the alert rules.")] = True
    repeat_interval: Annotated[Duration, Field(description="Remind of a firing alert this often (0: never).")] = (
        4 * 3600.0
    )
    unknown_timeout: Annotated[
        Duration,
        Field(
            description="Resolve an alert whose condition cannot be evaluated (a value the hardware stopped giving) "
            "for this long, or its rule's 'for' if longer."
        ),
    ] = 120.0
    builtin: Annotated[
        dict[str, RuleOverride],
        Field(
            description="Changes to built-in rules by name (rigmon rules list): enabled, for, params, severity, when, "
            "clear, texts.",
            examples=[{"FanStalled": {"for": "1m"}}],
        ),
    ] = {}
    rules: Annotated[list[RuleSpec], Field(description="Your own rules (docs/alerts.md).", validate_default=True)] = []
    power_budget: Annotated[PowerBudgetConfig, Field(description="What the PSUs can give.")] = PowerBudgetConfig()
    expected_sensors: Annotated[
        list[str],
        Field(
            description="Sensors that must be there from the start: 'fan:chip/label', 'temperature:chip/label', "
            "'NVML'.",
            examples=[["fan:nct6798/fan2", "NVML"]],
        ),
    ] = []

    _effective: list[RuleSpec] = PrivateAttr(default_factory=list)

    @field_validator("rules", mode="after")
    @classmethod
    def _rules(cls, rules: list[RuleSpec], info: ValidationInfo) -> list[RuleSpec]:
        """The rules merged here too, as a field: their problems are told in the same pass as a
        wrong value elsewhere in [alerts] (a model check runs only once every field is right)."""
        builtin = info.data.get("builtin")
        if builtin is not None:
            merge(builtin, rules)
        return rules

    @model_validator(mode="after")
    def _merge(self) -> AlertsConfig:
        self._effective = merge(self.builtin, self.rules)  # raises ValueError naming the rule and field
        return self  # the table is frozen: its merged rules stay as checked here

    def effective_rules(self) -> list[RuleSpec]:
        return list(self._effective)


class NotifierConfig(_Section):
    type: Annotated[
        Literal["webhook", "alertmanager", "slack", "discord", "ntfy"],
        Field(
            description="The service's message format: webhook (Alertmanager's webhook JSON, for its receivers), "
            "alertmanager (Alertmanager's own API v2: firing alerts posted again every minute, as "
            "Prometheus does), slack, discord, ntfy.",
            examples=["slack"],
        ),
    ]
    url: Annotated[
        SecretStr | list[SecretStr],
        Field(
            description="Where to post (a secret: Slack and Discord URLs carry a token). For ntfy, the topic URL; for "
            "alertmanager, its base URL, or a list of them for an HA pair (each gets every alert, as "
            "Prometheus sends them: one queue and name-1, name-2… per peer).",
            examples=["${SLACK_WEBHOOK_URL}"],
        ),
    ]
    name: Annotated[
        str | None, Field(description="Name in logs and metrics (default: the type).", examples=["ops-slack"])
    ] = None
    min_severity: Annotated[Literal["info", "warning", "critical"], Field(description="Least severe alert sent.")] = (
        "warning"
    )
    headers: Annotated[dict[str, SecretStr], Field(description="Extra HTTP headers (secrets).")] = {}
    token: Annotated[
        SecretStr | None, Field(description="Bearer token (ntfy access tokens).", examples=["${NTFY_TOKEN}"])
    ] = None
    timeout: Annotated[
        Duration,
        Field(
            gt=0,
            le=300,
            description="Longest one post may take, connect to last byte (a slower receiver is cut off and tried "
            "again).",
        ),
    ] = 10.0
    resend_interval: Annotated[
        Duration,
        Field(
            ge=1,
            le=3600,
            description="alertmanager: how often a firing alert is posted again; each post ends it five of these "
            "ahead (Prometheus's resend-delay).",
        ),
    ] = 60.0
    follow_redirects: Annotated[
        bool,
        Field(description="Follow a 307/308 to the same host (http→https); other redirects are refused and logged."),
    ] = False
    retry_initial: Annotated[Duration, Field(description="First retry delay; doubles up to retry_max.")] = 1.0
    retry_max: Annotated[Duration, Field(description="Longest wait between retries.")] = 60.0
    max_age: Annotated[Duration, Field(description="Give up on a message this old (logged, counted).")] = 24 * 3600.0
    queue_size: Annotated[
        int,
        Field(
            ge=1, le=1_000_000, description="Messages waiting to be sent; past it the oldest are dropped and counted."
        ),
    ] = 1000

    @field_validator("url")
    @classmethod
    def _http(cls, v: SecretStr | list[SecretStr]) -> SecretStr | list[SecretStr]:
        if isinstance(v, list):
            if not 1 <= len(v) <= MAX_PEERS:
                raise ValueError(f"takes 1 to {MAX_PEERS} URLs (an Alertmanager cluster's peers), not {len(v)}")
            if len({u.get_secret_value() for u in v}) < len(v):
                raise ValueError("names one URL twice: each peer would get every alert twice")
        for u in v if isinstance(v, list) else [v]:
            _check_http(u.get_secret_value())
        return v

    @model_validator(mode="after")
    def _one_url_but_for_alertmanager(self):
        if isinstance(self.url, list) and self.type != "alertmanager":
            raise ValueError(
                f'url: a list of URLs is for an Alertmanager cluster (type = "alertmanager"); '
                f"a {self.type} notifier posts to one URL: give each its own [[notifiers]]"
            )
        return self


class InfluxConfig(_Section):
    enabled: Annotated[bool, Field(description="Push every sample to InfluxDB.")] = False
    api: Annotated[
        Literal["v2", "v1"],
        Field(
            description="v2: InfluxDB 2.x, 3.x and 1.8+ (url, org, bucket, "
            "token); v1: InfluxDB 1.x (url, database, "
            "retention_policy, username, password)."
        ),
    ] = "v2"
    url: Annotated[str, Field(description="The server's base URL.")] = "http://localhost:8086"
    org: Annotated[str, Field(description="v2: organisation ('-' for InfluxDB 1.8).")] = ""
    bucket: Annotated[str, Field(description="v2: bucket ('db/rp' for InfluxDB 1.8).")] = "rigmon"
    token: Annotated[
        SecretStr | None,
        Field(description="v2: API token ('user:password' for InfluxDB 1.8).", examples=["${INFLUX_TOKEN}"]),
    ] = None
    database: Annotated[str, Field(description="v1: database.")] = "rigmon"
    retention_policy: Annotated[str, Field(description="v1: retention policy (the database's default when empty).")] = (
        ""
    )
    username: Annotated[str, Field(description="v1: user name (none when empty).")] = ""
    password: Annotated[SecretStr | None, Field(description="v1: password.", examples=["${INFLUX_PASSWORD}"])] = None
    timeout: Annotated[Duration, Field(gt=0, le=300, description="Longest wait for one write.")] = 10.0
    flush_interval: Annotated[
        Duration, Field(gt=0, le=3600, description="Longest a batch waits before it is sent.")
    ] = 1.0
    retry_initial: Annotated[Duration, Field(description="First retry delay; doubles up to retry_max.")] = 1.0
    retry_max: Annotated[
        Duration,
        Field(
            description="Longest wait between retries; also the pace of retries "
            "after the server refused the credentials."
        ),
    ] = 60.0
    spool_dir: Annotated[
        Path | None,
        Field(
            description="Where unsent points wait on disk (default: <state_dir>/influxdb-spool).",
            examples=["/var/lib/rigmon/influxdb-spool"],
        ),
    ] = None
    spool_max_bytes: Annotated[
        int, Field(ge=65536, description="Bound of the spool; past it the oldest points are dropped and counted.")
    ] = 256 << 20
    queue_size: Annotated[
        int, Field(ge=10, le=1_000_000, description="Points waiting in memory before they go to the spool.")
    ] = 10_000

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        return _check_http(v)


class BurninConfig(_Section):
    price_per_kwh: Annotated[
        float | None, Field(ge=0, description="Electricity price, for the report's cost.", examples=[0.3])
    ] = None
    currency: Annotated[str, Field(description="Currency of price_per_kwh.")] = "EUR"
    reports_dir: Annotated[
        Path,
        Field(description="Where scheduled burn-ins keep their reports; the daemon exports the newest one's result."),
    ] = Path("/var/lib/rigmon-burnin")


class CoolingConfig(_Section):
    enabled: Annotated[
        bool,
        Field(
            description="Hold each GPU, CPU and fan header against its own past: a baseline learned "
            "from its first days of steady load, and how far it drifts from it (GpuCoolingDrift)."
        ),
    ] = True
    learn: Annotated[
        Duration,
        Field(
            ge=3600,
            le=60 * 86400,
            description="How long a baseline learns, from the first steady load after install or a reset.",
        ),
    ] = 3 * 86400.0
    window: Annotated[
        Duration,
        Field(ge=600, le=7 * 86400, description="The steady load (summed) the drift is the mean over."),
    ] = 6 * 3600.0
    band_watts: Annotated[
        float,
        Field(
            ge=5,
            le=500,
            description="A GPU's power in bands this wide: its baseline compares like with like.",
        ),
    ] = 25.0


class JobsConfig(_Section):
    enabled: Annotated[
        bool,
        Field(
            description="Keep the ledger of jobs (rigmon jobs): GPU time, energy and cost "
            "of each run, in <state_dir>/jobs.sqlite."
        ),
    ] = True
    price_per_kwh: Annotated[
        float,
        Field(ge=0, description="Electricity price per kWh, for each job's cost (0: no cost shown).", examples=[0.32]),
    ] = 0.0
    currency: Annotated[str, Field(max_length=8, description="Shown after costs.", examples=["EUR"])] = ""
    end_after: Annotated[
        Duration, Field(gt=0, le=3600, description="A job that holds no GPU for this long has ended.")
    ] = 30.0
    starved_utilization: Annotated[
        float, Field(gt=0, le=1, description="A job is busy while its GPUs are at least this busy (0-1).")
    ] = 0.9
    starved_power_ratio: Annotated[
        float,
        Field(
            gt=0,
            le=1,
            description="…and starved while busy below this share of the power limit, for most of its busy time.",
        ),
    ] = 0.6
    store_command_lines: Annotated[
        bool,
        Field(
            description="Keep each job's whole command line in the ledger and its InfluxDB point; by default only "
            "the program (and the script an interpreter runs): arguments can hold tokens and "
            "passwords, and the other users of the box may read what is exported."
        ),
    ] = False
    keep: Annotated[
        Duration, Field(ge=3600, description="Finished jobs older than this leave the ledger.", examples=["365d"])
    ] = 365 * 86400.0
    launchers: Annotated[
        list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.+-]{1,64}$")]],
        Field(
            max_length=64,
            description="More launchers, besides torchrun, accelerate, deepspeed, mpirun, horovodrun, srun and ray: "
            "the processes under one (a program, a script or a python -m module by name) are one job.",
            examples=[["my-launcher"]],
        ),
    ] = []


class Config(_Section):
    daemon: Annotated[DaemonConfig, Field(description="Polling and logging.")] = DaemonConfig()
    gpu: Annotated[GpuConfig, Field(description="NVIDIA GPUs, through NVML.")] = GpuConfig()
    host: Annotated[HostConfig, Field(description="CPU sensors, fans and load.")] = HostConfig()
    prometheus: Annotated[PrometheusConfig, Field(description="The /metrics endpoint.")] = PrometheusConfig()
    alerts: Annotated[AlertsConfig, Field(description="Alert rules.")] = AlertsConfig()
    notifiers: Annotated[list[NotifierConfig], Field(description="Where alerts are posted.")] = []
    influxdb: Annotated[InfluxConfig, Field(description="Pushing samples to InfluxDB.")] = InfluxConfig()
    burnin: Annotated[BurninConfig, Field(description="rigmon burnin.")] = BurninConfig()
    jobs: Annotated[JobsConfig, Field(description="The ledger of jobs: who used the GPUs, and what it cost.")] = (
        JobsConfig()
    )
    cooling: Annotated[CoolingConfig, Field(description="Cooling held against its own past.")] = CoolingConfig()


ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _lookup(name: str, env: dict[str, str]) -> str | None:
    """``${NAME}``: the environment variable, else the systemd credential NAME (LoadCredential=)."""
    if name in env:
        return env[name]
    directory = env.get("CREDENTIALS_DIRECTORY")
    if directory:
        try:
            return (Path(directory) / name).read_text(encoding="utf-8").rstrip("\n")
        except (OSError, UnicodeDecodeError):
            return None
    return None


def _expand(value: Any, path: str, problems: list[tuple[str, str]], env: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _expand(v, f"{path}.{k}" if path else k, problems, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, f"{path}[{i}]", problems, env) for i, v in enumerate(value)]
    if isinstance(value, str):

        def sub(match: re.Match) -> str:
            name = match.group(1)
            found = _lookup(name, env)
            if found is None:
                problems.append(
                    (
                        path,
                        f"environment variable {name} is not set"
                        + (" nor a credential" if env.get("CREDENTIALS_DIRECTORY") else ""),
                    )
                )
                return ""
            return found

        return ENV_REF.sub(sub, value)
    return value


def parse(data: dict, source: str = "<config>", env: dict[str, str] | None = None) -> Config:
    problems: list[tuple[str, str]] = []
    data = _expand(data, "", problems, dict(os.environ) if env is None else env)
    # every problem in one pass: a ${NAME} that is not set, and whatever else is wrong
    expanded = {path for path, _ in problems}
    try:
        config = Config.model_validate(data)
    except ValidationError as e:
        problems += [
            # the rules' merge names the rule and field itself (builtin.X.params.y): under [alerts]
            ("alerts" if path == "alerts.rules" else path, line)
            for err in e.errors()
            if (path := _path(err["loc"])) not in expanded
            for line in _message(err).split("\n")  # a rule's problems, one a line
        ]
    if problems:
        raise ConfigError(source, problems)
    return config


def read(path: str | Path | None = None, text: str | None = None) -> tuple[dict, str]:
    """The config file's data as written (``${NAME}`` not yet replaced) and where it came from:
    ``path``; with no path, the default file if it exists, else no data (every default).
    ``text``: the file's text as read before (a reload hands over what it validated)."""
    if path is None:
        if text is None and not DEFAULT_PATH.exists():
            return {}, "built-in defaults"
        path = DEFAULT_PATH
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8") if text is None else text
    except OSError as e:
        raise ConfigError(str(path), [("", f"cannot read: {e.strerror or e}")]) from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), [("", "not UTF-8 text")]) from None
    try:
        return tomllib.loads(text), str(path)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(str(path), [("", f"not valid TOML: {e}")]) from None


def load(path: str | Path | None = None, env: dict[str, str] | None = None, text: str | None = None) -> Config:
    """The config at ``path``; with no path, the default file if it exists, else defaults."""
    data, source = read(path, text)
    return parse(data, source, env) if data else Config()


def settings(config: Config) -> Settings:
    """The validated config as plain data (``rigmon.config.settings``): what runs with it needs no pydantic."""

    def plain(value: Any) -> Any:
        if isinstance(value, BaseModel):
            data = {name: plain(getattr(value, name)) for name in type(value).model_fields}
            if isinstance(value, AlertsConfig):
                specs = value.effective_rules()
                data["effective_rules"] = tuple(plain(spec) for spec in specs)
                # what checking their expressions found (the checks ran here): a process given
                # these settings compiles the rules without parsing them again
                data["analysed"] = analysed(specs)
            return AlertsSettings(data) if isinstance(value, AlertsConfig) else Settings(data)
        if isinstance(value, SecretStr):
            return Secret(value.get_secret_value())
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(plain(v) for v in value)
        return value

    return plain(config)


def did_you_mean(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def unwrap_annotation(annotation: Any) -> Any:
    """The model or container inside Optional[...] and Annotated[...]."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, UnionType):
            annotation = next(a for a in get_args(annotation) if a is not type(None))
        else:
            return annotation


def _field_names(loc: tuple) -> list[str]:
    """The valid field names of the table at ``loc`` (a pydantic error location)."""
    current: Any = Config
    for part in loc:
        current = unwrap_annotation(current)
        if get_origin(current) in (list, dict):
            current = get_args(current)[-1]  # an index or a key: the item's type
        elif isinstance(current, type) and issubclass(current, BaseModel):
            field = next((f for n, f in current.model_fields.items() if part in (n, f.alias)), None)
            if field is None:
                return []
            current = field.annotation
        else:
            return []
    current = unwrap_annotation(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def schema() -> dict:
    return Config.model_json_schema()


def _path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _message(err: dict) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown field" + did_you_mean(str(err["loc"][-1]), _field_names(err["loc"][:-1]))
    if err["type"] == "missing":
        return "required field is missing"
    got = err.get("input")
    loc = [str(part) for part in err["loc"]]
    # notifier URLs carry tokens (Slack, Discord); InfluxDB's URL does not
    secret = any(part in _SECRET_FIELDS for part in loc) or (loc[:1] == ["notifiers"] and "url" in loc)
    shown = "" if secret or isinstance(got, (dict, list)) or got is None else f" (got {got!r})"
    return err["msg"].removeprefix("Value error, ") + shown


_SECRET_FIELDS = {"token", "headers", "password_sha256", "password_bcrypt", "password"}
