"""README's screenshot, made from the page as it is: ``rigmon run --demo --replay-gpus 8`` (the
installed rigmon), a minute after start, 1400 × 1000 px in headless Chromium, written to
docs/page.png with the page's outline in it, which test_page checks against the page now.

    .venv/bin/python tests/screenshot.py
"""

from __future__ import annotations

import base64
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from browser import OUTLINE_KEY, PAGE_OUTLINE, Chromium, with_text  # noqa: E402
from servers import Rigmon, wait_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEMO = ["--demo", "--replay-gpus", "8"]


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        began = time.monotonic()
        rigmon = Rigmon(Path(tmp), extra_args=DEMO)
        chromium = Chromium(Path(tmp) / "chromium")
        try:
            rigmon.wait_ready()
            chromium.open(rigmon.url.replace("/metrics", "/"), 1400, 1000)
            wait_for(lambda: chromium.js("document.querySelectorAll('#gpus .card svg').length") >= 8, 60, what="charts")
            time.sleep(max(0.0, 60 - (time.monotonic() - began)))
            chromium.js("window.scrollTo(0, 0); 0")
            outline = json.dumps(chromium.js(PAGE_OUTLINE))
            data = chromium.send("Page.captureScreenshot", session=True, format="png")["data"]
        finally:
            chromium.close()
            rigmon.stop()
    (ROOT / "docs" / "page.png").write_bytes(with_text(base64.b64decode(data), OUTLINE_KEY, outline))
    print(f"docs/page.png: {len(outline)} characters of outline")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
