"""A validated config as plain data, for the code that runs with it.

``rigmon.config`` validates a config with pydantic's models; importing them costs about 60 ms
and 20 MiB before a single field is read. What the daemon and ``status`` need afterwards is
the values, so they get this: ``Settings``, a read-only view with the models' attribute names
(``config.gpu.interval``, ``config.alerts.effective_rules()``, secrets' ``get_secret_value()``),
holding only Python's own types. Two ways to one:

- ``validated(path, overrides)`` has a child Python validate the file and hand the result
  back through a pipe: the daemon, which holds its config for weeks, never imports pydantic;
- ``cached(path)`` keeps the result, secrets left out, in the user's cache directory (a file
  per config path), with a digest of everything the result depends on (rigmon's version,
  the file's bytes, the environment variables it names): a one-shot command validates a
  config once per change, not at every run. The daemon starts from the same cache where the
  config it kept holds no secret (``whole``), so a restart answers its first scrape without
  waiting for a child; a config with secrets is validated by the child at every start.

A bad config raises ``ConfigError`` either way, with the same field paths and messages.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import __version__

try:  # CPython's own SHA-256: hashlib would load OpenSSL first, a third of this module's import
    from _sha256 import sha256
except ImportError:  # another Python, or 3.12's _sha2
    from hashlib import sha256

from ..model.args import DEFAULT_CONFIG
from ..system import cache

CACHE_FILES = 8  # configs a user's cache keeps (the oldest goes)
MAX_CACHE_BYTES = 1 << 20
# what a cached entry holds (2: the rules' analysis too; 3: the alerts' table its own class;
# 4: whether it is the whole config, no secret left out); a change validates afresh
CACHE_FORMAT = "4"
_NAMES = re.compile(rb"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ConfigError(Exception):
    """A config that cannot be used. ``problems`` lists (field path, message)."""

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        super().__init__(
            "\n".join(f"{source}: {path}: {msg}" if path else f"{source}: {msg}" for path, msg in problems)
        )

    def __reduce__(self):
        return ConfigError, (self.source, self.problems)


class Secret:
    """A secret value (a token, a webhook URL): shown as stars, read with ``get_secret_value``."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None):
        object.__setattr__(self, "_value", value)

    def get_secret_value(self) -> str:
        if self._value is None:  # a cached config leaves secrets out: what needs one validates afresh
            raise RuntimeError("this copy of the config was cached without its secrets")
        return self._value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a secret is read-only")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self):
        return Secret, (self._value,)

    def __repr__(self) -> str:
        return "Secret('**********')"

    __str__ = __repr__


class Settings:
    """One table of a validated config: its fields as attributes, read-only."""

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any]):
        object.__setattr__(self, "_data", data)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a validated config is read-only")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Settings) and other._data == self._data

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self):
        return type(self), (self._data,)

    def __repr__(self) -> str:
        return f"Settings({', '.join(self._data)})"

    def model_dump(self) -> dict[str, Any]:
        """The values as plain dicts, lists and tuples, named as the fields (``for_``; secrets stay
        ``Secret``): what pydantic's ``model_dump()`` gives for the model it came from."""
        return _dump(self)


class AlertsSettings(Settings):
    """The ``[alerts]`` table, with the rules it makes."""

    __slots__ = ()

    def effective_rules(self) -> list:
        """The built-in rules with the config's changes, then its own."""
        return list(self._data["effective_rules"])


def _dump(value: Any) -> Any:
    if isinstance(value, Settings):
        return {k: _dump(v) for k, v in value._data.items() if k not in ("effective_rules", "analysed")}
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_dump(v) for v in value)
    return value


def _without_secrets(value: Any) -> Any:
    if isinstance(value, Secret):
        return Secret(None)
    if isinstance(value, Settings):
        return type(value)({k: _without_secrets(v) for k, v in value._data.items()})
    if isinstance(value, dict):
        return {k: _without_secrets(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_without_secrets(v) for v in value)
    return value


def describe_source(path: str | Path | None = None) -> str:
    """Which file a config comes from, for the log: ``path``, the default file, or none."""
    if path is not None:
        return str(path)
    return str(DEFAULT_CONFIG) if DEFAULT_CONFIG.exists() else f"built-in defaults (no {DEFAULT_CONFIG})"


# --- validated by a child -----------------------------------------------------------------------


def validated(
    path: str | Path | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
    text: str | None = None,
    warnings: list | None = None,
) -> Settings:
    """The config at ``path`` (or the default), validated by a child Python, with ``overrides``
    ({table: {field: value}}, the command line's) applied before validation. Its warnings (a
    deprecated name) go to this process's standard error as the child logs them, and into
    ``warnings`` as (logger, level, message). ``text``: the file's text as read before,
    validated in its place."""
    import json
    import subprocess

    request = json.dumps({"path": None if path is None else str(path), "overrides": overrides or {}, "text": text})
    # on its standard input: a command line is anyone's to read (ps), and the text may hold secrets
    done = subprocess.run(
        [sys.executable, "-m", "rigmon.config.validate"], input=request.encode(), stdout=subprocess.PIPE
    )
    if done.returncode != 0 or not done.stdout:
        raise RuntimeError(
            f"validating the config: {sys.executable} -m rigmon.config.validate exited {done.returncode}"
        )
    answer, warned = pickle.loads(done.stdout)  # our own child's, through our own pipe
    if warnings is not None:
        warnings.extend(warned)
    if isinstance(answer, ConfigError):
        raise answer
    return answer


# --- cached for one-shot commands ---------------------------------------------------------------


def cached(path: str | Path | None, validate: Callable[[str | Path | None], Settings]) -> Settings:
    """The config at ``path`` (or the default) as validated before, where nothing it depends on
    has changed since; else ``validate(path)`` now, kept with its secrets left out. What the
    validation warned of (a deprecated name) is kept too, and warned of again on every use."""
    text, where = _read(path)
    # one file per config path; what it was validated from is kept in it and compared whole
    file, inputs = _cache_file(where, text)
    found = _read_cache(file) if file is not None else None
    if found is not None and found[0] == inputs:
        _, settings, warnings, _ = found
        warn_again(warnings)
        return settings
    catch = Caught()
    logger = logging.getLogger("rigmon")
    logger.addHandler(catch)
    try:
        settings = validate(path)
    finally:
        logger.removeHandler(catch)
    if file is not None:
        _remember(file, inputs, settings, catch.said())
    return settings


def whole(path: str | Path | None) -> tuple[Settings, str | None, list] | None:
    """The config at ``path`` (or the default) as the cache keeps it, where nothing it depends
    on has changed and it holds no secret (none was left out), with the text it was validated
    from and what that validation warned of (for the caller to warn of again); else None:
    validate it (``validated``) and ``remember`` it."""
    text, where = _read(path)
    file, inputs = _cache_file(where, text)
    found = _read_cache(file) if file is not None else None
    if found is None or found[0] != inputs or not found[3]:
        return None
    try:
        said = text.decode("utf-8") if text is not None else None
    except UnicodeDecodeError:
        return None
    return found[1], said, found[2]


def remember(path: str | Path | None, text: str | None, settings: Settings, warnings: list) -> None:
    """Keep what ``validated`` made of ``text``, the file at ``path``, for ``whole`` (and the
    one-shot commands): secrets left out, as always."""
    where = _named(Path(path) if path is not None else DEFAULT_CONFIG, text is not None)
    file, inputs = _cache_file(where, text.encode("utf-8") if text is not None else None)
    if file is not None and inputs is not None:
        _remember(file, inputs, settings, warnings)


def _cache_file(where: str, text: bytes | None) -> tuple[Path | None, str | None]:
    inputs = _inputs(text, where)
    directory = cache.directory()
    if directory is None or inputs is None:
        return None, inputs
    return directory / f"config-{zlib.crc32(where.encode(errors='surrogateescape')):08x}.pickle", inputs


def _remember(file: Path, inputs: str, settings: Settings, warnings: list) -> None:
    kept = _without_secrets(settings)
    _write_cache(file, (inputs, kept, warnings, not _has_secret(settings)))


def _has_secret(value: Any) -> bool:
    if isinstance(value, Secret):
        return value._value is not None
    if isinstance(value, Settings):
        return any(_has_secret(v) for v in value._data.values())
    if isinstance(value, dict):
        return any(_has_secret(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_secret(v) for v in value)
    return False


def warn_again(warnings: list) -> None:
    for name, level, message in warnings:
        logging.getLogger(name).log(level, "%s", message)


class Caught(logging.Handler):
    """What a validation logs at WARNING or above, to be told again when the cache answers
    (``warn_again``); the validating child hands it back with its answer."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def said(self) -> list[tuple[str, int, str]]:
        """Each as (logger, level, message)."""
        return [(r.name, r.levelno, r.getMessage()) for r in self.records]


def _read(path: str | Path | None) -> tuple[bytes | None, str]:
    where = Path(path) if path is not None else DEFAULT_CONFIG
    try:
        return where.read_bytes(), _named(where, True)
    except OSError:
        return None, _named(where, False)  # validation says what is wrong (or uses the defaults)


def _named(where: Path, read: bool) -> str:
    """A config file as its cache entry names it: resolved where it was read."""
    return str(where.resolve()) if read else str(where)


def _inputs(text: bytes | None, where: str) -> str | None:
    """A digest of everything a validation's result depends on (the file and its bytes, the
    environment variables it names, rigmon's and Python's versions), which holds none of
    them: the file and the variables may be secrets. None where it cannot be cached."""
    h = sha256()
    for part in (CACHE_FORMAT, __version__, sys.version, where):
        h.update(part.encode(errors="surrogateescape") + b"\0")
    h.update(_schema())
    if text is not None:
        h.update(b"file\0" + text)
        names = sorted(set(_NAMES.findall(text)))
        if names and os.environ.get("CREDENTIALS_DIRECTORY"):
            return None  # systemd credentials are files of their own: never cached
        for name in names:
            value = os.environ.get(name.decode())
            h.update(b"\0" + name + (b"\0unset" if value is None else b"=" + value.encode(errors="surrogateescape")))
    return h.hexdigest()


def _schema() -> bytes:
    """What a validation's result depends on in rigmon itself: the config's models and the
    built-in rules, as installed (a new setting in the same version validates afresh)."""
    package = Path(__file__).parents[1]
    out = b""
    for name in SCHEMA_FILES:
        try:
            out += sha256((package / name).read_bytes()).digest()
        except OSError:
            out += b"?"
    return out


# what _schema reads, under rigmon/ (tests/test_settings.py: each exists)
SCHEMA_FILES = ("config/schema.py", "alerts/builtin.toml", "alerts/specs.py")


def _read_cache(file: Path) -> tuple[str, Settings, list, bool] | None:
    """The cached settings where the file is this user's own and no one else can write it
    (as Python trusts its own __pycache__); else None."""
    data = cache.read_own(file, MAX_CACHE_BYTES)
    if data is None:
        return None
    try:
        found = pickle.loads(data)
    except Exception:  # a damaged or foreign file: validate afresh
        return None
    if (
        isinstance(found, tuple)
        and len(found) == 4
        and isinstance(found[1], Settings)
        and isinstance(found[2], list)
        and isinstance(found[3], bool)
    ):
        return found
    return None


def _write_cache(file: Path, entry: tuple[str, Settings, list, bool]) -> None:
    """Atomically, readable by this user only; a cache that cannot be written is no cache."""
    cache.write_own(file, pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL), CACHE_FILES, "config-*.pickle")
