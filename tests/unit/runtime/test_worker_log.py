"""The worker's own log lines on stderr."""

from __future__ import annotations

import pytest


def test_a_worker_log_line_is_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers of a node share its stderr: a line written in two parts (print() writes the
    newline separately on an unbuffered stream) can run into another worker's line."""
    import io
    import sys

    from skyinfra_runtime import worker

    writes: list[str] = []

    class Recorder(io.StringIO):
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

    monkeypatch.setattr(sys, "stderr", Recorder())
    worker._log("plugin torch torn down")
    assert writes == ["skyinfra-runtime: plugin torch torn down\n"]
