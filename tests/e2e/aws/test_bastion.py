"""A private network's way in (issue 46), with real parts: the operator in the test's network
namespace, the bastion's sshd in a second one reachable from it, the nodes' sshds in a third
reachable only from the bastion's (tests/support/bastion_hosts.py). moto's three instances
(the bastion, node-0, node-1) print their own host keys on their consoles, as cloud-init does
at first boot; SKYINFRA_AWS_EMULATED_NODES maps them to the stand-ins. No Terraform: the
workspace is written as `up` leaves it, its topology naming the bastion as the way in and the
jax and keras plugins; the stand-ins' node environment is this suite's venv (jax and keras).

`status` (readiness), `run` of the seeds' Keras example (the same weights on both nodes, its
JAX rendezvous on node 0's private address), a plain entry's worker in the nodes' namespace,
`jobs`, `logs` and every `verify` check (the rendezvous ports and the JAX collective included)
go through the bastion; `ssh` and `ssh --config` (ProxyJump) too; a direct dial from the
operator's namespace to a node fails; a changed bastion host key is refused, naming it, and
nothing runs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from skyinfra.targets.aws.cloudinit import READY_MARKER
from skyinfra.targets.aws.endpoints import EMULATED_NODES_ENV_VAR, ENDPOINT_ENV_VAR
from skyinfra.topology import Node, WayIn, build_topology
from tests.conftest import REPO_ROOT, VENV_BIN
from tests.support.aws import DUMMY_AWS_ENV, REGION
from tests.support.aws_e2e import aws_workspace, skyinfra
from tests.support.bastion_hosts import PrivateNetwork, private_network
from tests.support.workers import end_all_under

pytestmark = pytest.mark.slow

NAME = "priv"
ENTRY = """import os


def main():
    print("node", os.environ["SKYINFRA_NODE"], "ran", flush=True)
    return {"node": int(os.environ["SKYINFRA_NODE"]), "netns": os.readlink("/proc/self/ns/net")}
"""


@dataclass
class Cluster:
    net: PrivateNetwork
    ws: Path
    project: Path
    env: dict[str, str]
    roots: list[Path]

    @property
    def where(self) -> list[str]:
        return ["--dir", str(self.ws.parent), "--cluster", NAME]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return skyinfra(*args, cwd=self.project, env=self.env)

    def runs_on_nodes(self) -> list[list[str]]:
        return [
            sorted(p.name for p in (root / "opt/skyinfra/node/runs").glob("*"))
            for root in self.roots
        ]


def _console(key: Path) -> str:
    line = " ".join(Path(f"{key}.pub").read_text().split()[:2])
    return f"-----BEGIN SSH HOST KEY KEYS-----\n{line} root@host\n-----END SSH HOST KEY KEYS-----\n"


@pytest.fixture(scope="module")
def cluster(moto_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    from moto.core.responses import ActionResult
    from moto.core.utils import utcnow
    from moto.ec2.responses.general import General
    from moto.ec2.utils import Base64EncodedString

    tmp = tmp_path_factory.mktemp("bastion")
    with private_network(2) as net, pytest.MonkeyPatch.context() as mp:
        ec2 = boto3.client(
            "ec2",
            region_name=REGION,
            endpoint_url=moto_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        image = ec2.describe_images()["Images"][0]["ImageId"]
        made = ec2.run_instances(ImageId=image, MinCount=3, MaxCount=3, InstanceType="t3.micro")
        bastion_id, *node_ids = [i["InstanceId"] for i in made["Instances"]]
        # Each instance's console shows its own host's keys (moto's shows one text for all).
        consoles = {bastion_id: _console(net.bastion.host_key)}
        consoles.update({i: _console(net.nodes[0].host_key) for i in node_ids})

        def get_console_output(self: Any) -> ActionResult:
            instance = self.ec2_backend.get_instance(self._get_param("InstanceId"))
            output = Base64EncodedString.from_raw_string(consoles.get(instance.id, ""))
            return ActionResult(
                {"InstanceId": instance.id, "Timestamp": utcnow(), "Output": output}
            )

        mp.setattr(General, "get_console_output", get_console_output)
        ws, spec = aws_workspace(
            tmp,
            NAME,
            net.hosts.key,
            plugins=("jax", "keras:backend=jax"),
            ssh_user=net.hosts.user,
            network="private",
        )
        addresses = [host.address for host in net.nodes]
        topology = build_topology(
            spec,
            head_addr=addresses[0],
            nodes=[
                Node(i, f"node-{i}", address, None, node_ids[i])
                for i, address in enumerate(addresses)
            ],
            way_in=WayIn("bastion", "198.51.100.7", instance_id=bastion_id),
        )
        ws.write_json(ws.topology_file, topology.to_dict())
        roots = []
        for i in range(2):
            root = tmp / f"node-{i}"
            node_dir = root / "opt/skyinfra/node"
            node_dir.mkdir(parents=True)
            (node_dir / "venv").symlink_to(VENV_BIN.parent)  # the runtime, as provisioned
            ready = root / READY_MARKER.lstrip("/")
            ready.parent.mkdir(parents=True)
            ready.write_text("ready\n")
            roots.append(root)
        project = tmp / "project"
        shutil.copytree(REPO_ROOT / "examples", project / "examples")
        (project / "job.py").write_text(ENTRY)
        home = tmp / "operator-home"  # nothing of this machine's ~/.ssh is honoured
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SKYINFRA_", "AWS_"))}
        env.update(DUMMY_AWS_ENV)
        env.update(
            {
                "HOME": str(home),
                ENDPOINT_ENV_VAR: moto_url,
                EMULATED_NODES_ENV_VAR: json.dumps(
                    {
                        "bastion": f"{net.bastion.address}:22",
                        **{
                            f"node-{i}": {"ssh": f"{address}:22", "root": str(roots[i])}
                            for i, address in enumerate(addresses)
                        },
                    }
                ),
            }
        )
        try:
            yield Cluster(net, ws.path, project, env, roots)
        finally:
            # No `down` here (no Terraform, no instance to terminate): what `run` left on the
            # stand-ins (the standbys a job's end asks for) ends with the module.
            left = {str(root): end_all_under(root) for root in roots}
            assert not any(left.values()), f"processes outlived the stand-in nodes: {left}"


def _values(summary: dict[str, Any]) -> list[Any]:
    return [n["result"]["workers"][0]["value"] for n in summary["nodes"]]


def test_run_status_jobs_logs_and_verify_go_through_the_bastion(cluster: Cluster) -> None:
    status = cluster.cli("status", *cluster.where, "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    assert [n["readiness"] for n in json.loads(status.stdout)["nodes"]] == ["ready", "ready"]
    bastion = cluster.net.bastion.address
    assert f"bastion (the way in) ({bastion}:22): host key" in status.stderr
    assert "matches the key it published on its console" in status.stderr
    pinned = (cluster.ws / "known_hosts").read_text()
    assert all(h.address in pinned for h in cluster.net.hosts.hosts)
    topology = json.loads((cluster.ws / "topology.json").read_text())
    assert [p["name"] for p in topology["plugins"]] == ["jax", "keras"]

    # The seeds' Keras example, as test_cluster.py runs it on local nodes: JAX's coordinator
    # on node 0's private address, which only the nodes' namespace has.
    keras = cluster.cli("run", *cluster.where, "examples/keras_digits.py:main")
    assert keras.returncode == 0, keras.stdout + keras.stderr
    (keras_dir,) = (cluster.ws / "runs").iterdir()
    values = _values(json.loads((keras_dir / "summary.json").read_text()))
    assert [v["node"] for v in values] == [0, 1]
    assert values[0]["weights_sha256"] == values[1]["weights_sha256"]
    assert all(float(v["accuracy"]) > 0.8 for v in values)

    # A plain entry says where its worker ran: the nodes' namespace, not the operator's.
    run = cluster.cli("run", *cluster.where, "--all-logs", "job.py:main")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[node-1] node 1 ran" in run.stdout
    (run_dir,) = set((cluster.ws / "runs").iterdir()) - {keras_dir}
    summary = json.loads((run_dir / "summary.json").read_text())
    nodes_ns = os.readlink(f"/proc/{cluster.net.nodes[0].ns}/ns/net")
    assert _values(summary) == [{"node": 0, "netns": nodes_ns}, {"node": 1, "netns": nodes_ns}]

    jobs = cluster.cli("jobs", *cluster.where)
    assert jobs.returncode == 0 and summary["run_id"] in jobs.stdout, jobs.stdout + jobs.stderr
    logs = cluster.cli("logs", *cluster.where, "--node", "1", summary["run_id"])
    assert logs.returncode == 0 and "node 1 ran" in logs.stdout, logs.stdout + logs.stderr

    # Every check, the head's rendezvous ports and the JAX collective across both nodes
    # included (the stand-ins' folders share this machine's disk: 0.1 GB is enough).
    verify = cluster.cli("verify", *cluster.where, "--min-free-gb", "0.1", "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    rows = {row["check"]: row["nodes"] for row in json.loads(verify.stdout)["checks"]}
    both = ("node-0", "node-1")
    for check in (
        "ready",
        "runtime",
        "topology",
        "python",
        "framework jax",
        "framework keras",
        "disk",
        "ports reachable",
        "collective",
    ):
        assert [rows[check][n]["status"] for n in both] == ["pass", "pass"], (check, rows[check])
    head_ports = rows["ports free on head"]
    assert [head_ports[n]["status"] for n in both] == ["pass", "n/a"], head_ports
    # The stand-ins have no GPU, EFA, torch (NCCL) or idle timer: n/a, not a pass.
    for check in ("gpus visible", "efa", "nccl network", "idle timer"):
        assert {rows[check][n]["status"] for n in both} == {"n/a"}, (check, rows[check])


def test_a_node_is_reached_only_through_the_bastion(cluster: Cluster) -> None:
    node = cluster.net.nodes[1].address
    with pytest.raises(OSError) as refused:
        socket.create_connection((node, 22), timeout=10).close()
    assert "unreachable" in str(refused.value).lower() or "no route" in str(refused.value).lower()
    # From the bastion's namespace the same address answers: the path, not a dead sshd.
    probe = f"import socket; socket.create_connection(({node!r}, 22), 10).close()"
    inside = cluster.net.hosts.in_namespace(cluster.net.bastion, sys.executable, "-c", probe)
    assert inside.returncode == 0, inside.stderr


def test_ssh_and_its_config_jump_through_the_bastion(cluster: Cluster) -> None:
    res = cluster.cli("ssh", *cluster.where, "1", "--", "echo node=$SKYINFRA_NODE")
    assert res.returncode == 0 and res.stdout == "node=1\n", res.stdout + res.stderr

    config = cluster.cli("ssh", *cluster.where, "--config")
    assert config.returncode == 0, config.stdout + config.stderr
    assert f"Host {NAME}-bastion\n    HostName {cluster.net.bastion.address}\n" in config.stdout
    assert config.stdout.count(f"    ProxyJump {NAME}-bastion\n") == 2
    written = cluster.ws / "ssh_config"
    plain = subprocess.run(
        ["ssh", "-F", str(written), f"{NAME}-node-1", "echo via config"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env=cluster.env,
    )  # fmt: skip
    assert plain.returncode == 0 and plain.stdout == "via config\n", plain.stderr


def test_a_changed_bastion_key_is_refused_and_nothing_runs(cluster: Cluster) -> None:
    pinned = cluster.cli("ssh", *cluster.where, "0", "--", "true")  # both hops pinned
    assert pinned.returncode == 0, pinned.stderr
    before = cluster.runs_on_nodes()
    cluster.net.hosts.new_host_key(cluster.net.bastion)
    try:
        run = cluster.cli("run", *cluster.where, "job.py:main")
        assert run.returncode != 0, run.stdout + run.stderr
        said = f"bastion (the way in) ({cluster.net.bastion.address}:22) presented ssh-ed25519"
        assert said in run.stderr and "refusing the connection" in run.stderr, run.stderr
        assert cluster.runs_on_nodes() == before
        ssh = cluster.cli("ssh", *cluster.where, "1", "--", "true")
        assert ssh.returncode != 0 and "bastion (the way in)" in ssh.stderr, ssh.stderr
    finally:
        cluster.net.hosts.old_host_key(cluster.net.bastion)
