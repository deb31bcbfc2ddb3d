"""`skyinfra up/status/run/down --provider aws` as a user runs them: the console script in a
subprocess, pointed at moto's server (SKYINFRA_AWS_ENDPOINT_URL) with dummy credentials, real
Terraform and the real AWS provider from the filesystem mirror. The instances Terraform made
are checked through boto3 (addresses, zone, IMDSv2, shutdown behaviour, root volume); moto's
instances are records, not machines: their addresses are never dialled, so `status` shows them
unreachable (saying why) and `run` refuses to start, until SKYINFRA_AWS_EMULATED_NODES maps
them to the tests' real sshd: then the rendered provisioning script runs for real in a
temporary root per node, and `status` and `run` go over SSH end to end.

moto's server runs in this test process; the AWS end-to-end tests share the seeded Deep
Learning AMI, `moto_like_ec2` (moto read back like EC2 where it differs) and the other helpers
of tests/support/aws_e2e.py.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from moto.core import DEFAULT_ACCOUNT_ID

from skyinfra.spec import validate_spec
from skyinfra.targets.aws.cluster_files import render_files
from skyinfra.targets.aws.endpoints import (
    EMULATED_NODES_ENV_VAR,
    EMULATOR_CONFIG_FILE,
    ENDPOINT_ENV_VAR,
    Emulator,
)
from skyinfra.targets.aws.target import TARGET_FILE, transport
from skyinfra.terraform.external import ENGINE_ENV
from skyinfra.topology import Node, Topology
from skyinfra.wheel import build_runtime_wheel
from skyinfra.workspace import Workspace
from tests.conftest import (
    REPO_ROOT,
    content_of,
)
from tests.support.aws import REGION, user_data_text
from tests.support.aws_e2e import (
    AMAZON_LINUX_DLAMI,
    NO_SPACE,
    UBUNTU_DLAMI,
    aws_workspace,
    count_cluster_resources,
    instances_by_id,
    skyinfra,
    write_spec,
)
from tests.support.aws_fixtures import seed_dlami
from tests.support.engines import terraform_binary


@pytest.mark.slow
def test_up_twice_status_down_through_the_cli(
    cli_env: dict[str, str],
    dlami: None,
    moto_like_ec2: None,
    ssh_key: Path,
    ec2: Any,
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    # This test drives an external terraform binary (--terraform-bin's variable), with the
    # state in the emulator's S3; the other AWS tests here drive the embedded one, with local
    # state: the AWS target against moto with each engine.
    cli_env = {**cli_env, ENGINE_ENV: terraform_binary(tmp_path)}
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=cli_env[ENDPOINT_ENV_VAR])
    s3.create_bucket(Bucket="cli-two-state")
    spec = write_spec(project / "skyinfra.toml", "cli-two", "t3.micro", ssh_key)
    spec.write_text('backend = "s3://cli-two-state/team"\n' + spec.read_text())

    def saved_state() -> dict[str, Any]:
        body = s3.get_object(Bucket="cli-two-state", Key="team/cli-two/terraform.tfstate")["Body"]
        state: dict[str, Any] = json.loads(body.read())
        return state

    (project / "train.py").write_text("def main():\n    pass\n")  # `run` checks ENTRY first
    ws = project / ".skyinfra" / "clusters" / "cli-two"

    first = skyinfra("up", "--provider", "aws", cwd=project, env=cli_env)
    try:
        assert first.returncode == 0, first.stdout + first.stderr
        out = first.stdout
        assert "preflight" in out and "Creation complete" in out
        # moto answers no EC2 quota: the preflight warns and goes on.
        assert "warning: Service Quotas gave no answer" in out

        topology = json.loads((ws / "topology.json").read_text())
        assert topology["schema"] == 1 and topology["provider"] == "aws"
        assert topology["head_addr"] == "10.42.0.10"
        nodes = topology["nodes"]
        assert [(n["index"], n["name"], n["private_ip"]) for n in nodes] == [
            (0, "node-0", "10.42.0.10"),
            (1, "node-1", "10.42.0.11"),
        ]
        found = instances_by_id(ec2, [n["instance_id"] for n in nodes])
        assert sorted(found) == sorted(n["instance_id"] for n in nodes)
        zone = json.loads((ws / TARGET_FILE).read_text())["availability_zone"]
        assert zone == f"{REGION}a"  # the first zone offering t3.micro, pinned at `up`
        for node in nodes:
            instance = found[node["instance_id"]]
            assert instance["PrivateIpAddress"] == node["private_ip"]
            assert instance["ImageId"] == UBUNTU_DLAMI
            assert instance["State"]["Name"] == "running"
            assert instance["Placement"]["AvailabilityZone"] == zone
            # IMDSv2 only, hop limit 1: instance credentials stay away from containers.
            metadata = instance["MetadataOptions"]
            assert (metadata["HttpTokens"], metadata["HttpPutResponseHopLimit"]) == ("required", 1)
            # An idle node's `shutdown` terminates it instead of leaving a stopped node.
            shutdown = ec2.describe_instance_attribute(
                InstanceId=node["instance_id"], Attribute="instanceInitiatedShutdownBehavior"
            )
            assert shutdown["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
            root = ec2.describe_volumes(
                Filters=[{"Name": "attachment.instance-id", "Values": [node["instance_id"]]}]
            )["Volumes"]
            assert [(v["VolumeType"], v["Encrypted"]) for v in root] == [("gp3", True)]
        # The root module's `nodes` output (keyed by node name, with the zone) as applied.
        outputs = saved_state()["outputs"]
        assert {
            name: (o["index"], o["instance_id"], o["private_ip"], o["availability_zone"])
            for name, o in outputs["nodes"]["value"].items()
        } == {n["name"]: (n["index"], n["instance_id"], n["private_ip"], zone) for n in nodes}
        assert "topology" not in outputs  # one output for the nodes, not two
        assert count_cluster_resources(ec2, "cli-two") == {
            "instances": 2,
            "security_groups": 1,
            "subnets": 1,
            "vpcs": 1,
        }

        # The AMI went into the tfvars as a concrete id; the idle timer is on by default.
        tfvars = json.loads((ws / "terraform.tfvars.json").read_text())
        assert tfvars["cluster"]["ami_id"] == UBUNTU_DLAMI
        user_data = user_data_text(tfvars["user_data"]["node-1"])
        assert user_data.startswith("#cloud-config")
        assert "skyinfra-idle.timer" in user_data
        # provision.sh hands the node folder to the login user its settings name.
        written = {f["path"]: content_of(f) for f in yaml.safe_load(user_data)["write_files"]}
        assert "SSH_USER=ubuntu\n" in written["/opt/skyinfra/provision-settings.sh"]
        assert 'chown -R "$SSH_USER:$SSH_USER"' in written["/opt/skyinfra/provision.sh"]
        assert json.loads((ws / TARGET_FILE).read_text())["ssh_user"] == "ubuntu"

        # A new DLAMI release must not replace the nodes: the second `up` reuses the pinned id.
        seed_dlami(AMAZON_LINUX_DLAMI)
        second = skyinfra("up", "--provider", "aws", cwd=project, env=cli_env)
        assert second.returncode == 0, second.stdout + second.stderr
        assert "no changes: the cluster already matches the spec" in second.stdout
        assert f"AMI {UBUNTU_DLAMI} (resolved at the first `up`" in second.stdout
        tfvars = json.loads((ws / "terraform.tfvars.json").read_text())
        assert tfvars["cluster"]["ami_id"] == UBUNTU_DLAMI
        assert json.loads((ws / "topology.json").read_text())["nodes"] == nodes

        status = skyinfra("status", "--json", cwd=project, env=cli_env)
        assert status.returncode == 0, status.stdout + status.stderr
        info = json.loads(status.stdout)
        assert (info["cluster"], info["provider"], info["state"]) == ("cli-two", "aws", "up")
        assert info["engine"].startswith("terraform ") and "embedded" not in info["engine"]
        assert info["backend"] == "s3://cli-two-state/team"
        assert not (ws / "terraform.tfstate").exists()
        state_keys = [o["Key"] for o in s3.list_objects_v2(Bucket="cli-two-state")["Contents"]]
        assert state_keys == ["team/cli-two/terraform.tfstate"]
        assert [(n["name"], n["instance_id"]) for n in info["nodes"]] == [
            (n["name"], n["instance_id"]) for n in nodes
        ]
        assert sum(r.startswith("module.nodes.aws_instance.this") for r in info["resources"]) == 2
        # moto's instances are records, not machines: in emulator mode their addresses are
        # never dialled (the loopback guard would fail this test), and status says why.
        assert [(n["ready"], n["readiness"]) for n in info["nodes"]] == [
            (False, "unreachable"),
            (False, "unreachable"),
        ]
        for node in info["nodes"]:
            addresses = ", ".join(a for a in (node["public_ip"], node["private_ip"]) if a)
            assert node["readiness_detail"].startswith(
                f"not dialled: emulator mode ({ENDPOINT_ENV_VAR} is set), so {node['name']}'s "
                f"addresses ({addresses}) are the emulator's, not a machine's; map "
                f"{node['name']} to a stand-in sshd with {EMULATED_NODES_ENV_VAR}"
            )
        assert "Traceback" not in status.stderr and "Exception" not in status.stderr
        text = skyinfra("status", cwd=project, env=cli_env)
        assert text.returncode == 0, text.stdout + text.stderr
        head = nodes[0]
        # t3.micro: no GPU, said on the node's line as on every target
        line = f"  node-0: {head['private_ip']} {head['instance_id']} unreachable, no GPU\n"
        assert line in text.stdout, text.stdout
        assert "    not dialled: emulator mode (SKYINFRA_AWS_ENDPOINT_URL is set)" in text.stdout

        # `run` does not start on nodes that are not ready: it waits, then names them.
        run = skyinfra("run", "--wait-ready", "1", "train.py:main", cwd=project, env=cli_env)
        assert run.returncode == 5, run.stdout + run.stderr  # exitcodes.NODES_NOT_READY
        assert "error: 2 of 2 node(s) not ready after 1 s: node-0: not dialled" in run.stderr
        assert "; node-1: not dialled: emulator mode" in run.stderr
        assert "[skyinfra] waiting for node-0 (not reachable yet), node-1 (" in run.stdout
        assert not (ws / "runs").exists()
        assert "Traceback" not in run.stderr
    finally:
        down = skyinfra("down", "--yes", cwd=project, env=cli_env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert count_cluster_resources(ec2, "cli-two") == NO_SPACE
    assert saved_state()["resources"] == []
    assert not (ws / "topology.json").exists()


def test_preflight_failure_exits_nonzero_and_writes_no_workspace(
    cli_env: dict[str, str], dlami: None, ssh_key: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    spec = write_spec(project / "cluster.toml", "cli-bad", "p9z.mega", ssh_key)
    proc = skyinfra("up", "--spec", str(spec), cwd=project, env=cli_env, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # PreflightError
    assert "error: instance type 'p9z.mega' does not exist" in proc.stderr
    assert "aws.instance_type" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "terraform init" not in proc.stdout
    assert not (project / ".skyinfra").exists()
    assert sorted(p.name for p in project.iterdir()) == ["cluster.toml"]


def test_skip_preflight_bypasses_the_checks(
    aws_env: str,
    dlami: None,
    ssh_key: Path,
    minimal_runtime_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In-process: with --skip-preflight an instance type moto does not know still renders
    (the checks are skipped), the AMI is still resolved, and the workspace is untouched."""
    monkeypatch.setenv(ENDPOINT_ENV_VAR, aws_env)
    monkeypatch.setenv("SKYINFRA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(
        "skyinfra.targets.aws.cluster_files.build_runtime_wheel",
        functools.partial(build_runtime_wheel, minimal_runtime_dir),
    )
    spec = validate_spec(
        {
            "name": "skip",
            "provider": "aws",
            "nodes": 2,
            "aws": {
                "region": REGION,
                "instance_type": "p9z.mega",
                "ssh_cidrs": ["203.0.113.7/32"],
                "ssh_key": str(ssh_key),
                "idle_shutdown_minutes": 0,
            },
        }
    )
    ws = Workspace(tmp_path / "clusters" / "skip")
    lines: list[str] = []
    files = render_files(spec, ws, echo=lines.append, skip_preflight=True)
    assert not ws.path.exists()
    assert any("--skip-preflight" in line for line in lines)
    assert any("p9z.mega not described" in line for line in lines)
    tfvars = json.loads(files["terraform.tfvars.json"])
    assert tfvars["cluster"]["ami_id"] == UBUNTU_DLAMI
    assert tfvars["cluster"]["ssh_public_key"] == ssh_key.with_suffix(".pub").read_text().strip()
    assert "skyinfra-idle" not in user_data_text(tfvars["user_data"]["node-0"])  # 0 turns it off
    assert f"endpoint_url = {aws_env}\n" in files[EMULATOR_CONFIG_FILE]
    assert f'"${{path.module}}/{EMULATOR_CONFIG_FILE}"' in files["main.tf"]
    # Self-contained: the root calls its own copies of the modules (./modules/aws/...).
    for module in ("network", "security", "nodes"):
        assert f'source = "./modules/aws/{module}"' in files["main.tf"]
        for name in ("main.tf", "outputs.tf", "variables.tf", "versions.tf"):
            copy = files[f"modules/aws/{module}/{name}"]
            assert copy == (REPO_ROOT / "infra" / "modules" / "aws" / module / name).read_text()
    assert not any("tests/" in name or "../" in text for name, text in files.items())
    # The wheel's URL is presigned against the emulator and serves the staged object.
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=Emulator(url=aws_env).url)
    assert s3.list_objects_v2(Bucket=f"skyinfra-staging-{DEFAULT_ACCOUNT_ID}-{REGION}")["KeyCount"]
    # Checkpoints (issue 25): the default store, a private bucket of its own whose objects
    # never expire; the nodes' role gets its prefix, the nodes its address.
    ckpt_bucket = f"skyinfra-checkpoints-{DEFAULT_ACCOUNT_ID}-{REGION}"
    assert tfvars["checkpoints"] == {"bucket": ckpt_bucket, "prefix": "skip/checkpoints"}
    rules = s3.get_bucket_lifecycle_configuration(Bucket=ckpt_bucket)["Rules"]
    assert [r.get("Expiration") for r in rules] == [None]
    assert s3.get_public_access_block(Bucket=ckpt_bucket)["PublicAccessBlockConfiguration"][
        "BlockPublicPolicy"
    ]
    node_doc = yaml.safe_load(user_data_text(tfvars["user_data"]["node-1"]))
    settings = {f["path"]: f["content"] for f in node_doc["write_files"]}
    assert json.loads(settings["/opt/skyinfra/node/checkpoints.json"]) == {
        "url": f"s3://{ckpt_bucket}/skip/checkpoints",
        "region": REGION,
        "bucket_url": f"{aws_env}/{ckpt_bucket}",
        # Emulator mode only: its conventional dummy keys (the stand-in nodes have no role).
        "emulator_access_key": "test",
        "emulator_secret_key": "test",
    }
    assert any("checkpoints kept under s3://" in line for line in lines)


def test_transport_uses_the_spec_key_and_public_or_private_address(
    ssh_key: Path, tmp_path: Path
) -> None:
    ws, spec = aws_workspace(tmp_path, "ssh", ssh_key)
    ws.write_json(ws.path / TARGET_FILE, {"ssh_user": "ec2-user"})
    topology = Topology(
        cluster="ssh",
        provider="aws",
        head_addr="10.42.0.10",
        head_port=29500,
        nodes=(
            Node(0, "node-0", "10.42.0.10", "198.51.100.4", "i-0"),
            Node(1, "node-1", "10.42.0.11", None, "i-1"),
        ),
    )
    nodes = transport(ws, spec, topology)
    targets = nodes._targets
    assert [(t.host, t.user, t.port) for t in targets.values()] == [
        ("198.51.100.4", "ec2-user", 22),
        ("10.42.0.11", "ec2-user", 22),
    ]
    assert nodes._key_path == ssh_key
    assert nodes.node_root(0) == "/opt/skyinfra/node"
