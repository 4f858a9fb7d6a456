"""README's shell blocks, read the way the tests run them: as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def sh_blocks(section: str) -> list[str]:
    """The ```sh blocks of README's section ``## {section}``."""
    text = README.read_text()
    body = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```sh\n(.*?)\n```", body, re.M | re.S)
