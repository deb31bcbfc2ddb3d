"""`skyinfra` on the AWS target over SSH, one cluster from `up` to `down`: moto's instances
mapped to the tests' real sshd (SKYINFRA_AWS_EMULATED_NODES), the rendered provisioning script
run for real in a temporary root per node, then `status` and `run` over SSH end to end, the
head's queue over SSH (two one-node jobs at once on ports of their own, a third queued), `gc`,
and `down` checking by tag. The operator's shell holds planted AWS credentials throughout:
none may land in a file of the project, the workspace or a node, a tag or an output."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID

from skyinfra.errors import ConfigError
from skyinfra.targets.aws.endpoints import EMULATED_NODES_ENV_VAR, ENDPOINT_ENV_VAR
from skyinfra.targets.aws.target import TARGET_FILE, transport
from skyinfra.topology import Node, Topology
from skyinfra.transport.ssh import SshTarget
from tests.conftest import REPO_ROOT
from tests.support.aws import REGION, user_data_text
from tests.support.aws_e2e import (
    NO_SPACE,
    UBUNTU_DLAMI,
    aws_workspace,
    count_cluster_resources,
    instances_by_id,
    provision_in_root,
    skyinfra,
)
from tests.support.leaks import files_holding

PLANTED = "planted-" + "aws-secret-3b9e0c"
# Recognisable credentials that moto accepts (it checks none): none may be written anywhere.
PLANTED_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIAPLANTED0KEY04242",
    "AWS_SECRET_ACCESS_KEY": "PlantedSecret/4242/DoNotLeak+xQzVbNmKlJhGfDsA",
    "AWS_SESSION_TOKEN": "PlantedSessionToken4242DoNotLeakIQoJb3JpZ2luX2VjEXAMPLE==",
}


def tagged_instance(ec2: Any, tags: dict[str, str]) -> str:
    made = ec2.run_instances(
        ImageId=UBUNTU_DLAMI,
        MinCount=1,
        MaxCount=1,
        InstanceType="t3.micro",
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )
    return str(made["Instances"][0]["InstanceId"])


GATED = """\
import os, pathlib, time

from skyinfra_runtime import instance_info


def hold():
    while not pathlib.Path(os.environ["GATE"]).exists():
        time.sleep(0.1)
    return instance_info().head_port
"""


def queue_over_ssh(
    project: Path, env: dict[str, str], gate: Path
) -> list[subprocess.CompletedProcess[str]]:
    """Two `run -d --nodes 1` jobs holding a node each until ``gate`` exists, and a third
    queued behind them: the head gives them nodes and ports of their own over SSH as on the
    local target. The commands run, for the caller's checks of their output."""
    (project / "gated.py").write_text(GATED)
    argv = ["run", "-d", "--nodes", "1", "--env", f"GATE={gate}", "gated.py:hold"]
    runs, jobs = [], []
    try:
        for node in (0, 1):
            res = skyinfra(*argv, cwd=project, env=env)
            runs.append(res)
            assert f" started on node {node}\n" in res.stdout, res.stdout + res.stderr
            jobs.append(res.stdout.split("job ", 1)[1].split()[0])
        res = skyinfra(*argv, cwd=project, env=env)
        runs.append(res)
        assert " is queued (position 1): it waits for 1 node, 0 free" in res.stdout, res.stdout
        jobs.append(res.stdout.split("job ", 1)[1].split()[0])
    finally:
        gate.write_text("")
    records = []
    for job in jobs:
        until = time.monotonic() + 300  # a bound on the wait, not an assertion on time
        while True:
            shown = skyinfra("jobs", "--json", job, cwd=project, env=env)
            assert shown.returncode == 0, shown.stdout + shown.stderr
            record = json.loads(shown.stdout)
            if record["state"] in ("succeeded", "failed", "cancelled", "lost"):
                break
            assert time.monotonic() < until, record
            time.sleep(0.5)
        records.append(record)
    assert [r["state"] for r in records] == ["succeeded"] * 3, records
    one, two, three = records
    assert (one["world"], two["world"], len(three["world"])) == ([0], [1], 1), records
    assert one["started_at"] < two["ended_at"] and two["started_at"] < one["ended_at"]
    assert len({*one["ports"].values(), *two["ports"].values()}) == 4, records
    assert three["queue"]["left_at"] >= min(one["ended_at"], two["ended_at"]), three
    return runs


# One cluster's whole life (up, two nodes provisioned, a run, gc, two downs): bounded as the
# recovery modules' tests are, not by the default 300 s that fits a single step.
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_run_over_ssh_on_emulated_aws_nodes(
    cli_env: dict[str, str],
    dlami: None,
    moto_like_ec2: None,
    sshd: tuple[SshTarget, Path],
    ec2: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """up -> status (pending) -> the real provisioning script -> status (ready) -> run over SSH
    (a function entry returning instance_info()) -> gc -> down, through the CLI on the AWS
    target, with planted credentials in the shell. Every resource carries the cluster and the
    workspace id; the nodes' role reads the staged wheel; `gc` lists a tagged instance no
    state knows; `down` refuses while the API still shows one of the workspace's instances,
    and once clean deletes the staged wheel and keeps the checkpoints."""
    target, key = sshd
    # The nodes' consoles show the stand-in sshd's host key, as cloud-init prints a node's
    # own at first boot: the transport pins it from there (GetConsoleOutput, moto's here).
    import moto.ec2.responses.general as general

    host_key = " ".join((key.parent / "host_ed25519.pub").read_text().split()[:2])
    monkeypatch.setattr(
        general,
        "SAMPLE_CONSOLE_OUTPUT",
        "-----BEGIN SSH HOST KEY KEYS-----\n"
        f"{host_key} root@node\n-----END SSH HOST KEY KEYS-----\n",
    )
    project = tmp_path / "project"
    project.mkdir()
    (project / "skyinfra.toml").write_text(
        'name = "ssh-run"\nprovider = "aws"\nnodes = 2\n[aws]\n'
        f'region = "{REGION}"\ninstance_type = "t3.micro"\nssh_cidrs = ["203.0.113.7/32"]\n'
        f'ssh_key = "{key}"\nssh_user = "{target.user}"\nplacement_group = false\n'
        # No jax from the internet, no systemd timer: the stand-in node is this machine.
        'jax_extra = "none"\nidle_shutdown_minutes = 0\n'
    )
    (project / "where_am_i.py").write_text(
        "import dataclasses, hashlib, os\n\nfrom skyinfra_runtime import instance_info\n\n\n"
        "def main():\n"
        "    ckpt = os.path.join(os.environ['SKYINFRA_CHECKPOINT_DIR'], 'node.txt')\n"
        "    open(ckpt, 'w').write(str(instance_info().node))\n"
        "    secret = os.environ['PLANTED_SECRET']\n"
        "    print('secret:', secret, flush=True)\n"
        "    return {**dataclasses.asdict(instance_info()), 'from_cli': os.environ['FROM_CLI'],\n"
        "            'sha': hashlib.sha256(secret.encode()).hexdigest()}\n"
    )
    roots = {f"node-{i}": tmp_path / f"emulated-node-{i}" for i in range(2)}
    env = {
        **cli_env,
        **PLANTED_CREDENTIALS,
        # The real runtime: the entry calls instance_info() on the node.
        "SKYINFRA_RUNTIME_DIR": str(REPO_ROOT / "runtime"),
        EMULATED_NODES_ENV_VAR: json.dumps(
            {
                name: {"ssh": f"{target.host}:{target.port}", "root": str(root)}
                for name, root in roots.items()
            }
        ),
    }
    ws = project / ".skyinfra" / "clusters" / "ssh-run"
    runs: list[subprocess.CompletedProcess[str]] = []
    up = skyinfra("up", cwd=project, env=env)
    runs.append(up)
    stray = ghost = None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        topology = json.loads((ws / "topology.json").read_text())
        ids = [n["instance_id"] for n in topology["nodes"]]
        ws_id = json.loads((ws / "workspace-id.json").read_text())["id"]
        settings = json.loads((ws / TARGET_FILE).read_text())
        assert settings["workspace_id"] == ws_id
        for instance in instances_by_id(ec2, ids).values():
            tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
            assert (tags["skyinfra:cluster"], tags["skyinfra:workspace"]) == ("ssh-run", ws_id)
        vpcs = ec2.describe_vpcs(Filters=[{"Name": "tag:skyinfra:workspace", "Values": [ws_id]}])
        assert len(vpcs["Vpcs"]) == 1
        # The user data names the object, not a presigned URL; the role may read the prefix.
        tfvars = json.loads((ws / "terraform.tfvars.json").read_text())
        prefix = settings["staging_prefix"]
        head_data = user_data_text(tfvars["user_data"]["node-0"])
        assert f"/{settings['staging_bucket']}/{prefix}" in head_data
        assert "X-Amz-" not in head_data
        iam = boto3.client("iam", region_name=REGION, endpoint_url=cli_env[ENDPOINT_ENV_VAR])
        policy = iam.get_role_policy(RoleName="ssh-run-node", PolicyName="ssh-run-staged-read")
        (statement,) = policy["PolicyDocument"]["Statement"]
        assert statement["Action"] == "s3:GetObject"
        assert statement["Resource"] == f"arn:aws:s3:::{settings['staging_bucket']}/{prefix}*"

        first = skyinfra("status", "--json", cwd=project, env=env)
        runs.append(first)
        pending = json.loads(first.stdout)
        assert [n["readiness"] for n in pending["nodes"]] == ["pending", "pending"]
        assert "matches the key it published on its console" in first.stderr

        for name, root in roots.items():
            done = provision_in_root(user_data_text(tfvars["user_data"][name]), root)
            assert done.returncode == 0, done.stdout + done.stderr
            assert "could not install uv" not in done.stdout + done.stderr  # uv, not pip
            assert (root / "var/lib/skyinfra/ready").is_file()

        ready = skyinfra("status", "--json", cwd=project, env=env)
        runs.append(ready)
        assert ready.returncode == 0, ready.stdout + ready.stderr
        assert [n["readiness"] for n in json.loads(ready.stdout)["nodes"]] == ["ready", "ready"]

        # A job's env and a secret (issue 28) reach both nodes over SSH; the secret's value
        # lands in no file here or on the nodes (state, tfvars, runs/, node logs, records).
        run = skyinfra(
            "run", "--env", "FROM_CLI=over ssh", "--secret", "PLANTED_SECRET",
            "where_am_i.py:main", cwd=project, env={**env, "PLANTED_SECRET": PLANTED},
        )  # fmt: skip
        runs.append(run)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "[node-0] secret: ***" in run.stdout and PLANTED not in run.stdout + run.stderr
        run_dir = next((ws / "runs").iterdir())
        summary = json.loads((run_dir / "summary.json").read_text())
        infos = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]
        assert [(i["node"], i["total_nodes"], i["provider"]) for i in infos] == [
            (0, 2, "aws"),
            (1, 2, "aws"),
        ]
        assert {i["head_addr"] for i in infos} == {"10.42.0.10"}
        sha = hashlib.sha256(PLANTED.encode()).hexdigest()
        assert [(i["from_cli"], i["sha"]) for i in infos] == [("over ssh", sha)] * 2
        assert files_holding(tmp_path, PLANTED) == []
        assert [[p["instance_id"] for p in i["peers"]] for i in infos] == [ids, ids]
        # Each node ran in its own root, the run in its own directory there: the work copy
        # and the result are in runs/<id>/, and the shared directory exists.
        for i, root in enumerate(roots.values()):
            node_dir = root / "opt/skyinfra/node"
            run_dir = node_dir / "runs" / summary["run_id"]
            assert (run_dir / "work" / "where_am_i.py").is_file(), i
            assert (run_dir / "result.json").is_file(), i
            assert not (node_dir / "work" / "where_am_i.py").exists(), i  # the old shared copy
            assert (node_dir / "shared").is_dir(), i
        # Checkpoints (issue 25): each node uploaded its file to the default store (moto),
        # signed with the emulator's dummy keys from its checkpoints.json (no role here).
        s3 = boto3.client("s3", region_name=REGION, endpoint_url=env[ENDPOINT_ENV_VAR])
        ckpt_bucket = f"skyinfra-checkpoints-{DEFAULT_ACCOUNT_ID}-{REGION}"
        prefix = f"ssh-run/checkpoints/{summary['run_id']}/nodes/"
        listed = s3.list_objects_v2(Bucket=ckpt_bucket, Prefix=prefix).get("Contents", [])
        manifests = sorted(o["Key"][len(prefix) :] for o in listed if o["Key"].endswith(".json"))
        assert manifests == ["node-0/manifest.json", "node-1/manifest.json"]
        # The head's queue over SSH (issue 47): two one-node jobs run at once, one a node, on
        # ports of their own; a third waits for a free node, and runs once one frees.
        runs.extend(queue_over_ssh(project, env, tmp_path / "gate"))

        # An instance tagged like a cluster's that no state knows about: `gc` lists it.
        ghost = tagged_instance(
            ec2, {"skyinfra:cluster": "gone", "skyinfra:workspace": "ws-00000000000000aa"}
        )
        gc = skyinfra("gc", cwd=project, env=env)
        runs.append(gc)
        assert gc.returncode == 0, gc.stdout + gc.stderr
        assert f"{REGION} instance {ghost} (skyinfra:cluster=gone" in gc.stdout
        assert not any(i in gc.stdout for i in ids)  # the cluster's own are in its state
        assert "nothing was deleted" in gc.stdout
        ec2.terminate_instances(InstanceIds=[ghost])
        # One of this workspace's instances that Terraform does not know: `down` says so.
        stray = tagged_instance(ec2, {"skyinfra:cluster": "ssh-run", "skyinfra:workspace": ws_id})
    finally:
        down = skyinfra("down", "--yes", cwd=project, env=env)
        runs.append(down)
    assert down.returncode != 0, down.stdout + down.stderr
    assert f"aws still shows 1 of its resource(s): instance {stray}" in down.stderr
    ec2.terminate_instances(InstanceIds=[stray])
    again = skyinfra("down", "--yes", cwd=project, env=env)
    runs.append(again)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "checked with aws: nothing of cluster 'ssh-run' is left" in again.stdout
    assert f"kept the checkpoints under s3://{ckpt_bucket}/ssh-run/checkpoints/" in again.stdout
    assert count_cluster_resources(ec2, "ssh-run") == NO_SPACE
    listed = s3.list_objects_v2(Bucket=settings["staging_bucket"], Prefix=prefix)
    assert listed["KeyCount"] == 0  # `down` deleted the staged wheel

    # The project, the workspace and both nodes' roots (all under tmp_path), and every output.
    for name, value in PLANTED_CREDENTIALS.items():
        assert files_holding(tmp_path, value) == [], name
        for done in runs:
            assert value not in done.stdout + done.stderr, name


def test_transport_in_emulator_mode_dials_only_mapped_nodes(
    ssh_key: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, spec = aws_workspace(tmp_path, "emu", ssh_key, ssh_user="ubuntu")
    topology = Topology(
        cluster="emu",
        provider="aws",
        head_addr="10.42.0.10",
        head_port=29500,
        nodes=(
            Node(0, "node-0", "10.42.0.10", "54.1.2.3", "i-0"),
            Node(1, "node-1", "10.42.0.11", None, "i-1"),
        ),
    )
    monkeypatch.setenv(ENDPOINT_ENV_VAR, "http://127.0.0.1:5000")
    monkeypatch.setenv(
        EMULATED_NODES_ENV_VAR, '{"node-1": {"ssh": "127.0.0.1:2201", "root": "/r1"}}'
    )
    nodes = transport(ws, spec, topology)
    assert [(i, t.host, t.port, t.root) for i, t in nodes._targets.items()] == [
        (1, "127.0.0.1", 2201, "/r1")
    ]
    assert nodes.node_root(1) == "/r1/opt/skyinfra/node"
    unmapped = nodes.readiness(0)  # answered without a connection attempt
    assert unmapped.state == "unreachable"
    assert "node-0's addresses (54.1.2.3, 10.42.0.10) are the emulator's" in unmapped.detail

    monkeypatch.setenv(EMULATED_NODES_ENV_VAR, '{"node-7": "127.0.0.1:2201"}')
    with pytest.raises(ConfigError, match=r"a node of 'emu': \['node-0', 'node-1'\]"):
        transport(ws, spec, topology)


# Recognisable credentials that moto accepts (it checks none): none may be written anywhere.
