"""Output control in this process: predicates, validation, stream restored after errors."""

from __future__ import annotations

import sys

import pytest
from skyinfra_runtime import InstanceInfo, silent, stderr, stdout


def test_predicate_receives_instance_info(capfd: pytest.CaptureFixture[str]) -> None:
    seen: list[InstanceInfo] = []

    def never(info: InstanceInfo) -> bool:
        seen.append(info)
        return False

    @stdout(only=never)
    def talk() -> None:
        print("hidden")

    talk()
    print("visible")
    assert capfd.readouterr().out == "visible\n"
    assert seen and seen[0].node == 0


def test_only_all_keeps_output(capfd: pytest.CaptureFixture[str]) -> None:
    with stderr(only="all"):
        print("kept", file=sys.stderr)
    assert "kept" in capfd.readouterr().err


def test_streams_are_restored_when_the_function_raises(capfd: pytest.CaptureFixture[str]) -> None:
    @silent
    def boom() -> None:
        print("hidden")
        raise RuntimeError("boom")

    before = sys.stdout
    with pytest.raises(RuntimeError):
        boom()
    assert sys.stdout is before
    print("after")
    assert capfd.readouterr().out == "after\n"


def test_unknown_selector_is_rejected() -> None:
    with pytest.raises(ValueError, match="only='workers'"):
        stdout(only="workers")
