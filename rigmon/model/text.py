"""Text that came from outside (/proc, NVML, a recording, a file, another process's answer)
made safe to show: nothing in it can reach a terminal as a control sequence or a line break.

A GPU process's command line is any user's to choose: ``ESC ] 52`` in it would write the
admin's clipboard, ``ESC [ 2J`` clear the screen, a newline forge a log line. Every character
that is not printable is shown as its escape instead (``\\x1b``, ``\\n``, ``\\u202e``); bytes
that are not UTF-8 were replaced (U+FFFD) where they were decoded.
"""

from __future__ import annotations

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
