"""`skyinfra verify` over SSH (testinfra's paramiko backend on the SSH transport's own
connection) against a real sshd on 127.0.0.1: two nodes, each a folder whose venv is this
Python's, with a project check file; a host key other than the pinned one is refused."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from skyinfra.errors import HostKeyChangedError
from skyinfra.targets.aws.readiness import CLOUD_INIT_PROBE
from skyinfra.transport.ssh import SshKeys, SshTarget, SshTransport
from skyinfra.verify import operator_runtime_version
from skyinfra.verify.context import Expectations
from skyinfra.verify.hosts import PinnedParamikoBackend, node_host
from skyinfra.verify.runner import run_verify
from tests.support.ports import free_port_pair
from tests.support.topologies import local_topology


@pytest.fixture
def cluster(sshd: tuple[SshTarget, Path], tmp_path: Path) -> Iterator[tuple[SshTransport, Path]]:
    target, key = sshd
    targets = {}
    for i in (0, 1):
        root = tmp_path / f"n{i}"
        (root / "node").mkdir(parents=True)
        (root / "node" / "venv").symlink_to(sys.prefix)  # this Python, with the runtime
        targets[i] = dataclasses.replace(target, root=str(root))
    transport = SshTransport(
        targets,
        keys=SshKeys(key, tmp_path / "known_hosts"),
        node_root="/node",
        probe=CLOUD_INIT_PROBE,
    )
    yield transport, tmp_path
    transport.close()


def test_checks_run_on_every_node_over_ssh(cluster: tuple[SshTransport, Path]) -> None:
    transport, tmp = cluster
    topology = dataclasses.replace(local_topology(2), head_port=free_port_pair())
    topology_file = tmp / "topology.json"
    topology_file.write_text(json.dumps(topology.to_dict()))
    project = tmp / "project"
    (project / "verify").mkdir(parents=True)
    (project / "verify" / "test_own.py").write_text(
        "def test_shell_runs(host):\n"
        "    assert host.run('true').rc == 0\n"
        "\n"
        "def test_wants_a_file(host):\n"
        "    assert host.file('/nonexistent-skyinfra').exists, 'the file is missing'\n"
    )
    report = run_verify(
        transport,
        topology,
        Expectations(runtime_version=operator_runtime_version(), min_free_bytes=1),
        topology_file=topology_file,
        project=project,
        select="not collective",
    )
    cells = {(r.check, r.node): (r.status, r.reason) for r in report.results}
    for check in ("runtime", "topology", "python", "disk", "ports reachable"):
        for node in (0, 1):
            assert cells[check, node] == ("pass", ""), (check, node, cells[check, node])
    assert cells["ports free on head", 0][0] == "pass"
    # The project's own checks ran on both nodes; the failing one is reported with its reason.
    for node in (0, 1):
        assert cells["verify/test_own.py::test_shell_runs", node] == ("pass", "")
        assert cells["verify/test_own.py::test_wants_a_file", node] == (
            "fail",
            "the file is missing",
        )
    # The topology reached each node over SFTP, where `run` puts it.
    assert (tmp / "n1" / "node" / "topology.json").is_file()
    # testinfra speaks over the transport's own connection: the host key was pinned.
    assert (tmp / "known_hosts").read_text().startswith("[127.0.0.1]:")
    host = node_host(transport, 1, "node-1")
    assert isinstance(host.backend, PinnedParamikoBackend)
    assert host.backend.client is transport.ssh_client(1)


def test_a_changed_host_key_is_refused(cluster: tuple[SshTransport, Path]) -> None:
    transport, tmp = cluster
    target = transport._targets[0]
    other = paramiko.Ed25519Key.from_private_key_file(str(transport._key_path))
    known = paramiko.HostKeys()
    known.add(f"[{target.host}]:{target.port}", other.get_name(), other)
    known.save(str(tmp / "known_hosts"))
    topology = dataclasses.replace(local_topology(2), head_port=free_port_pair())
    topology_file = tmp / "topology.json"
    topology_file.write_text(json.dumps(topology.to_dict()))
    with pytest.raises(HostKeyChangedError, match="host key changed"):
        run_verify(
            transport,
            topology,
            Expectations(runtime_version=operator_runtime_version()),
            topology_file=topology_file,
            select="runtime",
        )
