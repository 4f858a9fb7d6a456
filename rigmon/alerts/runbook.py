"""The runbook: what each rule the daemon evaluates means and what to do, as a page at
``/runbook``, one section a rule at ``#<alertname>``. An alert's ``runbook_url`` points there,
from rigmon's own engine and from the PromQL rules alike (which read the page's address from
``rigmon_runbook_info``), so a notification links to the rules as this box runs them: its
thresholds, its own rules.

Every text is the config's (a person's, or builtin.toml's), escaped for HTML.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the daemon runs without pydantic loaded: a spec is only read here
    from .specs import RuleSpec

_STYLE = (
    "body{font:15px/1.5 system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#1d2330}"
    "h2{margin:2rem 0 .3rem;font-size:1.15rem}code{background:#eef1f5;padding:0 .25rem;border-radius:3px}"
    "dt{font-weight:600;margin-top:.4rem}dd{margin:0 0 0 1rem}.sev{font-size:.85rem;color:#5a6270}"
    "nav a{margin-right:.6rem;white-space:nowrap}"
)
CSP = "default-src 'none'; style-src 'unsafe-inline'"


def page(page_url: str) -> str:
    """The runbook's page, from the box's page ("": none, where the page is off)."""
    return f"{page_url.rstrip('/')}/runbook" if page_url else ""


def url(page_url: str, alertname: str) -> str:
    """The runbook's link for an alert, from the box's page ("": none, where the page is off)."""
    return f"{page(page_url)}#{alertname}" if page_url else ""


def html(specs: Iterable[RuleSpec], host: str) -> bytes:
    """Every enabled rule, in the config's order: severity, when it fires and clears, for how
    long, what it means, what to do, its thresholds."""
    rules = [s for s in specs if s.enabled]
    parts = [
        "<!doctype html><html lang=en><meta charset=utf-8>"
        f"<meta name=viewport content='width=device-width'><title>rigmon runbook: {escape(host)}</title>"
        f"<style>{_STYLE}</style><h1>rigmon runbook: {escape(host)}</h1>"
        "<p>The rules this box evaluates, as its config sets them. Texts in braces are filled in "
        "with the alert's values.</p><nav>",
        *(f"<a href='#{escape(s.name)}'>{escape(s.name)}</a>" for s in rules),
        "</nav>",
    ]
    for s in rules:
        rows = [("fires when", f"<code>{escape(s.when)}</code>")]
        if s.clear:
            rows.append(("resolves when", f"<code>{escape(s.clear)}</code>"))
        if s.for_:
            rows.append(("for", f"{s.for_:g} s"))
        if s.description:
            rows.append(("what it means", escape(s.description)))
        if s.hint:
            rows.append(("what to do", escape(s.hint)))
        if s.params:
            shown = ", ".join(f"<code>{escape(k)} = {escape(str(v))}</code>" for k, v in s.params.items())
            rows.append(("thresholds", shown))
        if s.inhibits:
            rows.append(("holds back", escape(", ".join(s.inhibits))))
        parts.append(
            f"<section id='{escape(s.name)}'><h2>{escape(s.name)} <span class=sev>{escape(s.severity)}, "
            f"{escape(s.kind)}</span></h2><p>{escape(s.summary)}</p><dl>"
            + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
            + "</dl></section>"
        )
    return "".join(parts).encode("utf-8", "backslashreplace")
