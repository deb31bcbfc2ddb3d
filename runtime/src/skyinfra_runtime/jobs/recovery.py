"""Unattended recovery on the head (issue 26): the command the operator handed node 0's agent.

A job that lost nodes with a restart left ends its attempt as ``needs_nodes``. When the
operator's `run` gave the head a recovery command (the cluster's ``recover`` setting; on the
agent's stdin, never in the record), the supervisor runs it once its own part has ended: the
command replaces the lost nodes and starts the job's next attempt, whose supervisor takes the
job's record over. The job's secrets reach the command in its environment, from this
process's memory. Its output goes to the job's ``recover.log`` on node 0 (0600).

The command is the operator's (skyinfra); this module only runs it and, when it fails before
the next attempt started, says so in the job's record (``head_recovery``), so `skyinfra jobs`
shows why the job still waits and what to run.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from skyinfra_runtime.jobrecord import HeadRecoveryRun, JobRecord, JobState
from skyinfra_runtime.jobs.files import Paths, now, read_json, write_json
from skyinfra_runtime.rundirs import NODE_DIR_FIELD

LOG_NAME = "recover.log"
# Lines of the command's output kept in the record when it fails.
TAIL_LINES = 5


def problem(value: Any) -> str | None:
    """What is wrong with a recovery command as the stdin carries it (None: nothing)."""
    if not isinstance(value, dict):
        return "expected an object with 'argv' and 'env'"
    argv, env = value.get("argv"), value.get("env", {})
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return "'argv': expected a non-empty list of strings"
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        return "'env': expected an object of string names and values"
    return None


def log_path(paths: Paths) -> Path:
    return paths.run / LOG_NAME


def run(recover: Mapping[str, Any], secrets: Mapping[str, str], paths: Paths, attempt: int) -> None:
    """Run the recovery command for ``paths.job_id`` (appended to its argv) in this
    process's working directory (node 0's copy of the project), wait for it; on a failure
    while the record is still this attempt's ``needs_nodes``, record it."""
    log = log_path(paths)
    log.parent.mkdir(parents=True, exist_ok=True)
    here = str(paths.node_dir)  # "{node_dir}" in the command: this node's directory
    settings = {k: v.replace(NODE_DIR_FIELD, here) for k, v in (recover.get("env") or {}).items()}
    env = {**os.environ, **settings, **secrets}
    argv = [*(a.replace(NODE_DIR_FIELD, here) for a in recover["argv"]), paths.job_id]
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as out:
        try:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # nothing sent to this agent's group reaches it
            )
        except OSError as err:
            code: int | None = None
            out.write(f"cannot start {argv[0]}: {err}\n".encode())
        else:
            code = proc.wait()
    if code != 0:
        _record_failure(paths, attempt, code, log)


def _record_failure(paths: Paths, attempt: int, code: int | None, log: Path) -> None:
    try:
        record = JobRecord.from_dict(read_json(paths.record))
    except ValueError:
        return
    # The next attempt's supervisor owns the record once it started: leave it alone.
    if record.attempt != attempt or record.state is not JobState.NEEDS_NODES:
        return
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    failed = replace(
        record.head_recovery or HeadRecoveryRun(),
        state="failed",
        exit_code=code,
        ended_at=now(),
        tail=tuple([line for line in lines if line.strip()][-TAIL_LINES:]),
    )
    write_json(paths.record, replace(record, head_recovery=failed).to_dict())
