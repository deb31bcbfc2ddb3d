"""The node-side commands: ``supervise`` (detached; supervise.py), ``logs``, ``cancel``, ``jobs``.

``logs``, ``cancel`` and ``jobs`` run for every `skyinfra jobs`, `logs` and `cancel`, and a
``logs --follow`` for every node of every attached run: each imports only what it uses (the
typed job records for ``cancel`` and ``jobs``, none for ``logs``), and ``supervise`` what it
needs when it is the command."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from skyinfra_runtime import exitcodes
from skyinfra_runtime.jobs.files import Paths, now, pid_alive, read_json, write_json
from skyinfra_runtime.restarts import RETRY_ON

if TYPE_CHECKING:
    from skyinfra_runtime.jobrecord import JobRecord


def logs(ns: argparse.Namespace) -> int:
    """Print a node's log of a job (the last ``--tail`` lines); ``--follow``: go on until the
    node's agent has ended and its output is all out."""
    paths = Paths(Path(ns.node_dir), ns.job)
    log = paths.log
    out = sys.stdout.buffer
    with contextlib.suppress(BrokenPipeError):
        if ns.tail is not None and log.is_file():
            lines = log.read_bytes().splitlines(keepends=True)
            start = sum(len(line) for line in lines[: max(0, len(lines) - ns.tail)])
        elif ns.skip_lines and log.is_file():
            # What a follower already showed (a job started again after a lost node).
            lines = log.read_bytes().splitlines(keepends=True)
            start = sum(len(line) for line in lines[: ns.skip_lines])
        else:
            start = 0
        pos = start
        while True:
            done = (read_json(paths.node_state) or {}).get("state") == "ended"
            if not ns.follow and not done:
                done = True
            if log.is_file():
                with log.open("rb") as f:
                    f.seek(pos)
                    chunk = f.read()
                # Whole lines only while the node still writes; the rest at the end.
                cut = len(chunk) if done else chunk.rfind(b"\n") + 1
                out.write(chunk[:cut])
                out.flush()
                pos += cut
            if done:
                return exitcodes.OK
            time.sleep(0.2)
    return exitcodes.OK


def cancel(ns: argparse.Namespace) -> int:
    """End the job: SIGTERM to its supervisor, which ends every node (TERM, then KILL after
    the grace), or takes a queued job out of the queue (it never starts); wait until the
    supervisor is gone. Prints the record's final state."""
    from dataclasses import replace

    from skyinfra_runtime.jobrecord import JobState

    paths = Paths(Path(ns.node_dir), ns.job)
    before = _read_record(paths.record)
    pid = pid_alive(paths.pid_file)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        until = now() + ns.wait
        while pid_alive(paths.pid_file) == pid and now() < until:
            time.sleep(0.1)
        if pid_alive(paths.pid_file) == pid:
            print(f"skyinfra-runtime: the job's supervisor {pid} still runs", file=sys.stderr)
            return exitcodes.USER_FAILED
    record = _read_record(paths.record)
    if record is not None and record.state is JobState.NEEDS_NODES:
        # Nothing runs while a job waits for its lost nodes: cancelling it is saying it will
        # not be recovered.
        record = replace(record, state=JobState.CANCELLED)
        write_json(paths.record, record.to_dict())
        # It will not go on on its set: one it never used goes (_drop_unused_set).
        from skyinfra_runtime.jobs.supervise import remove_set_if_unused

        remove_set_if_unused(paths)
    state = None if record is None else record.state.value
    # A queued job's supervisor ends it "cancelled" without starting it.
    was_queued = before is not None and before.queued and pid is not None
    print(json.dumps({"was_running": pid is not None, "was_queued": was_queued, "state": state}))
    return exitcodes.OK


def list_jobs(ns: argparse.Namespace) -> int:
    """Every job record on this node (the head), as one JSON list; a record whose supervisor
    died without finishing it says so (state "lost"). Each carries ``checked_at``, the
    head's time now: the age of its last output, counted on one clock."""
    from dataclasses import replace

    from skyinfra_runtime.jobrecord import JobState

    root = Path(ns.node_dir)
    out = []
    checked_at = now()
    for path in sorted((root / "jobs").glob("*.json")):
        rec = _read_record(path)
        if rec is None:
            continue
        if not rec.final and pid_alive(Paths(root, rec.id).pid_file) is None:
            # The supervisor writes the final record before its pid file goes: one that ended
            # between the two reads left a final record, read again; only a dead one did not.
            again = _read_record(path)
            rec = again if again is not None and again.final else replace(rec, state=JobState.LOST)
        out.append(replace(rec, checked_at=checked_at).to_dict())
    print(json.dumps(out))
    return exitcodes.OK


def _read_record(path: Path) -> JobRecord | None:
    """The job record at ``path``; None when there is none (or it is not one)."""
    from skyinfra_runtime.jobrecord import JobRecord

    data = read_json(path)
    try:
        return JobRecord.from_dict(data) if isinstance(data, dict) else None
    except ValueError:
        return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="skyinfra-runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    sup = sub.add_parser("supervise", help="run one node's part of a job, detached")
    sup.add_argument("--job", required=True)
    sup.add_argument("--node-dir", required=True)
    sup.add_argument("--node", type=int, required=True)
    sup.add_argument(
        "--nodes", type=int, default=1, help="the cluster's nodes, an agent on each (head only)"
    )
    sup.add_argument(
        "--world",
        type=int,
        default=None,
        metavar="K",
        help="run on K of the nodes, any free ones (default: every node) (head only)",
    )
    sup.add_argument(
        "--priority",
        type=int,
        default=0,
        metavar="N",
        help="higher goes ahead in the queue and may preempt lower-priority jobs (head only)",
    )
    sup.add_argument(
        "--on",
        metavar="I,J,...",
        help="run on exactly these nodes, in rank order, when they are free (head only)",
    )
    sup.add_argument("--listen", default="127.0.0.1", help="the head's address (head only)")
    sup.add_argument("--head", help="HOST:PORT of the job's supervisor (peers)")
    sup.add_argument("--timeout", type=float, default=None)
    sup.add_argument("--meta", help="JSON recorded with the job (head only)")
    sup.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        metavar="N",
        help="restart the job on the same nodes up to N times after a failure (head only)",
    )
    sup.add_argument(
        "--attempt",
        type=int,
        default=1,
        metavar="K",
        help="the job's attempt this start is (the operator's, after it replaced a lost node)",
    )
    sup.add_argument(
        "--retry-on",
        default="signal",
        metavar="|".join(RETRY_ON),
        help="which failures restart it: signal (a worker or launcher killed by a signal; the "
        "default), error (also a non-zero exit of the user's code) (head only)",
    )
    sup.add_argument(
        "--checkpoints",
        metavar="NAME",
        help="the job's checkpoint set ($SKYINFRA_CHECKPOINT_DIR; default: the job id)",
    )
    sup.add_argument(
        "--wait-start",
        action="store_true",
        help="start the launcher when the head says so, with the job's ports (peers)",
    )
    sup.add_argument(
        "--private-stdin",
        action="store_true",
        help="read the job's token, env and secrets from stdin (one JSON object)",
    )
    sup.add_argument("argv", nargs=argparse.REMAINDER)
    lg = sub.add_parser("logs", help="a node's log of a job")
    lg.add_argument("--job", required=True)
    lg.add_argument("--node-dir", required=True)
    lg.add_argument("--follow", action="store_true")
    lg.add_argument("--tail", type=int, default=None)
    lg.add_argument("--skip-lines", type=int, default=0, help="start after the first N lines")
    ca = sub.add_parser("cancel", help="end a job (on the head)")
    ca.add_argument("--job", required=True)
    ca.add_argument("--node-dir", required=True)
    ca.add_argument("--wait", type=float, default=30.0)
    jb = sub.add_parser("jobs", help="the job records (on the head), as JSON")
    jb.add_argument("--node-dir", required=True)
    ns = parser.parse_args(argv)
    if ns.command == "supervise":
        from skyinfra_runtime.jobs.supervise import supervise

        return supervise(ns)
    handler = {"logs": logs, "cancel": cancel, "jobs": list_jobs}
    return handler[ns.command](ns)
