"""`make bench-suite-then`'s selection (tests/support/suite_then.py) and its list."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.support.suite_then import read_list, select

ISSUE_21_LIST = REPO_ROOT / "tests" / "bench" / "suite_at_issue_21.txt"


def test_every_parametrization_of_a_listed_function_is_kept_and_the_rest_deselected() -> None:
    kept, dropped, missing = select(
        [
            "tests/a.py::test_x[one]",
            "tests/a.py::test_x[two-three]",
            "tests/a.py::test_xy",
            "tests/b.py::TestK::test_m",
            "tests/b.py::test_new",
        ],
        {"tests/a.py::test_x", "tests/b.py::TestK::test_m", "tests/c.py::test_gone"},
    )
    assert kept == [
        "tests/a.py::test_x[one]",
        "tests/a.py::test_x[two-three]",
        "tests/b.py::TestK::test_m",
    ]
    assert dropped == ["tests/a.py::test_xy", "tests/b.py::test_new"]
    assert missing == {"tests/c.py::test_gone"}


def test_comments_and_blank_lines_are_not_tests(tmp_path: Path) -> None:
    listed = tmp_path / "list.txt"
    listed.write_text("# a note\n\ntests/a.py::test_x\n  tests/b.py::test_y  \n")
    assert read_list(listed) == {"tests/a.py::test_x", "tests/b.py::test_y"}


def defined_tests(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {
                f"{node.name}::{sub.name}"
                for sub in node.body
                if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef)
            }
    return names


def test_every_function_of_issue_21s_suite_still_exists_where_the_list_says() -> None:
    """A test renamed or moved must be renamed in the list too, or the measure shrinks."""
    listed = read_list(ISSUE_21_LIST)
    # 389 functions then; the credentials test is now part of the run-over-SSH one.
    assert len(listed) == 388
    missing = []
    for entry in sorted(listed):
        path, _, name = entry.partition("::")
        file = REPO_ROOT / path
        named = name.startswith(("test", "Test")) and file.is_file()
        if not named or name not in defined_tests(file):
            missing.append(entry)
    assert not missing, missing
