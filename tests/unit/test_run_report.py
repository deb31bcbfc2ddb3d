"""The report `skyinfra run` and the demo print, and runs/<id>/summary.json (pure: no nodes)."""

from __future__ import annotations

import json
from pathlib import Path

from skyinfra import exitcodes
from skyinfra.run.report import NodeOutcome, RunReport, print_report, write_summary


def failed_run(run_dir: Path) -> RunReport:
    return RunReport(
        "20240101-000000-abcdef",
        run_dir,
        {
            0: NodeOutcome(0, exit_code=0, result={"workers": [{"worker": 0, "value": {"b": 2}}]}),
            1: NodeOutcome(1, exit_code=1, result=None),
            2: NodeOutcome(2, exit_code=-15, ended_by_us=True, result=["not", "a", "dict"]),
        },
        first_failure=1,
    )


def test_print_report_names_every_node_and_every_worker_value(tmp_path: Path) -> None:
    lines: list[str] = []
    print_report(failed_run(tmp_path), lines.append)
    assert lines == [
        "[skyinfra] run 20240101-000000-abcdef:",
        "  node-0: ok (exit 0)",
        "  node-1: failed (exit 1, user code raised)",
        "  node-2: ended by skyinfra after another node failed"
        " (exit -15: killed by signal SIGTERM)",
        '  node-0 worker 0: {"b": 2}',
        f"[skyinfra] results and logs: {tmp_path}",
    ]


def test_print_report_prefix_and_values_in_sorted_json(tmp_path: Path) -> None:
    report = RunReport(
        "r1",
        tmp_path,
        {
            0: NodeOutcome(0, exit_code=0, result={"workers": [{"worker": 1, "value": 3}]}),
            1: NodeOutcome(
                1, exit_code=0, result={"workers": [{"worker": 0, "value": {"z": 1, "a": None}}]}
            ),
        },
    )
    lines: list[str] = []
    print_report(report, lines.append, prefix="[demo]")
    assert lines == [
        "[demo] run r1:",
        "  node-0: ok (exit 0)",
        "  node-1: ok (exit 0)",
        "  node-0 worker 1: 3",
        '  node-1 worker 0: {"a": null, "z": 1}',
        f"[demo] results and logs: {tmp_path}",
    ]


def test_summary_json_holds_the_run_code_and_each_nodes_own(tmp_path: Path) -> None:
    path = write_summary(failed_run(tmp_path), entry="train.py:main", args=["--epochs", "1"])
    assert path == tmp_path / "summary.json"
    summary = json.loads(path.read_text(encoding="utf-8"))
    assert summary["run_id"] == "20240101-000000-abcdef"
    assert summary["entry"] == "train.py:main"
    assert summary["args"] == ["--epochs", "1"]
    assert summary["exit_code"] == exitcodes.NODE_FAILED
    assert summary["first_failure"] == 1
    assert [n["node"] for n in summary["nodes"]] == [0, 1, 2]
    assert summary["nodes"][1]["exit_code"] == 1
    assert summary["nodes"][1]["exit_meaning"] == "user code raised"
    assert summary["nodes"][2]["ended_by_skyinfra"] is True
    assert summary["nodes"][0]["result"] == {"workers": [{"worker": 0, "value": {"b": 2}}]}
