"""What the engine makes of a Terraform that could not write its state, and of a plan that
changes outputs only (fast: no Terraform runs here; tests/e2e/local/test_faults.py runs the
real one)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from skyinfra.terraform.engine import rescue_state
from skyinfra.terraform.events import plan_summary

STATE = {"version": 4, "serial": 3, "lineage": "abc", "resources": [], "outputs": {}}


def test_a_plan_that_changes_only_outputs_has_changes() -> None:
    summary = plan_summary(
        [
            {"type": "change_summary", "changes": {"add": 0, "change": 0, "remove": 0}},
            {
                "type": "outputs",
                "outputs": {"nodes": {"action": "create"}, "x": {"action": "noop"}},
            },
        ]
    )
    assert (summary.add, summary.change, summary.remove, summary.outputs) == (0, 0, 0, 1)
    assert not summary.no_changes
    assert plan_summary([{"type": "outputs", "outputs": {"x": {"action": "noop"}}}]).no_changes


def test_errored_tfstate_written_by_terraform_is_named_with_the_push_command(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "clusters" / "c"
    ws.mkdir(parents=True)
    (ws / "errored.tfstate").write_text(json.dumps(STATE))
    message = rescue_state(ws, time.time(), [], "")
    assert f"the state it holds is in {ws / 'errored.tfstate'}" in message
    assert (
        f"skyinfra tf --dir {tmp_path / 'clusters'} --cluster c -- state push errored.tfstate"
        in (message)
    )


def test_an_old_errored_tfstate_is_not_this_failure(tmp_path: Path) -> None:
    (tmp_path / "errored.tfstate").write_text(json.dumps(STATE))
    os.utime(tmp_path / "errored.tfstate", (1, 1))
    assert rescue_state(tmp_path, time.time(), [], "no state printed") == ""


def test_the_emergency_dump_event_is_saved_privately(tmp_path: Path) -> None:
    events = [{"@message": "Emergency state dump", "state": STATE}]
    message = rescue_state(tmp_path, time.time(), events, "")
    saved = tmp_path / "errored.tfstate"
    assert json.loads(saved.read_text()) == STATE
    assert saved.stat().st_mode & 0o777 == 0o600
    assert "-- state push errored.tfstate" in message


def test_a_printed_dump_goes_elsewhere_when_errored_tfstate_is_taken(tmp_path: Path) -> None:
    (tmp_path / "errored.tfstate").mkdir()
    printed = "some line\n" + json.dumps(STATE, indent=2) + "\nTo retry writing this state..."
    message = rescue_state(tmp_path, time.time(), [], printed)
    saved = [p for p in tmp_path.glob("errored-*.tfstate")]
    assert len(saved) == 1 and json.loads(saved[0].read_text()) == STATE
    assert f"-- state push {saved[0].name}" in message
