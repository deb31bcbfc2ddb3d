"""Unattended recovery on the head (skyinfra_runtime.jobs.recovery): the command the operator
handed node 0's agent, run as a real process with the job's secrets in its environment; a
failure is recorded only while the record is still the ended attempt's."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from skyinfra_runtime.jobs import recovery
from skyinfra_runtime.jobs.files import Paths, read_json, write_json
from skyinfra_runtime.jobs.supervise import read_private

from skyinfra.cli.jobs_shown import needs_nodes_words
from skyinfra.run.head_recovery import HeadRecovery, operator_settings
from skyinfra.run.job import JobRecord

SECRET = "s3cret-head-recovery"


def _paths(tmp_path: Path, state: str = "needs_nodes", attempt: int = 1) -> Paths:
    paths = Paths(tmp_path / "node-0", "job-1")
    write_json(paths.record, {"id": "job-1", "state": state, "attempt": attempt})
    return paths


def _command(code: str) -> dict[str, Any]:
    return {"argv": [sys.executable, "-c", code], "env": {"FROM_OPERATOR": "settings"}}


def test_the_command_gets_the_job_id_the_settings_and_the_secrets(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    check = (
        "import os, sys; "
        "assert sys.argv[1:] == ['job-1'], sys.argv; "
        "assert os.environ['FROM_OPERATOR'] == 'settings'; "
        f"assert os.environ['TOKEN'] == {SECRET!r}; "
        "print('recovered')"
    )
    recovery.run(_command(check), {"TOKEN": SECRET}, paths, attempt=1)
    log = recovery.log_path(paths)
    assert log.read_text() == "recovered\n"
    assert log.stat().st_mode & 0o777 == 0o600
    assert read_json(paths.record) == {"id": "job-1", "state": "needs_nodes", "attempt": 1}


def test_a_failed_command_is_recorded_with_its_last_lines(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    code = "import sys; print('\\n'.join(f'line {i}' for i in range(8))); sys.exit(3)"
    recovery.run(_command(code), {}, paths, attempt=1)
    said = read_json(paths.record)["head_recovery"]
    assert said["state"] == "failed" and said["exit_code"] == 3
    assert said["tail"] == [f"line {i}" for i in range(3, 8)]


def test_a_command_that_cannot_start_is_recorded(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    recovery.run({"argv": [str(tmp_path / "no-such-skyinfra")]}, {}, paths, attempt=1)
    said = read_json(paths.record)["head_recovery"]
    assert said["state"] == "failed" and said["exit_code"] is None
    assert "cannot start" in said["tail"][0]


@pytest.mark.parametrize(("state", "attempt"), [("running", 2), ("cancelled", 1)])
def test_a_record_the_next_attempt_or_a_cancel_owns_is_left_alone(
    tmp_path: Path, state: str, attempt: int
) -> None:
    paths = _paths(tmp_path, state, attempt)
    recovery.run(_command("raise SystemExit(1)"), {}, paths, attempt=1)
    assert "head_recovery" not in read_json(paths.record)


def test_the_agent_checks_the_command_on_its_stdin() -> None:
    sent = {"token": "t", "env": {}, "secrets": {}, "recover": _command("pass")}
    assert read_private(io.StringIO(json.dumps(sent))) == sent
    for bad in ({"argv": []}, {"argv": "skyinfra"}, {"argv": ["x"], "env": {"A": 1}}, ["x"]):
        with pytest.raises(ValueError, match="'recover'"):
            read_private(io.StringIO(json.dumps({"token": "t", "recover": bad})))


def test_the_operator_settings_leave_out_credentials_and_node_variables() -> None:
    environ = {
        "SKYINFRA_CACHE": "/c",
        "SKYINFRA_TF_PROVIDER_MIRROR": "/m",
        "TF_CLI_CONFIG_FILE": "/tf.rc",
        "PATH": "/bin",
        "SKYINFRA_NODE": "0",
        "SKYINFRA_LOCAL_NODE_DIR": "/n",
        "AWS_SECRET_ACCESS_KEY": "x",
        "TF_VAR_password": "x",
        "TOKEN": SECRET,
    }
    assert operator_settings(environ) == {
        "PATH": "/bin",
        "SKYINFRA_CACHE": "/c",
        "SKYINFRA_TF_PROVIDER_MIRROR": "/m",
        "TF_CLI_CONFIG_FILE": "/tf.rc",
    }
    assert HeadRecovery(("skyinfra",), {"A": "b"}).private() == {
        "argv": ["skyinfra"],
        "env": {"A": "b"},
    }


def words(job: dict[str, Any]) -> str:
    return needs_nodes_words(JobRecord.from_dict(job))


def test_jobs_says_who_replaces_the_lost_node_and_what_to_run_after_a_failure() -> None:
    job: dict[str, Any] = {"id": "j1", "state": "needs_nodes"}
    assert words(job) == "from the project's folder run `skyinfra jobs recover j1`"
    job["head_recovery"] = {"state": "running", "log": "/n/runs/j1/recover.log"}
    assert words(job).startswith("node-0 is replacing it and starting the next")
    job["head_recovery"] = {"state": "failed", "exit_code": 1, "log": "/n/runs/j1/recover.log"}
    said = words(job)
    assert "unattended recovery failed (exit 1" in said and "skyinfra jobs recover j1" in said
