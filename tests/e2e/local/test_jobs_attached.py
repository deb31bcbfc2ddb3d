"""Jobs from a second workspace: Alice brings a 2-node local cluster up with its state in S3
(moto's server over loopback) and starts a detached job; Bob joins with `skyinfra attach` in
another folder and follows it (`logs --follow` ends with the job's code), lists the jobs,
shows one with its result, and cancels Alice's next job. Real processes and real Terraform."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.aws import REGION
from tests.support.local_jobs import cli
from tests.support.ports import free_port_pair
from tests.support.shared_state_e2e import bucket, env, shared_cache  # noqa: F401

pytestmark = pytest.mark.slow

CODE = """\
import os, sys, time


def main():
    for step in range(1, 4):
        print(f"step {step} on node {os.environ['SKYINFRA_NODE']}", flush=True)
        time.sleep(0.5)
    return int(os.environ["SKYINFRA_NODE"]) * 10


def forever():
    while True:
        print("still here", flush=True)
        time.sleep(0.5)
"""


def test_logs_follow_jobs_and_cancel_from_an_attached_workspace(
    tmp_path: Path,
    env: dict[str, str],  # noqa: F811
    bucket: str,  # noqa: F811
) -> None:
    url = f"s3://{bucket}/sky?region={REGION}"
    spec = f'name = "shared"\nnodes = 2\nhead_port = {free_port_pair()}\nbackend = "{url}"\n'
    alice, bob = tmp_path / "alice", tmp_path / "bob"
    for folder in (alice, bob):
        folder.mkdir()
        (folder / "skyinfra.toml").write_text(spec)
    (alice / "code.py").write_text(CODE)
    up = cli(["up"], alice, env)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        attach = cli(["attach"], bob, env)
        assert attach.returncode == 0, attach.stdout + attach.stderr

        started = cli(["run", "--detach", "code.py:main"], alice, env)
        assert started.returncode == 0, started.stdout + started.stderr
        job = started.stdout.split("job ", 1)[1].split()[0]
        follow = cli(["logs", job, "--all", "--follow"], bob, env)
        assert follow.returncode == 0, follow.stdout + follow.stderr
        for i in (0, 1):
            assert f"[node-{i}] step 3 on node {i}" in follow.stdout, follow.stdout
        listed = cli(["jobs", "--json"], bob, env)
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)[0]["id"] == job
        shown = json.loads(cli(["jobs", "--json", job], bob, env).stdout)
        assert shown["state"] == "succeeded"
        assert [n["result"]["workers"][0]["value"] for n in shown["nodes"]] == [0, 10]

        second = cli(["run", "--detach", "code.py:forever"], alice, env)
        assert second.returncode == 0, second.stdout + second.stderr
        other = second.stdout.split("job ", 1)[1].split()[0]
        cancel = cli(["cancel", other, "--yes"], bob, env)
        assert cancel.returncode == 0, cancel.stdout + cancel.stderr
        assert f"job {other}: cancelled" in cancel.stdout
        gone = cli(["logs", other, "--follow"], alice, env)
        assert gone.returncode == 130, gone.stdout + gone.stderr
        # Bob sees the cluster as the backend has it: a job id that does not exist is exit 2.
        missing = cli(["logs", "nope"], bob, env)
        assert missing.returncode == 2 and "'nope'" in missing.stderr
    finally:
        down = cli(["down", "--yes"], alice, env)
        assert down.returncode == 0, down.stdout + down.stderr
    # Taken down by Alice: Bob's commands learn it from the backend, not his old topology.
    after = cli(["jobs"], bob, env)
    assert after.returncode == 2 and "'shared' is down" in after.stderr, after.stderr
