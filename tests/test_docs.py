"""The README stays a front door into the documentation site: short, and every link it has lands on a page and a
heading that exist (mkdocs build --strict checks the links between the pages of docs/; the README is not one of
them, so nothing else would)."""

from __future__ import annotations

import re
import unicodedata

import pytest

from tests.doc_pages import DOCS, REPO_ROOT, page, pages, readme

pytestmark = pytest.mark.fast

#: Issue 33: everything beyond the promise, the quick start, the flow and one example per audience lives in docs/.
README_MAX_LINES = 350


def slug(heading: str) -> str:
    """A heading's anchor as both mkdocs' toc extension and GitHub make it for the headings used here: markup and
    punctuation dropped, lower case, spaces to hyphens."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(markdown: str) -> set[str]:
    out, fenced = set(), False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            out.add(slug(m.group(1)))
    return out


def test_readme_is_short() -> None:
    assert len(readme().splitlines()) <= README_MAX_LINES


def test_every_readme_link_into_docs_lands() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", readme())
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert {f"docs/{name}" for name in pages()} <= {link.split("#")[0] for link in local}, "a page the README omits"
    for link in local:
        path, _, anchor = link.partition("#")
        target = REPO_ROOT / path
        assert target.is_file(), link
        if anchor:
            assert anchor in anchors(target.read_text()), f"{link}: no such heading"


def test_every_page_is_in_the_site_nav() -> None:
    nav = (REPO_ROOT / "mkdocs.yml").read_text()
    assert set(pages()) == set(re.findall(r":\s*([\w-]+\.md)\s*$", nav, re.M))


def test_the_ui_screenshots_are_shown() -> None:
    shown = {
        name
        for doc in ("temporal-apps.md", "operating.md")
        for name in re.findall(r"!\[[^\]]*\]\(ui/([\w-]+\.png)\)", page(doc))
    }
    assert shown == {p.name for p in (DOCS / "ui").glob("*.png")}
