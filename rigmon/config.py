"""Configuration: one TOML file, validated by pydantic, with defaults good enough that no
file is needed. ``${NAME}`` in any string is replaced by the environment variable NAME, so
secrets need not sit in the file."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from .alerts.rules import Duration, RuleOverride, RuleSpec, merge

DEFAULT_PATH = Path("/etc/rigmon/rigmon.toml")
# Not node_exporter's 9100, dcgm-exporter's 9400 or nvidia_gpu_exporter's 9835. Prometheus's
# 9100-9999 exporter range is fully allocated, so any default collides with something: it is a setting.
DEFAULT_PORT = 9963


def _check_http(url: str) -> str:
    if not re.match(r"^https?://[^/\s]+", url):
        raise ValueError("must be an http:// or https:// URL")
    return url


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DaemonConfig(_Section):
    interval: Annotated[float, Field(gt=0, le=3600, description="Seconds between polls. NVML's power reading "
                                                                 "is a 1 s average, so below 1 s gains little.")] = 1.0
    history: Annotated[int, Field(ge=1, le=1_000_000, description="Recent samples the daemon keeps in memory "
                                                                   "(alert rules keep their own history).")] = 900
    state_dir: Annotated[Path, Field(description="Where spools and state live (systemd's StateDirectory).")] = Path(
        "/var/lib/rigmon")
    log_level: Literal["debug", "info", "warning", "error"] = "info"


class GpuConfig(_Section):
    enabled: bool = True
    indices: Annotated[list[Annotated[int, Field(ge=0)]] | None, Field(
        description="GPU indices to watch; all when absent.")] = None
    slow_interval: Annotated[float, Field(ge=0, description="Seconds between reads of the slow counters: energy "
                                                            "(~3 ms a GPU) and cumulative throttle times.")] = 5.0
    pcie_throughput: Annotated[bool, Field(description="Read PCIe throughput (costs ~21 ms a GPU per read).")] = False
    processes: bool = True
    xid_events: bool = True


class HostConfig(_Section):
    enabled: bool = True
    sysfs: Annotated[Path, Field(description="Root of sysfs, for RAPL energy.")] = Path("/sys")
    rapl: Annotated[bool, Field(description="Read CPU package energy from RAPL (root-only on recent kernels).")] = True


class BasicAuth(_Section):
    username: Annotated[str, Field(min_length=1)]
    password_sha256: Annotated[SecretStr, Field(description="Hex SHA-256 of the password.")]

    @field_validator("password_sha256")
    @classmethod
    def _hex(cls, v: SecretStr) -> SecretStr:
        if not re.fullmatch(r"[0-9a-fA-F]{64}", v.get_secret_value()):
            raise ValueError("must be 64 hex digits (sha256sum of the password)")
        return v


class PrometheusConfig(_Section):
    enabled: bool = True
    listen: Annotated[str, Field(description="Address to bind; \"::\" or \"0.0.0.0\" for every interface.")] = "0.0.0.0"
    port: Annotated[int, Field(ge=0, le=65535)] = DEFAULT_PORT
    tls_cert: Annotated[Path | None, Field(description="PEM certificate (chain); serve HTTPS when set.")] = None
    tls_key: Annotated[Path | None, Field(description="PEM private key for tls_cert.")] = None
    basic_auth: BasicAuth | None = None

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
    name: Annotated[str, Field(min_length=1)]
    watts: Annotated[float, Field(gt=0, description="The PSU's (or group's) budget in watts.")]
    gpus: Annotated[list[Annotated[int, Field(ge=0)]] | None, Field(
        description="GPU indices on this PSU; all when absent.")] = None
    include_cpu: Annotated[bool, Field(description="Add the CPU package power (RAPL) to this group.")] = False


class PowerBudgetConfig(_Section):
    watts: Annotated[float | None, Field(gt=0, description="Budget for all GPUs (plus the CPU package when "
                                                             "include_cpu); no whole-box budget when absent.")] = None
    include_cpu: bool = True
    groups: list[PsuGroupConfig] = []


class AlertsConfig(_Section):
    enabled: bool = True
    repeat_interval: Annotated[Duration, Field(
        description="Remind of a firing alert this often (0: never).")] = 4 * 3600.0
    builtin: Annotated[dict[str, RuleOverride], Field(
        description="Changes to built-in rules by name: enabled, for, params, severity, when, clear, texts.")] = {}
    rules: Annotated[list[RuleSpec], Field(description="Your own rules.")] = []
    power_budget: PowerBudgetConfig = PowerBudgetConfig()
    expected_sensors: Annotated[list[str], Field(
        description="Sensors that must be there from the start: 'fan:chip/label', 'temperature:chip/label', "
                    "'NVML'.")] = []

    @model_validator(mode="after")
    def _merge(self) -> AlertsConfig:
        merge(self.builtin, self.rules)  # raises ValueError naming the rule and field
        return self

    def effective_rules(self) -> list[RuleSpec]:
        return merge(self.builtin, self.rules)


class NotifierConfig(_Section):
    type: Literal["webhook", "slack", "discord", "ntfy"]
    url: Annotated[SecretStr, Field(description="Where to post (a secret: Slack and Discord URLs carry a token). "
                                                "For ntfy, the topic URL.")]
    name: str | None = None
    min_severity: Literal["info", "warning", "critical"] = "warning"
    headers: dict[str, SecretStr] = {}
    token: Annotated[SecretStr | None, Field(description="Bearer token (ntfy access tokens).")] = None
    timeout: Annotated[float, Field(gt=0, le=300)] = 10.0
    retry_initial: Annotated[Duration, Field(description="First retry delay; doubles up to retry_max.")] = 1.0
    retry_max: Duration = 60.0
    max_age: Annotated[Duration, Field(description="Give up on a message this old (logged, counted).")] = 24 * 3600.0
    queue_size: Annotated[int, Field(ge=1, le=1_000_000)] = 1000

    @field_validator("url")
    @classmethod
    def _http(cls, v: SecretStr) -> SecretStr:
        _check_http(v.get_secret_value())
        return v


class InfluxConfig(_Section):
    enabled: bool = False
    api: Annotated[Literal["v2", "v1"], Field(description="v2: InfluxDB 2.x, 3.x and 1.8+ (url, org, bucket, "
                                                          "token); v1: InfluxDB 1.x (url, database, "
                                                          "retention_policy, username, password).")] = "v2"
    url: str = "http://localhost:8086"
    org: Annotated[str, Field(description="v2: organisation ('-' for InfluxDB 1.8).")] = ""
    bucket: Annotated[str, Field(description="v2: bucket ('db/rp' for InfluxDB 1.8).")] = "rigmon"
    token: Annotated[SecretStr | None, Field(description="v2: API token ('user:password' for InfluxDB 1.8).")] = None
    database: Annotated[str, Field(description="v1: database.")] = "rigmon"
    retention_policy: Annotated[str, Field(description="v1: retention policy (the database's default when "
                                                       "empty).")] = ""
    username: str = ""
    password: SecretStr | None = None
    timeout: Annotated[float, Field(gt=0, le=300)] = 10.0
    flush_interval: Annotated[float, Field(gt=0, le=3600, description="Seconds a batch may wait before it is "
                                                                      "sent.")] = 1.0
    retry_initial: Duration = 1.0
    retry_max: Annotated[Duration, Field(description="Longest wait between retries; also the pace of retries "
                                                     "after the server refused the credentials.")] = 60.0
    spool_dir: Annotated[Path | None, Field(description="Where unsent points wait on disk (default: "
                                                        "<state_dir>/influxdb-spool).")] = None
    spool_max_bytes: Annotated[int, Field(ge=65536, description="Bound of the spool; past it the oldest points "
                                                                "are dropped and counted.")] = 256 << 20
    queue_size: Annotated[int, Field(ge=10, le=1_000_000)] = 10_000

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        return _check_http(v)


class BurninConfig(_Section):
    price_per_kwh: Annotated[float | None, Field(ge=0, description="Electricity price, for the report's cost.")] = None
    currency: str = "EUR"
    reports_dir: Annotated[Path, Field(description="Where scheduled burn-ins keep their reports; the daemon "
                                                   "exports the newest one's result.")] = Path("/var/lib/rigmon-burnin")


class Config(_Section):
    daemon: DaemonConfig = DaemonConfig()
    gpu: GpuConfig = GpuConfig()
    host: HostConfig = HostConfig()
    prometheus: PrometheusConfig = PrometheusConfig()
    alerts: AlertsConfig = AlertsConfig()
    notifiers: list[NotifierConfig] = []
    influxdb: InfluxConfig = InfluxConfig()
    burnin: BurninConfig = BurninConfig()


class ConfigError(Exception):
    """A config that cannot be used. ``problems`` lists (field path, message)."""

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        super().__init__("\n".join(f"{source}: {path}: {msg}" if path else f"{source}: {msg}"
                                   for path, msg in problems))


_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(value: Any, path: str, problems: list[tuple[str, str]], env: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _expand(v, f"{path}.{k}" if path else k, problems, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, f"{path}[{i}]", problems, env) for i, v in enumerate(value)]
    if isinstance(value, str):
        def sub(match: re.Match) -> str:
            name = match.group(1)
            if name not in env:
                problems.append((path, f"environment variable {name} is not set"))
                return ""
            return env[name]
        return _ENV.sub(sub, value)
    return value


def parse(data: dict, source: str = "<config>", env: dict[str, str] | None = None) -> Config:
    problems: list[tuple[str, str]] = []
    data = _expand(data, "", problems, dict(os.environ) if env is None else env)
    if problems:
        raise ConfigError(source, problems)
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(source, [(_path(err["loc"]), _message(err)) for err in e.errors()]) from None


def load(path: str | Path | None = None, env: dict[str, str] | None = None) -> Config:
    """The config at ``path``; with no path, the default file if it exists, else defaults."""
    if path is None:
        if not DEFAULT_PATH.exists():
            return Config()
        path = DEFAULT_PATH
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(str(path), [("", f"cannot read: {e.strerror or e}")]) from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), [("", "not UTF-8 text")]) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(str(path), [("", f"not valid TOML: {e}")]) from None
    return parse(data, str(path), env)


def masked(config: Config) -> dict:
    """The effective config as plain data, secrets shown as ``********``."""
    return config.model_dump(mode="json")  # SecretStr dumps as "**********"


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
        return "unknown field"
    if err["type"] == "missing":
        return "required field is missing"
    got = err.get("input")
    loc = [str(part) for part in err["loc"]]
    # notifier URLs carry tokens (Slack, Discord); InfluxDB's URL does not
    secret = any(part in _SECRET_FIELDS for part in loc) or (loc[:1] == ["notifiers"] and loc[-1:] == ["url"])
    shown = "" if secret or isinstance(got, (dict, list)) or got is None else f" (got {got!r})"
    return err["msg"].removeprefix("Value error, ") + shown


_SECRET_FIELDS = {"token", "headers", "password_sha256", "password"}
