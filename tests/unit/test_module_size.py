"""No module of the operator's package grows past 500 lines (issue 43's habit, checked here
rather than remembered): past that, a module holds more than one thing and wants splitting."""

from __future__ import annotations

from tests.conftest import REPO_ROOT

MAX_LINES = 500


def test_no_module_in_skyinfra_is_over_500_lines() -> None:
    sizes = {
        str(path.relative_to(REPO_ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in (REPO_ROOT / "skyinfra").rglob("*.py")
    }
    assert len(sizes) > 100, sizes  # the package was found
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert not over, f"split these by responsibility (at most {MAX_LINES} lines each): {over}"
