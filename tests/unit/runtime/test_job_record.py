"""The job record's one definition (skyinfra_runtime.jobrecord): it reads what every version
wrote and writes back exactly today's JSON; the head and the operator share its final states."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from skyinfra_runtime.jobrecord import (
    FINAL_STATES,
    Attempt,
    JobRecord,
    JobState,
    NodeResult,
    WorkerStart,
    record_starts,
    recorded_starts,
)

HERE = Path(__file__).parent / "job_records"


def real_record() -> dict[str, Any]:
    """A record the supervisor wrote before the type existed: two attempts, the first ended
    by a SIGKILL (tests/integration/runtime/test_job_record.py makes one the same way)."""
    data = json.loads((HERE / "restarted_after_sigkill.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def waiting_for_nodes() -> dict[str, Any]:
    """Today's shape of a job that lost a Spot node and waits for node 0 to replace it: every
    key the supervisor writes only sometimes (interruptions, not_restarted, head_recovery,
    restarted_by) and the head's checked_at, as supervisor.py and commands.py write them."""
    notice = {"action": "terminate", "time": 1795.0, "time_utc": "t", "noticed_at": 1790.0}
    return {
        "schema": 1,
        "id": "20261127-040000-ab12",
        "entry": "train.py",
        "args": ["--steps", "10"],
        "started_by": "me@laptop",
        "nodes_total": 2,
        "checkpoints": "run-a",
        "env": {"A": "1"},
        "secrets": ["TOKEN"],
        "state": "needs_nodes",
        "created_at": 1700.0,
        "started_at": 1701.5,
        "ended_at": 1799.0,
        "timeout_s": None,
        "first_failure": 1,
        "timed_out": [],
        "supervisor_pid": 4242,
        "saved_at": 1799.0,
        "attempt": 2,
        "max_restarts": 3,
        "retry_on": "error",
        "restarts_left": 2,
        "attempts": [
            {
                "attempt": 1,
                "started_at": 1701.5,
                "ended_at": 1720.0,
                "outcome": "needs_nodes",
                "cause": {"node": 1, "exit_code": None, "meaning": "lost", "kind": "lost"},
                "lost_s": 18.0,
                "failed_at": 1719.5,
                "restarted_by": "the operator, after replacing the lost node(s)",
            },
            {
                "attempt": 2,
                "started_at": 1760.0,
                "recovery_s": 40.5,
                "end_grace_s": 0.1,
                "interruptions": [{"node": 1, **notice}],
                "ended_at": 1799.0,
                "outcome": "needs_nodes",
                "cause": {
                    "node": 1,
                    "exit_code": -15,
                    "meaning": "a Spot interruption notice (terminate at t)",
                    "kind": "interrupted",
                },
                "lost_s": 30.0,
                "failed_at": 1790.0,
                "not_restarted": "node-1 interrupted: waiting for node-0 (unattended recovery) "
                "to replace it and start the next attempt",
            },
        ],
        "needs_nodes": [1],
        "head_recovery": {
            "by": "node-0",
            "state": "failed",
            "started_at": 1799.5,
            "log": "/n/runs/x/recover.log",
            "exit_code": 1,
            "ended_at": 1801.0,
            "tail": ["no credentials"],
        },
        "interruptions": [{"node": 1, **notice}],
        "nodes": [
            {
                "node": 0,
                "state": "ended",
                "exit_code": -15,
                "meaning": "killed by signal SIGTERM",
                "ended_reason": "a Spot interruption notice on node-1",
                "last_output_at": 1789.0,
                "ended_at": 1791.0,
                "tail_at_end": ["step 9"],
                "interrupted": None,
            },
            {
                "node": 1,
                "state": "ended",
                "exit_code": -15,
                "meaning": "killed by signal SIGTERM",
                "ended_reason": "",
                "last_output_at": 1789.5,
                "ended_at": 1791.0,
                "tail_at_end": None,
                "interrupted": notice,
            },
        ],
        "checked_at": 1802.0,
    }


@pytest.mark.parametrize("make", [real_record, waiting_for_nodes])
def test_todays_records_read_and_write_back_unchanged(make: Any) -> None:
    data = make()
    record = JobRecord.from_dict(data)
    assert record.to_dict() == data


def test_the_attributes_say_what_the_json_said() -> None:
    record = JobRecord.from_dict(waiting_for_nodes())
    assert record.state is JobState.NEEDS_NODES and record.final
    assert record.attempts[-1].cause is not None
    assert record.attempts[-1].cause.kind == "interrupted"
    assert record.attempts[0].restarted_by == "the operator, after replacing the lost node(s)"
    assert record.needs_nodes == (1,) and record.secrets == ("TOKEN",)
    node_1 = record.node(1)
    assert node_1 is not None and node_1.interrupted is not None
    assert (node_1.interrupted.action, node_1.interrupted.node) == ("terminate", None)
    assert record.interruptions[0].node == 1
    assert record.head_recovery is not None and record.head_recovery.failed
    assert record.head_recovery.tail == ("no credentials",)


def test_an_old_record_without_the_newer_keys_reads_with_defaults() -> None:
    """What a runtime wrote before restarts, checkpoint sets, env and interruptions."""
    old = {
        "schema": 1,
        "id": "20250101-000000-0001",
        "entry": "train.py",
        "args": [],
        "started_by": "me@laptop",
        "state": "failed",
        "created_at": 10.0,
        "started_at": 11.0,
        "ended_at": 20.0,
        "timeout_s": None,
        "first_failure": 0,
        "timed_out": [],
        "supervisor_pid": 7,
        "attempts": [{"attempt": 1, "started_at": 11.0, "ended_at": 20.0, "outcome": "failed"}],
        "nodes": [{"node": 0, "state": "ended", "exit_code": 1}],
    }
    record = JobRecord.from_dict(old)
    assert (record.attempt, record.max_restarts, record.restarts_left) == (1, 0, 0)
    assert (record.retry_on, record.checkpoints, record.saved_at) == ("signal", "", None)
    assert (record.env, record.secrets, record.needs_nodes) == ({}, (), ())
    assert record.head_recovery is None and record.interruptions == ()
    attempt = record.attempts[0]
    assert attempt == Attempt(1, started_at=11.0, ended_at=20.0, outcome="failed")
    assert (attempt.cause, attempt.lost_s, attempt.not_restarted, attempt.restarted_by) == (
        None,
        None,
        None,
        None,
    )
    node = record.nodes[0]
    assert (node.meaning, node.ended_reason, node.tail_at_end, node.interrupted) == (
        "",
        "",
        None,
        None,
    )
    # Written back in today's shape: the keys it lacked, with their defaults.
    again = record.to_dict()
    assert again["restarts_left"] == 0 and again["attempts"][0]["cause"] is None
    assert JobRecord.from_dict(again) == record


def test_keys_a_later_version_adds_are_kept() -> None:
    data = waiting_for_nodes()
    data["lease"] = {"nodes": [0]}  # ("queue" was this test's example before the queue)
    data["attempts"][0]["instance_type"] = "g5.xlarge"
    data["attempts"][1]["cause"]["region"] = "us-east-1"
    data["nodes"][0]["zone"] = "a"
    assert JobRecord.from_dict(data).to_dict() == data


def test_a_record_that_is_not_one_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="'id'"):
        JobRecord.from_dict({"state": "running"})
    with pytest.raises(ValueError, match=r"'state' is 'paused'; expected one of starting"):
        JobRecord.from_dict({"id": "j", "state": "paused"})


def test_the_head_and_the_operator_share_one_set_of_final_states() -> None:
    from skyinfra_runtime.jobs import records

    from skyinfra.run import job

    assert records.FINAL_STATES is FINAL_STATES
    assert job.FINAL_STATES is FINAL_STATES
    # A job whose supervisor was killed is final: nothing of it runs or writes its record
    # again; only `jobs recover` goes on from it (a new attempt), as from needs_nodes.
    assert "lost" in FINAL_STATES and "needs_nodes" in FINAL_STATES
    assert set(job.RECOVERABLE_STATES) <= set(FINAL_STATES)
    assert {s.value for s in job.STATE_EXIT} == {s.value for s in FINAL_STATES}


def test_a_queued_job_reads_and_writes_back_its_wait() -> None:
    """A job in the head's queue (and one that left it) keeps its place, position and what it
    waits for; a record written before the queue has none and writes back without it."""
    wait = {
        "seq": 7,
        "queued_at": 1700.0,
        "position": 2,
        "waits_for": "nodes 0-1, held by job J",
        "held_by": "J",
        "left_at": None,
    }
    data = {**real_record(), "state": "queued", "queue": wait}
    rec = JobRecord.from_dict(data)
    assert rec.state is JobState.QUEUED and rec.queued and not rec.final and not rec.running
    assert rec.queue is not None and (rec.queue.seq, rec.queue.position) == (7, 2)
    assert rec.queue.held_by == "J" and rec.queue.waits_for.endswith("held by job J")
    assert rec.to_dict() == data
    old = JobRecord.from_dict(real_record())
    assert old.queue is None and "queue" not in old.to_dict()


def test_a_queued_job_keeps_how_many_nodes_it_asked_for() -> None:
    """A `run --nodes 1` job still in the queue has no world yet: its record keeps the 1 it
    asked for, so a recovery of it asks for one node again (skyinfra.run.recovery)."""
    from skyinfra.run.recovery import nodes_asked

    data = {**real_record(), "state": "queued", "nodes_total": 2, "nodes_asked": 1}
    rec = JobRecord.from_dict(data)
    assert rec.nodes_asked == 1 and rec.world == () and rec.to_dict() == data
    assert nodes_asked(rec, 2) == 1
    whole = JobRecord.from_dict({**real_record(), "nodes_total": 2})
    assert whole.nodes_asked is None and "nodes_asked" not in whole.to_dict()
    assert nodes_asked(whole, 2) is None  # every node
    started_before = JobRecord.from_dict({**real_record(), "world": [1]})
    assert nodes_asked(started_before, 2) == 1  # a record older than nodes_asked: its world
    named = JobRecord.from_dict({**real_record(), "named_nodes": [1], "nodes_asked": 1})
    assert nodes_asked(named, 2) is None  # named nodes go on as they were


def test_a_nodes_worker_starts_go_from_its_timeline_into_the_record(tmp_path: Path) -> None:
    warm = WorkerStart(0, warm=True, waited_s=12.3456)
    cold = WorkerStart(1, warm=False, reason="no standby was ready")
    assert recorded_starts(tmp_path, 1) is None  # the launcher has not said yet
    record_starts(tmp_path, 0, "1", [cold, cold])
    record_starts(tmp_path, 0, "2", [warm, cold])
    assert recorded_starts(tmp_path, 2) == (WorkerStart(0, True, 12.346), cold)
    node = NodeResult(node=0, workers=(warm, cold))
    said = node.to_dict()
    assert said["workers"][0] == {"worker": 0, "start": "warm", "waited_s": 12.346, "reason": None}
    assert NodeResult.from_dict(said).to_dict() == said
    assert "workers" not in NodeResult(node=0).to_dict()  # older records read back as they were
    # A standby taken while it still imported: how long the job waited for the rest.
    importing = WorkerStart(0, warm=True, waited_s=0.0, imports_s=1.23456)
    assert importing.to_dict()["imports_s"] == 1.235
    assert WorkerStart.from_dict(importing.to_dict()) == WorkerStart(0, True, 0.0, None, 1.235)
