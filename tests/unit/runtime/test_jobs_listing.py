"""The head's job list (`skyinfra-runtime jobs`): a record whose supervisor died unfinished
reads "lost", and one whose supervisor finished while the list was being read reads as it
ended, never "lost" (the supervisor writes the final record before its pid file goes)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from skyinfra_runtime.jobs import commands
from skyinfra_runtime.jobs.files import Paths

JOB = "20261127-120000-ab12"


def record(state: str) -> dict[str, Any]:
    return {
        "schema": 1,
        "id": JOB,
        "entry": "steps.py:main",
        "args": [],
        "nodes_total": 1,
        "state": state,
        "created_at": 1700.0,
    }


def listed(node_dir: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    assert commands.list_jobs(argparse.Namespace(node_dir=str(node_dir))) == 0
    out = json.loads(capsys.readouterr().out)
    assert isinstance(out, list)
    return out


def write_record(node_dir: Path, state: str) -> Path:
    path = node_dir / "jobs" / f"{JOB}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record(state)))
    return path


def test_a_running_record_whose_supervisor_is_gone_reads_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_record(tmp_path, "running")
    assert not Paths(tmp_path, JOB).pid_file.exists()
    [job] = listed(tmp_path, capsys)
    assert job["state"] == "lost"


def test_a_job_that_ends_while_the_list_is_read_reads_as_it_ended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_record(tmp_path, "running")

    def supervisor_ends_now(pid_file: Path) -> None:
        # What the supervisor does between the list's read of the record and its look at
        # the pid file: the final record, then the pid file gone.
        path.write_text(json.dumps(record("succeeded")))
        pid_file.unlink(missing_ok=True)

    monkeypatch.setattr(commands, "pid_alive", supervisor_ends_now)
    [job] = listed(tmp_path, capsys)
    assert job["state"] == "succeeded"
