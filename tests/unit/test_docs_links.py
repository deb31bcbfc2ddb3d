"""The README and the manual in docs/ link to each other by file and heading: every relative
link names a file that exists and, with `#anchor`, a heading of that file (as GitHub makes
anchors), so a moved section or a renamed heading fails here rather than for a reader."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO_ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#+ (.+)$")


def docs_pages() -> list[Path]:
    """Every page of the manual: docs/ and its folders (guides/, reference/, development/)."""
    return sorted((REPO_ROOT / "docs").rglob("*.md"))


def pages() -> list[Path]:
    return [REPO_ROOT / "README.md", *docs_pages()]


def anchor_of(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (heading := HEADING.match(line)):
            found.add(anchor_of(heading.group(1)))
    return found


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    broken = []
    for page in pages():
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(REPO_ROOT)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{page.relative_to(REPO_ROOT)}: {target} (no such heading)")
    assert broken == []


def test_the_readme_is_a_front_page_and_every_docs_page_is_on_its_map() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200  # the manual lives in docs/
    for page in docs_pages():
        link = page.relative_to(REPO_ROOT).as_posix()
        assert f"({link})" in readme, link


def _nav_pages(entries: list[object]) -> list[str]:
    pages: list[str] = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [str(value)]
    return pages


def test_the_site_s_nav_holds_every_docs_page_once() -> None:
    """mkdocs.yml's nav (make lint builds the site with --strict, which fails on a page left
    off it): every page of docs/ once, and no page that is not there."""
    import yaml

    config = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text())
    assert config["docs_dir"] == "docs"
    nav = _nav_pages(config["nav"])
    assert sorted(nav) == sorted(p.relative_to(REPO_ROOT / "docs").as_posix() for p in docs_pages())
