"""The config written out: the effective config with its secrets masked (``rigmon config
show``), any config as TOML, and the commented example of every field (``rigmon config
example``), generated from the schema so that it never lags a field."""

from __future__ import annotations

import json
import re
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

from .schema import ENV_REF, Config, unwrap_annotation

MASK = "********"


def masked(config: Config, written: dict | None = None) -> dict:
    """The effective config as plain data (durations as strings, ``for`` not ``for_``), secrets
    masked: a secret written with ``${NAME}`` references shows as written (the references hide what
    is secret; "https://hooks.slack.com/services/${TOKEN}"), any other as ``********``. A
    notifier's URL shows what is not secret in it (``mask_url``): you can check what you typed."""
    written = written or {}
    out = _unmask(config.model_dump(mode="json", by_alias=True), written)
    given = written.get("notifiers") if isinstance(written.get("notifiers"), list) else []
    for i, (notifier, shown) in enumerate(zip(config.notifiers, out.get("notifiers", []), strict=True)):
        as_written = given[i].get("url") if i < len(given) and isinstance(given[i], dict) else None
        urls = notifier.url if isinstance(notifier.url, list) else [notifier.url]
        refs = as_written if isinstance(as_written, list) else [as_written]
        plain = [
            ref if isinstance(ref, str) and ENV_REF.search(ref) else mask_url(url.get_secret_value())
            for url, ref in zip(urls, refs + [None] * (len(urls) - len(refs)), strict=False)
        ]
        shown["url"] = plain if isinstance(notifier.url, list) else plain[0]
    return out


# Hosts whose webhook URLs are a credential in their path: Slack, Discord, Microsoft Teams, and
# ntfy.sh (a topic on the public server is read by whoever knows its name)
_SECRET_PATH_HOSTS = (
    "hooks.slack.com",
    "discord.com",
    "discordapp.com",
    "webhook.office.com",
    "outlook.office.com",
    "ntfy.sh",
)


def mask_url(url: str) -> str:
    """``url`` with what is secret in it masked: a password, every query value (?token=…), and
    the path of a webhook whose path is its credential (Slack, Discord, Teams). The rest stays:
    a plain receiver's URL shows as typed."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return MASK
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", f":{MASK}@", 1)
    path = parts.path
    if path and any(host == h or host.endswith("." + h) for h in _SECRET_PATH_HOSTS):
        path = "/" + MASK
    query = "&".join(
        f"{pair.split('=', 1)[0]}={MASK}" if "=" in pair else MASK for pair in parts.query.split("&") if pair
    )
    return urlunsplit((parts.scheme, netloc, path, query, ""))


def _unmask(dumped: Any, written: Any) -> Any:
    if isinstance(dumped, dict):
        return {k: _unmask(v, written.get(k) if isinstance(written, dict) else None) for k, v in dumped.items()}
    if isinstance(dumped, list):
        return [
            _unmask(v, written[i] if isinstance(written, list) and i < len(written) else None)
            for i, v in enumerate(dumped)
        ]
    if dumped == "**********":  # pydantic's SecretStr
        return written if isinstance(written, str) and ENV_REF.search(written) else MASK
    return dumped


# --- TOML out ------------------------------------------------------------------------------
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(key: Any) -> str:
    key = str(key)  # a table keyed by GPU index holds ints once validated
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return json.dumps(value, ensure_ascii=False)  # JSON's numbers and strings are TOML's
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML for {type(value).__name__}")


def _is_table(value: Any) -> bool:
    return isinstance(value, dict) and bool(value)


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def to_toml(data: dict, path: tuple[str, ...] = ()) -> str:
    """``data`` as TOML that parses back to it: keys first, then tables, then arrays of tables.
    None has no TOML form: it is written as a comment, and reads back as absent."""
    out = []
    for key, value in data.items():
        if value is None:
            out.append(f"# {_key(key)} is not set")
        elif not _is_table(value) and not _is_table_array(value):
            out.append(f"{_key(key)} = {_value(value)}")
    for key, value in data.items():
        name = ".".join(_key(k) for k in (*path, key))
        if _is_table(value):
            out.append(f"\n[{name}]")
            out.append(to_toml(value, (*path, key)))
        elif _is_table_array(value):
            for item in value:
                out.append(f"\n[[{name}]]")
                out.append(to_toml(item, (*path, key)))
    return "\n".join(line for line in out if line).strip("\n")


# --- the example file: every setting, its default and what it does ---------------------------
EXAMPLE_HEAD = """\
# rigmon configuration: copy to /etc/rigmon/rigmon.toml and change what you need.
# Every setting is shown with its built-in default; a missing file means all defaults.
# Commented-out settings are unset by default; the value shown is an example.
# Durations are seconds or strings like "30s", "10m", "1h30m", "7d", "2w".
# "${NAME}" in any string is replaced by the environment variable NAME, or by the systemd
# credential NAME (LoadCredential=), so secrets can stay out of this file.
# Made by: rigmon config example.  Check a file with: rigmon config check FILE
"""


def example() -> str:
    """Every setting with its default (or, where unset by default, an example) and a one-line
    comment, from the schema: what ``deploy/rigmon.toml`` holds."""
    lines = [EXAMPLE_HEAD.rstrip("\n")]
    _example_table(lines, Config, Config(), (), commented=False)
    return "\n".join(lines) + "\n"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    inner = unwrap_annotation(annotation)
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def _item_model(annotation: Any) -> type[BaseModel] | None:
    """X for list[X] or dict[str, X] where X is a model."""
    inner = unwrap_annotation(annotation)
    return _model_of(get_args(inner)[-1]) if get_origin(inner) in (list, dict) else None


def _commented(text: str, field) -> str:
    return f"{text:<38} # {_comment(field)}".rstrip()


def _comment(field) -> str:
    text = field.description or ""
    choices = unwrap_annotation(field.annotation)
    if get_origin(choices) is Literal:
        text += f" One of: {', '.join(get_args(choices))}."
    return text


def _example_value(model: type[BaseModel], name: str, field, prefer_example: bool) -> Any:
    """The field's default, else (or first, where ``prefer_example``) its documented example, as JSON data."""
    if field.examples and (prefer_example or field.is_required() or field.default is None):
        return field.examples[0]
    if not field.is_required() and field.default is not None:
        return model.__pydantic_serializer__.to_python(
            model.model_construct(), mode="json", by_alias=True, include={name}
        ).get(field.alias or name)
    return field.examples[0] if field.examples else None


def _example_table(
    lines: list[str], model: type[BaseModel], instance: BaseModel | None, path: tuple[str, ...], commented: bool
) -> None:
    """The keys of one table, then its tables. ``instance`` None: a table that is absent by default,
    shown commented out with example values."""
    hash_ = "# " if commented else ""
    later: list[tuple[str, Any]] = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        sub, item = _model_of(field.annotation), _item_model(field.annotation)
        default = getattr(instance, name) if instance is not None else None
        if sub is not None or item is not None:
            later.append((name, field))
            continue
        value = _example_value(model, name, field, prefer_example=instance is None)
        unset = instance is None or default is None
        if value is None:
            continue
        lines.append(_commented(f"{hash_ if not unset or commented else '# '}{_key(key)} = {_value(value)}", field))
    for name, field in later:
        key = field.alias or name
        sub, item = _model_of(field.annotation), _item_model(field.annotation)
        here = (*path, key)
        title = ".".join(_key(k) for k in here)
        if sub is not None:
            value = getattr(instance, name) if instance is not None else None
            off = commented or value is None
            lines.append("")
            lines.append(_commented(f"{'# ' if off else ''}[{title}]", field))
            _example_table(lines, sub, value, here, off)
        elif get_origin(unwrap_annotation(field.annotation)) is list:
            lines.append("")
            lines.append(_commented(f"# [[{title}]]", field))
            _example_table(lines, item, None, here, True)
        else:  # a table of tables by name: show the documented example
            for entry, values in (field.examples or [{}])[0].items():
                lines.append("")
                lines.append(_commented(f"# [{title}.{_key(entry)}]", field))
                for k, v in values.items():
                    lines.append(f"# {_key(k)} = {_value(v)}")
