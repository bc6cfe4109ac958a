"""The documentation as the tests read it: README.md (the front door) and the pages of docs/ (the mkdocs site,
mkdocs.yml). Tests that run a snippet or hold a table to the code read it from the page that now holds it, so a
snippet moved between pages still runs, and one that is lost fails the test that ran it."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS = REPO_ROOT / "docs"


def readme() -> str:
    return (REPO_ROOT / "README.md").read_text()


def page(name: str) -> str:
    """One page of the site, by its file name under docs/ (``"cli.md"``)."""
    return (DOCS / name).read_text()


def pages() -> dict[str, str]:
    """Every page of the site, by file name."""
    return {p.name: p.read_text() for p in sorted(DOCS.glob("*.md"))}


def everything() -> str:
    """The README and every page, one after another."""
    return "\n".join([readme(), *pages().values()])


def section(text: str, heading: str) -> str:
    """From ``heading`` (a whole heading line, e.g. ``"## Quick start"``) to the next heading of its level or higher."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines(keepends=True)
    first = lines.index(heading + "\n")
    fenced = False  # a `# comment` inside a code block is no heading
    for i in range(first + 1, len(lines)):
        if lines[i].startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{level}}} ", lines[i]):
            return "".join(lines[first:i])
    return "".join(lines[first:])


def blocks(text: str, lang: str) -> list[str]:
    """The fenced code blocks of ``lang`` in ``text``."""
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)
