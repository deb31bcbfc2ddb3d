"""A cluster whose state lives in S3 (moto's server over loopback), through the CLI as users
run it: two operators (two project folders, two workspaces, one backend), one with an external
terraform binary and one with the embedded Terraform.

- Two `up` at once: one proceeds, the other stops at once naming the lock and who holds it;
  the state is intact afterwards.
- The second operator attaches: `status` and `run` work from the topology rebuilt from the
  backend's outputs; a lock a killed process left is named, released with `skyinfra unlock`,
  and `down` from the second workspace takes the cluster down for both.
- `skyinfra state push` moves a cluster's local state to S3; the cluster then works from it.
"""

# ruff: noqa: F811 (the fixtures imported from tests/support/shared_state_e2e.py are parameters)

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import boto3
import pytest

from skyinfra.terraform._embedded import SCRIPT as EMBEDDED_SCRIPT
from tests.conftest import skyinfra_argv
from tests.support.aws import REGION
from tests.support.engines import terraform_binary
from tests.support.local_jobs import cli
from tests.support.ports import free_port_pair
from tests.support.shared_state_e2e import (  # noqa: F401 (fixtures)
    bucket,
    env,
    shared_cache,
)

pytestmark = pytest.mark.slow


def s3_client(moto_url: str):  # type: ignore[no-untyped-def]
    return boto3.client(
        "s3",
        region_name=REGION,
        endpoint_url=moto_url,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


def keys(moto_url: str, bucket: str) -> list[str]:
    listed = s3_client(moto_url).list_objects_v2(Bucket=bucket).get("Contents", [])
    return sorted(o["Key"] for o in listed)


def terraform_in(workdir: Path, binary: str) -> list[int]:
    """The Terraform processes working in ``workdir`` (their cwd), by pid.

    A process Terraform has just forked (a provider plugin, before its exec) has Terraform's
    command line and cwd for a moment; it is left out by its parent being in the list.
    """
    found: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if Path(os.readlink(entry / "cwd")) != workdir:
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            # The field after the parenthesised command name: state, then the parent's pid.
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        # PATH's terraform, or the forwarding one (it execs the embedded Terraform's script).
        if argv and (argv[0] == binary.encode() or EMBEDDED_SCRIPT.encode() in argv):
            found[int(entry.name)] = parent
    return sorted(pid for pid, parent in found.items() if parent not in found)


def project(tmp_path: Path, name: str, spec: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "skyinfra.toml").write_text(spec)
    (folder / "hello.py").write_text(
        "import os\n\n\ndef main():\n    print('hello from node', os.environ['SKYINFRA_NODE'])\n"
    )
    return folder


def test_two_operators_one_s3_backend(
    tmp_path: Path, env: dict[str, str], moto_url: str, bucket: str
) -> None:
    url = f"s3://{bucket}/sky?region={REGION}"
    local = f'name = "team"\nnodes = 1\nhead_port = {free_port_pair()}\n'
    alice = project(tmp_path, "alice", local)
    bob = project(tmp_path, "bob", local.replace("nodes = 1", "nodes = 2") + f'backend = "{url}"\n')
    binary = terraform_binary(tmp_path)
    ws = alice / ".skyinfra" / "clusters" / "team"

    # Alice starts with the state in her workspace (an external terraform binary), then
    # moves it to S3.
    up = cli(["up", "--terraform-bin", binary], alice, env)
    assert up.returncode == 0, up.stdout + up.stderr
    assert (ws / "terraform.tfstate").is_file()
    push = cli(["state", "push", "--backend", url], alice, env)
    assert push.returncode == 0, push.stdout + push.stderr
    assert "1 resource(s) now in" in push.stdout
    assert keys(moto_url, bucket) == ["sky/team/terraform.tfstate"]
    assert not (ws / "terraform.tfstate").exists()
    assert (ws / "terraform.tfstate.local-backup").stat().st_mode & 0o777 == 0o600
    assert json.loads((ws / "spec.json").read_text())["backend"] == url
    # Pushing again moves nothing; an `up` from a spec without the backend keeps it (issue 42:
    # `up` keeps what was applied), and one that names another backend is refused.
    again = cli(["state", "push", "--backend", url], alice, env)
    assert again.returncode == 1 and "already keeps its state in" in again.stderr
    kept_up = cli(["up"], alice, env)
    assert kept_up.returncode == 0, kept_up.stdout + kept_up.stderr
    assert f'kept backend = "{url}" from the applied cluster' in kept_up.stdout
    assert "no changes" in kept_up.stdout and not (ws / "terraform.tfstate").exists()
    elsewhere = f"s3://{bucket}/elsewhere?region={REGION}"
    other_up = cli(["up", "--backend", elsewhere], alice, env)
    assert other_up.returncode == 1, other_up.stdout + other_up.stderr
    assert f"keeps its state in {url}" in other_up.stderr
    (alice / "skyinfra.toml").write_text(bob.joinpath("skyinfra.toml").read_text())

    # Alice's `up` (a second node) is applying; Bob's `up` meets her lock.
    first = subprocess.Popen(
        [*skyinfra_argv(), "up"],
        cwd=alice,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert first.stdout is not None
    seen = []
    try:
        for line in first.stdout:
            seen.append(line)
            if "Creating..." in line:
                assert "sky/team/terraform.tfstate.tflock" in keys(moto_url, bucket)
                # Alice's Terraform is held mid-apply (lock taken) while Bob tries: no race.
                (terraform,) = terraform_in(alice / ".skyinfra/clusters/team", binary)
                os.kill(terraform, signal.SIGSTOP)
                try:
                    second = cli(["up"], bob, env)
                finally:
                    os.kill(terraform, signal.SIGCONT)
                break
        seen.append(first.stdout.read())
        first.wait(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, "".join(seen)
    assert second.returncode == 1, second.stdout + second.stderr
    assert "the state is locked: lock " in second.stderr
    assert f"on {bucket}/sky/team/terraform.tfstate" in second.stderr
    assert "held by " in second.stderr and "OperationTypeApply" in second.stderr
    assert "skyinfra unlock --cluster team " in second.stderr
    assert "Traceback" not in second.stderr
    # Alice's cluster is whole, its state in S3 and not in her workspace; no lock left.
    assert keys(moto_url, bucket) == ["sky/team/terraform.tfstate"]
    status = cli(["status", "--json"], alice, env)
    assert status.returncode == 0, status.stderr
    info = json.loads(status.stdout)
    assert [n["readiness"] for n in info["nodes"]] == ["ready", "ready"]
    assert info["backend"] == f"s3://{bucket}/sky?region={REGION}"
    assert info["engine"].startswith("terraform ") and "embedded" not in info["engine"]
    assert not (alice / ".skyinfra/clusters/team/terraform.tfstate").exists()

    # Bob joins: the topology comes from the backend's outputs.
    attach = cli(["attach"], bob, env)
    assert attach.returncode == 0, attach.stdout + attach.stderr
    assert "attached to cluster 'team'" in attach.stdout and "2 node(s)" in attach.stdout
    status = cli(["status", "--json"], bob, env)
    assert status.returncode == 0, status.stderr
    info = json.loads(status.stdout)
    assert info["state"] == "up" and "embedded" in info["engine"]
    assert [n["readiness"] for n in info["nodes"]] == ["ready", "ready"]
    run = cli(["run", "--all-logs", "hello.py:main"], bob, env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "hello from node 0" in run.stdout and "hello from node 1" in run.stdout
    # `gc` reads a shared cluster's state from the backend: its live nodes are no orphans.
    gc = cli(["gc"], alice, env)
    assert gc.returncode == 0, gc.stdout + gc.stderr
    assert "node folder" not in gc.stdout
    assert "0 resource(s) tagged by skyinfra that no workspace knows about" in gc.stdout

    # A lock left by a killed process (as Terraform writes it): named, then released.
    stale = {
        "ID": "5e1d7d0a-0000-4000-8000-00000000dead",
        "Operation": "OperationTypeApply",
        "Info": "",
        "Who": "carol@laptop",
        "Version": "1.11.4",
        "Created": "2026-11-23T08:00:00Z",
        "Path": f"{bucket}/sky/team/terraform.tfstate",
    }
    s3_client(moto_url).put_object(
        Bucket=bucket, Key="sky/team/terraform.tfstate.tflock", Body=json.dumps(stale).encode()
    )
    blocked = cli(["down", "--yes"], bob, env)
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    assert "held by carol@laptop" in blocked.stderr
    assert f"skyinfra unlock --cluster team {stale['ID']}" in blocked.stderr
    unlock = cli(["unlock", stale["ID"]], bob, env)
    assert unlock.returncode == 0, unlock.stdout + unlock.stderr
    assert keys(moto_url, bucket) == ["sky/team/terraform.tfstate"]

    # Bob takes the cluster down; Alice sees it down.
    down = cli(["down", "--yes"], bob, env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not list((alice / ".skyinfra/clusters/team/nodes").iterdir())
    status = cli(["status", "--json"], alice, env)
    assert status.returncode == 0, status.stderr
    info = json.loads(status.stdout)
    assert (info["state"], info["nodes"]) == ("down", [])
    assert not (alice / ".skyinfra/clusters/team/topology.json").exists()
    # Alice's `run` learns it from the backend too, not from her old topology.json.
    (alice / ".skyinfra/clusters/team/topology.json").write_text(
        (bob / ".skyinfra/clusters/team/runs").as_posix()  # any stale content
    )
    stale_run = cli(["run", "hello.py:main"], alice, env)
    assert stale_run.returncode == 2, stale_run.stdout + stale_run.stderr
    assert "cluster 'team' is down" in stale_run.stderr
