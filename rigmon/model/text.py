"""Text that came from outside (/proc, NVML, a recording, a file, another process's answer)
made safe to show: nothing in it can reach a terminal as a control sequence or a line break.

A GPU process's command line is any user's to choose: ``ESC ] 52`` in it would write the
admin's clipboard, ``ESC [ 2J`` clear the screen, a newline forge a log line. Every character
that is not printable is shown as its escape instead (``\\x1b``, ``\\n``, ``\\u202e``); bytes
that are not UTF-8 were replaced (U+FFFD) where they were decoded.
"""

from __future__ import annotations

import re
from typing import TextIO

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch.isprintable():
        return ch
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(value: object) -> str:
    """``value`` as one printable line: controls, line breaks, bidi overrides and lone
    surrogates shown as escapes."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():  # the usual case: one C-level scan
        return text
    return "".join(map(_escape, text))


def printable_lines(text: str) -> str:
    """Several lines of ours (joined by newlines) with anything else made printable."""
    if text.isprintable():
        return text
    return "\n".join(printable(line) for line in text.split("\n"))


def decode(data: bytes) -> str:
    """Bytes from /proc or a file as text: invalid UTF-8 replaced, never an error."""
    return data.decode("utf-8", "replace")


PIPE_WIDTH = 120  # the width into a pipe or a file, where COLUMNS does not say (as status's table)
MIN_WIDTH = 20


def terminal_width(stream: TextIO | None = None) -> int | None:
    """The columns output must fit: ``COLUMNS`` where set, else the terminal's width; None into a
    pipe or a file, where a line is a record and stays whole (a table takes PIPE_WIDTH there).
    Never below MIN_WIDTH."""
    import os
    import sys

    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return max(MIN_WIDTH, int(columns))
    out = stream if stream is not None else sys.stdout
    try:
        if out.isatty():
            return max(MIN_WIDTH, os.get_terminal_size(out.fileno()).columns)
    except (AttributeError, OSError, ValueError):
        pass
    return None


def fit(text: str, width: int | None, hang: int | None = None) -> str:
    """Every line of ``text`` within ``width`` columns (None: as it is): a longer one wrapped
    between words, its continuation indented ``hang`` columns (default: two past the line's own
    indent), and a word longer than a line broken only where nothing else fits."""
    import textwrap

    if width is None:
        return text
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = len(line) - len(line.lstrip(" "))
        under = min(indent + 2 if hang is None else hang, width // 2)
        out.extend(
            textwrap.wrap(
                line.lstrip(" "),
                width,
                initial_indent=" " * indent,
                subsequent_indent=" " * under,
                break_on_hyphens=False,
            )
            or [line[:width]]
        )
    return "\n".join(out)


# what a URL's host may hold as Go's net/url (Alertmanager's) parses it: letters, digits, these
# marks, and any non-ASCII (an IDN); a name with anything else ( \\ { } % # | ^ ` space…) makes a
# generatorURL Alertmanager refuses, every alert with it
_URL_HOST = re.compile(r"^(?:[A-Za-z0-9._~!$&'()*+,;=-]|[^\x00-\x7f])+$")


def url_host(name: str) -> bool:
    """Whether ``name`` can be a URL's host as it is."""
    return bool(_URL_HOST.match(name))


def url_authority(instance: str) -> bool:
    """Whether ``instance`` (host:port, as Prometheus names a target) can be a URL's authority."""
    host, colon, port = instance.rpartition(":")
    if not colon:
        return url_host(instance)
    ipv6 = host.startswith("[") and host.endswith("]") and bool(re.fullmatch(r"[0-9A-Fa-f:.]+", host[1:-1]))
    return port.isdigit() and len(port) <= 5 and (ipv6 or (":" not in host and url_host(host)))
