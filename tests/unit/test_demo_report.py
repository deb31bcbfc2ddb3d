"""`make demo` prints the same run report as `skyinfra run` (run/report.print_report), then its
own lines about accuracy and weights; no cluster: up, run and down are stand-ins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skyinfra import demo, exitcodes
from skyinfra.run.report import NodeOutcome, RunReport


def test_demo_prints_the_shared_report_then_its_own_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "keras_digits.py").touch()
    monkeypatch.chdir(tmp_path)
    value = {"node": 0, "accuracy": 0.5, "weights_sha256": "ab" * 32}
    report = RunReport(
        "r1",
        tmp_path / "runs" / "r1",
        {
            i: NodeOutcome(i, 0, result={"workers": [{"worker": 0, "value": {**value, "node": i}}]})
            for i in (0, 1)
        },
    )

    def run_on_cluster(*args: Any, **kwargs: Any) -> RunReport:
        return report

    monkeypatch.setattr(demo.lifecycle, "up", lambda spec, ws, echo, **_: (None, None))
    monkeypatch.setattr(demo.lifecycle, "transport_for", lambda ws, topology: None)
    monkeypatch.setattr(demo, "run_on_cluster", run_on_cluster)

    assert demo.demo() == exitcodes.OK
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [
        "[demo] run r1:",
        "  node-0: ok (exit 0)",
        "  node-1: ok (exit 0)",
        '  node-0 worker 0: {"accuracy": 0.5, "node": 0, "weights_sha256": "' + "ab" * 32 + '"}',
        '  node-1 worker 0: {"accuracy": 0.5, "node": 1, "weights_sha256": "' + "ab" * 32 + '"}',
        f"[demo] results and logs: {tmp_path / 'runs' / 'r1'}",
        "[demo] node-0: accuracy 0.5000 on held-out digits, weights sha256 abababababababab...",
        "[demo] node-1: accuracy 0.5000 on held-out digits, weights sha256 abababababababab...",
        "[demo] final weights identical on all nodes: yes",
    ]
