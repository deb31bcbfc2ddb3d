"""The order `make test` hands test files to its workers in (tests/support/schedule.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.schedule import SECONDS_PER_UNKNOWN_TEST, load_durations, longest_first


def units(**tests: int) -> dict[str, dict[str, bool]]:
    return {
        f"{name}.py": {f"{name}.py::t{i}": False for i in range(n)} for name, n in tests.items()
    }


def test_recorded_seconds_order_the_files_and_ties_keep_the_collection_order() -> None:
    durations = {"a.py": 5.0, "b.py": 50.0, "c.py": 5.0}
    assert longest_first(units(a=1, b=1, c=1), durations) == ["b.py", "a.py", "c.py"]


def test_a_file_missing_from_the_record_counts_by_its_tests() -> None:
    durations = {"a.py": 3 * SECONDS_PER_UNKNOWN_TEST + 1}
    assert longest_first(units(a=1, new=4, small=1), durations) == ["new.py", "a.py", "small.py"]


def test_files_that_mostly_wait_alternate_with_the_others_each_kind_longest_first() -> None:
    aws = "tests/e2e/aws/test_"
    durations = {
        f"{aws}a.py": 200.0,
        f"{aws}b.py": 150.0,
        f"{aws}c.py": 100.0,
        f"{aws}d.py": 90.0,
        "tests/e2e/local/test_x.py": 120.0,
        "tests/unit/test_y.py": 1.0,
    }
    files = {name: {f"{name}::t": False} for name in durations}
    assert longest_first(files, durations) == [
        f"{aws}a.py",
        "tests/e2e/local/test_x.py",
        f"{aws}b.py",
        "tests/unit/test_y.py",
        f"{aws}c.py",
        f"{aws}d.py",
    ]
    # The other kind first when it holds the longest file.
    durations["tests/e2e/local/test_x.py"] = 300.0
    assert longest_first(files, durations)[:3] == [
        "tests/e2e/local/test_x.py",
        f"{aws}a.py",
        "tests/unit/test_y.py",
    ]


def test_a_missing_or_broken_record_is_no_record(tmp_path: Path) -> None:
    assert load_durations(tmp_path / "absent.json") == {}
    broken = tmp_path / "broken.json"
    for text in ("{", "[1, 2]", '{"a.py": "slow", "b.py": 2}'):
        broken.write_text(text)
        assert load_durations(broken) == ({"b.py": 2.0} if "b.py" in text else {})
