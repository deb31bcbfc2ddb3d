"""`skyinfra ssh` on the AWS target, to the tests' real sshd: two moto instances (their
consoles print the sshd's host key, as cloud-init prints a node's at first boot) stand in
for the nodes through SKYINFRA_AWS_EMULATED_NODES, each with a folder of its own as its root.
The system's ssh client runs, held to the key skyinfra pinned from the console; `--config`
writes a config block per node that plain `ssh -F` uses. No Terraform: the workspace is
written as `up` leaves it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from skyinfra.targets.aws.endpoints import EMULATED_NODES_ENV_VAR, ENDPOINT_ENV_VAR
from skyinfra.topology import Node, Topology
from skyinfra.transport.ssh import SshTarget
from tests.conftest import skyinfra_argv
from tests.support.aws_e2e import aws_workspace, skyinfra

pytestmark = pytest.mark.slow


def test_ssh_runs_a_command_and_writes_a_config_with_the_pinned_key(
    sshd: tuple[SshTarget, Path],
    ec2: Any,
    aws_env: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target, key = sshd
    import moto.ec2.responses.general as general

    host_key = " ".join((key.parent / "host_ed25519.pub").read_text().split()[:2])
    monkeypatch.setattr(
        general,
        "SAMPLE_CONSOLE_OUTPUT",
        "-----BEGIN SSH HOST KEY KEYS-----\n"
        f"{host_key} root@node\n-----END SSH HOST KEY KEYS-----\n",
    )
    image = ec2.describe_images()["Images"][0]["ImageId"]
    made = ec2.run_instances(ImageId=image, MinCount=2, MaxCount=2, InstanceType="t3.micro")
    ids = [i["InstanceId"] for i in made["Instances"]]
    ws, _ = aws_workspace(tmp_path, "emu", key, ssh_user=target.user)
    topology = Topology(
        cluster="emu",
        provider="aws",
        head_addr="10.42.0.10",
        head_port=29500,
        nodes=tuple(Node(i, f"node-{i}", f"10.42.0.{10 + i}", None, ids[i]) for i in (0, 1)),
    )
    ws.write_json(ws.topology_file, topology.to_dict())
    roots = {i: tmp_path / f"emulated-node-{i}" for i in (0, 1)}
    for root in roots.values():
        (root / "opt/skyinfra/node").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")}
    env[ENDPOINT_ENV_VAR] = aws_env
    env[EMULATED_NODES_ENV_VAR] = json.dumps(
        {
            f"node-{i}": {"ssh": f"{target.host}:{target.port}", "root": str(root)}
            for i, root in roots.items()
        }
    )
    where = ["--dir", str(ws.path.parent), "--cluster", "emu"]

    res = skyinfra(
        "ssh", *where, "1", "--", "echo node=$SKYINFRA_NODE; pwd;", "exit 3", cwd=tmp_path, env=env
    )
    assert res.returncode == 3, res.stdout + res.stderr
    assert res.stdout.splitlines() == ["node=1", str(roots[1] / "opt/skyinfra/node")]
    assert "matches the key it published on its console" in res.stderr
    pinned = (ws.path / "known_hosts").read_text()
    assert f"[{target.host}]:{target.port}" in pinned and host_key in pinned

    # No command: a login shell over ssh (here reading its commands from stdin).
    shell = subprocess.run(
        [*skyinfra_argv(), "ssh", *where, "emu-node-0"],
        cwd=tmp_path,
        env=env,
        input="echo hello from the shell\nexit 5\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.returncode == 5, shell.stdout + shell.stderr
    assert "hello from the shell" in shell.stdout

    out = skyinfra("ssh", *where, "node-2", "--", "true", cwd=tmp_path, env=env)
    assert out.returncode == 2 and "NODE 2: the cluster has nodes 0 to 1" in out.stderr

    config = skyinfra("ssh", *where, "--config", cwd=tmp_path, env=env)
    assert config.returncode == 0, config.stdout + config.stderr
    written = ws.path / "ssh_config"
    assert written.read_text() == config.stdout
    assert written.stat().st_mode & 0o777 == 0o600
    assert "Host emu-node-0" in config.stdout and "Host emu-node-1" in config.stdout
    assert "StrictHostKeyChecking yes" in config.stdout
    plain = subprocess.run(
        ["ssh", "-F", str(written), "emu-node-0", "echo via config"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert plain.returncode == 0 and plain.stdout == "via config\n", plain.stderr

    # A host key other than the pinned one: the system ssh refuses it (exit 255).
    (ws.path / "known_hosts").write_text(
        pinned.replace(
            host_key.split()[1],
            "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
        )
    )
    refused = skyinfra("ssh", *where, "0", "--", "true", cwd=tmp_path, env=env)
    assert refused.returncode == 1 and "refusing the connection" in refused.stderr, refused.stderr
    plain = subprocess.run(
        ["ssh", "-F", str(written), "emu-node-0", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert plain.returncode == 255 and "HOST IDENTIFICATION HAS CHANGED" in plain.stderr
