"""README's and docs/'s blocks, read the way the tests run them: as written."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
FILES = [README, *DOCS]


def section(heading: str) -> str:
    """The text under the heading (any level) ``heading`` in README or a doc, to the next
    heading of the same or a higher level."""
    for path in FILES:
        text = path.read_text()
        found = re.search(rf"^(#+) {re.escape(heading)}\n", text, re.M)
        if found:
            body = text[found.end() :]
            end = re.search(rf"^#{{1,{len(found.group(1))}}} ", body, re.M)
            return body[: end.start()] if end else body
    raise LookupError(f"no heading {heading!r} in README or docs/")


def fenced(text: str) -> list[tuple[str, str]]:
    """Every fenced block of a Markdown text: (its language, its text)."""
    found, language, lines = [], None, []
    for line in text.splitlines():
        if language is None and line.startswith("```"):
            language, lines = line[3:].strip(), []
        elif language is not None and line.startswith("```"):
            found.append((language, "\n".join(lines)))
            language = None
        elif language is not None:
            lines.append(line)
    return found


def sh_blocks(heading: str) -> list[str]:
    """The ```sh blocks under a heading."""
    return [b for lang, b in fenced(section(heading)) if lang == "sh"]


def blocks(language: str, path: Path | None = None) -> list[tuple[Path, str]]:
    """Every ```LANGUAGE block of README and the docs (or of one file), with its file."""
    return [(p, b) for p in ([path] if path else FILES) for lang, b in fenced(p.read_text()) if lang == language]


def commands() -> list[tuple[Path, str]]:
    """Every command README and the docs show: each line of a ```sh block but its comments,
    and each ``$ `` line of a block of output, with its file."""
    found = []
    for path in FILES:
        for lang, block in fenced(path.read_text()):
            for line in block.splitlines():
                if lang == "sh" and line.strip() and not line.lstrip().startswith("#"):
                    found.append((path, line.split("  #")[0].strip()))
                elif lang == "" and line.startswith("$ "):
                    found.append((path, line[2:].strip()))
    return found
