"""The manual's generated reference pages (docs/reference/cli.md, docs/reference/exit-codes.md)
are what the code renders now: a changed option, summary or exit code fails here until
`make docs-reference` rewrites them."""

from __future__ import annotations

from pathlib import Path

from skyinfra.cli import reference
from skyinfra.cli.main import SUMMARIES


def test_the_committed_reference_pages_are_what_the_code_renders() -> None:
    assert reference.stale() == [], "run `make docs-reference` and commit the pages it writes"


def test_a_changed_page_is_found_stale(tmp_path: Path) -> None:
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    assert sorted(reference.stale(tmp_path)) == sorted(reference.PAGES)  # none written yet
    reference.main([str(tmp_path)])
    assert reference.stale(tmp_path) == []
    page = tmp_path / "docs" / "reference" / "cli.md"
    page.write_text(page.read_text().replace("--nodes", "--node-count"))
    assert reference.stale(tmp_path) == ["docs/reference/cli.md"]


def test_the_cli_reference_has_every_command_and_its_whole_summary() -> None:
    page = reference.render_cli()
    for name, summary in SUMMARIES.items():
        assert f"\n## skyinfra {name}\n\n{summary}\n" in page, name
