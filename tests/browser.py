"""A real headless Chromium driven over the DevTools protocol (``--remote-debugging-pipe``: JSON
messages on file descriptors 3 and 4, no websocket library): open a page at a given width,
read its DOM with JavaScript, take screenshots, as a person's browser would show it."""

from __future__ import annotations

import base64
import json
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path


class Chromium:
    def __init__(self, profile: Path):
        browser = shutil.which("chromium") or shutil.which("chromium-browser")
        assert browser, "tests/run installs Debian's chromium"
        to_child, self._out = os.pipe()  # we write, it reads on fd 3
        self._in, from_child = os.pipe()  # it writes on fd 4, we read
        cmd = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-sync",
            "--disable-background-networking",
            "--disable-component-update",
            "--hide-scrollbars",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            "about:blank",
        ]
        # the shell puts the pipe's ends at 3 and 4, where Chromium looks for them
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec 3<&{to_child} 4>&{from_child}; exec "$@"', "chromium", *cmd],
            pass_fds=(to_child, from_child),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child)
        os.close(from_child)
        self._id = 0
        self._buffer = b""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.send("Page.enable", session=True)
        self.send("Runtime.enable", session=True)

    def send(self, method: str, session: bool = False, **params) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def open(self, url: str, width: int, height: int = 900) -> None:
        self.send(
            "Emulation.setDeviceMetricsOverride",
            session=True,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=width < 600,
        )
        self.send("Page.navigate", session=True, url=url)

    def js(self, expression: str):
        """The expression's value (awaited where it is a promise), as JSON."""
        found = self.send(
            "Runtime.evaluate", session=True, expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in found:
            raise RuntimeError(f"{expression}: {found['exceptionDetails']}")
        return found["result"].get("value")

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._in, self._out):
            try:
                os.close(fd)
            except OSError:
                pass


def broken_words(roots: str) -> str:
    """JavaScript for the words (two letters or more) under the elements ``roots`` selects that
    the browser laid out on more than one line (a word broken mid-word); charts, scripts and
    what is not shown are left out."""
    return """(() => {
  const out = [];
  for (const root of document.querySelectorAll(ROOTS)) {
    const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      if (n.parentElement.closest('svg, script, style') || !n.parentElement.getClientRects().length) continue;
      for (const m of n.data.matchAll(/\\S{2,}/g)) {
        const r = document.createRange(); r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
        const lines = new Set([...r.getClientRects()].filter(b => b.width > 0).map(b => Math.round(b.top)));
        if (lines.size > 1) out.push(m[0]);
      }
    }
  }
  return out;
})()""".replace("ROOTS", json.dumps(roots))


# The page's structure, as README's screenshot must show it: every element the page itself names
# (its sections, tables, tiles' box), in order, without the ones made per GPU or per poll
PAGE_OUTLINE = """[...document.querySelectorAll('body [id]')]
  .filter(e => !/^(gpu-|ov-|gpus-none$|tip$)/.test(e.id))
  .map(e => e.tagName.toLowerCase() + '#' + e.id)"""
OUTLINE_KEY = b"rigmon-page-outline"


def with_text(png: bytes, key: bytes, text: str) -> bytes:
    """The PNG with a tEXt chunk ``key``=``text`` before its end."""
    body = key + b"\0" + text.encode("latin-1")
    chunk = struct.pack(">I", len(body)) + b"tEXt" + body + struct.pack(">I", zlib.crc32(b"tEXt" + body))
    end = png.rindex(b"IEND") - 4
    return png[:end] + chunk + png[end:]


def text_of(png: bytes, key: bytes) -> str | None:
    """A PNG's tEXt chunk ``key``, or None."""
    at = 8
    while at + 8 <= len(png):
        size, kind = struct.unpack(">I4s", png[at : at + 8])
        data = png[at + 8 : at + 8 + size]
        if kind == b"tEXt" and data.startswith(key + b"\0"):
            return data[len(key) + 1 :].decode("latin-1")
        at += 12 + size
    return None
