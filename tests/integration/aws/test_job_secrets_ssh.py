"""A job's token, env and secrets over SSH (the AWS transport) against the tests' real sshd:
two stand-in nodes in folders of this machine, `run` as a job (skyinfra.run.session), and
every place a secret could land searched for a planted value.

Before the fix, the per-job token went in the environment, which over SSH meant
``export SKYINFRA_JOB_TOKEN=...`` in the command the node's shell runs (its command line,
readable by every user of the node in /proc while the shell starts); the test reads every
command the transport sent and every node process's command line while the job runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import paramiko
import pytest

from skyinfra.run.jobenv import JobEnv
from skyinfra.run.launch import ClusterNodes, JobLaunch
from skyinfra.run.session import run_on_cluster
from skyinfra.targets.aws.cloudinit import READY_MARKER
from skyinfra.targets.aws.readiness import CLOUD_INIT_PROBE
from skyinfra.topology import Node, Topology
from skyinfra.transport.ssh import SshKeys, SshTarget, SshTransport
from tests.conftest import VENV_BIN

TOKEN = "70c3e2d1a9b84f56e0d1c2b3a4958677"  # what the job's token will be (patched below)
SECRET = "planted-secret-" + "5f1e9c0b7a3d"
ENTRY = """\
import hashlib, os, time


def main():
    secret = os.environ["PLANTED_SECRET"]
    print("the secret is", secret, flush=True)
    time.sleep(2)  # long enough for the test to read every process's command line
    return {
        "node": int(os.environ["SKYINFRA_NODE"]),
        "env": os.environ.get("FROM_ENV"),
        "secret_sha256": hashlib.sha256(secret.encode()).hexdigest(),
        "token_in_env": any("TOKEN" in k and k.startswith("SKYINFRA") for k in os.environ),
    }
"""


def scan_processes(needles: list[bytes], stop: threading.Event, found: list[str]) -> None:
    """Every process's command line, and its environment for the token, until ``stop``."""
    while not stop.is_set():
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                cmd = (entry / "cmdline").read_bytes()
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            for needle in needles:
                if needle in cmd:
                    found.append(f"cmdline of {entry.name}: {cmd[:200]!r}")
            if TOKEN.encode() in environ:
                found.append(f"environment of {entry.name}: {cmd[:200]!r}")
        stop.wait(0.05)


def files_holding(root: Path, value: str) -> list[str]:
    """Every file under ``root`` whose bytes hold ``value`` (links not followed)."""
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            if not path.is_symlink() and value.encode() in path.read_bytes():
                found.append(str(path))
    return found


@pytest.fixture
def nodes(sshd: tuple[SshTarget, Path], tmp_path: Path) -> Iterator[tuple[SshTransport, Path]]:
    """Two nodes behind the real sshd, each under its own root (as emulated AWS nodes are),
    with the test's venv (the runtime installed) as the node's venv; both ready."""
    target, key = sshd
    roots = {i: tmp_path / f"node-root-{i}" for i in (0, 1)}
    for root in roots.values():
        node_dir = root / "opt" / "skyinfra" / "node"
        node_dir.mkdir(parents=True)
        (node_dir / "venv").symlink_to(VENV_BIN.parent)
        ready = root / READY_MARKER.lstrip("/")
        ready.parent.mkdir(parents=True)
        ready.write_text("ready\n")
    ssh = SshTransport(
        {i: SshTarget(target.host, target.user, target.port, str(r)) for i, r in roots.items()},
        keys=SshKeys(key, tmp_path / "known_hosts"),
        probe=replace(CLOUD_INIT_PROBE, cloud_init_status=None),
    )
    yield ssh, tmp_path
    ssh.close()


def test_token_and_secrets_travel_on_stdin_and_are_written_nowhere(
    nodes: tuple[SshTransport, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ssh, base = nodes
    real_token_hex = secrets.token_hex
    monkeypatch.setattr(
        secrets, "token_hex", lambda n=None: TOKEN if n == 16 else real_token_hex(n)
    )
    sent: list[str] = []
    real_exec = SshTransport._exec

    def recording_exec(self: SshTransport, node: int, command: str) -> paramiko.Channel:
        sent.append(command)
        return real_exec(self, node, command)

    monkeypatch.setattr(SshTransport, "_exec", recording_exec)
    topology = Topology(
        cluster="sec",
        provider="aws",
        head_addr="127.0.0.1",
        head_port=29500,
        nodes=tuple(Node(i, f"node-{i}", "127.0.0.1", None, f"i-{i}") for i in (0, 1)),
    )
    topology_file = base / "workspace" / "topology.json"
    topology_file.parent.mkdir()
    topology_file.write_text(json.dumps(topology.to_dict()))
    src = base / "project"
    src.mkdir()
    (src / "probe.py").write_text(ENTRY)

    stop, seen = threading.Event(), []
    scanner = threading.Thread(
        target=scan_processes, args=([TOKEN.encode(), SECRET.encode()], stop, seen), daemon=True
    )
    scanner.start()
    try:
        report = run_on_cluster(
            JobLaunch(
                entry="probe.py:main",
                src=src,
                all_logs=True,
                as_job=True,
                job_env=JobEnv(env={"FROM_ENV": "plain value"}, secrets={"PLANTED_SECRET": SECRET}),
            ),
            ClusterNodes(ssh, topology, topology_file, base / "workspace" / "runs"),
            echo=lambda line: sent.append(f"echo: {line}"),
        )
    finally:
        stop.set()
        scanner.join(5)

    assert [o.exit_code for o in report.outcomes.values()] == [0, 0]
    values = [o.result["workers"][0]["value"] for o in report.outcomes.values()]  # type: ignore[index]
    sha = hashlib.sha256(SECRET.encode()).hexdigest()
    assert [(v["node"], v["env"], v["secret_sha256"]) for v in values] == [
        (0, "plain value", sha),
        (1, "plain value", sha),
    ]
    assert not any(v["token_in_env"] for v in values)  # the job's code never sees the token
    # Nothing the node's shell was told holds the token or the secret (the fix's point).
    supervise = [c for c in sent if "supervise" in c]
    assert len(supervise) == 2 and all("--private-stdin" in c for c in supervise)
    assert not [c for c in sent if TOKEN in c or SECRET in c]
    assert seen == [], seen
    # The job's own output printed it: masked where the node keeps it, and in what came back.
    log = base / "node-root-1" / "opt/skyinfra/node/runs" / report.run_id / "output.log"
    assert "the secret is ***" in log.read_text()
    record = json.loads((report.run_dir / "job.json").read_text())
    assert (record["env"], record["secrets"]) == ({"FROM_ENV": "plain value"}, ["PLANTED_SECRET"])
    # Operator's workspace, both node folders (logs, records, pids, run copies), known_hosts.
    assert files_holding(base, SECRET) == []
    record_file = base / "node-root-0/opt/skyinfra/node/jobs" / f"{report.run_id}.json"
    assert record_file.stat().st_mode & 0o077 == 0
