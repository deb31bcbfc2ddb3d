"""`skyinfra verify` end to end on one local 2-node cluster (torch plugin: the collective is a
gloo all-reduce on CPU): healthy passes every check; then node 1 is broken one way at a time
(and restored): each gives exit 7 naming node 1 and the check. A project's own check file
runs on every node and its failure is reported."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyinfra import exitcodes
from tests.conftest import skyinfra_argv
from tests.support.ports import free_port_pair

pytestmark = pytest.mark.slow

NAME = "vfy"


class Cluster:
    def __init__(self, project: Path, env: dict[str, str], head_port: int) -> None:
        self.project = project
        self.env = env
        self.head_port = head_port
        self.ws = project / ".skyinfra" / "clusters" / NAME

    def cli(self, *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*skyinfra_argv(), *args],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def verify(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.cli("verify", "--min-free-gb", "0.1", *args)

    def node(self, index: int) -> Path:
        return self.ws / "nodes" / f"node-{index}"

    def site_packages(self, index: int) -> Path:
        (found,) = self.node(index).glob("venv/lib/python*/site-packages")
        return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("verify")
    project = base / "project"
    project.mkdir()
    port = free_port_pair()
    (project / "skyinfra.toml").write_text(
        f'name = "{NAME}"\nnodes = 2\nplugins = ["torch"]\nhead_port = {port}\n'
    )
    # A project's own check: runs on every node through testinfra's `host`.
    (project / "verify").mkdir()
    (project / "verify" / "test_mine.py").write_text(
        "def test_node_dir_is_there(host):\n"
        "    assert host.file('.skyinfra-node').exists, 'no node marker'\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")}
    env["SKYINFRA_CACHE"] = str(base / "cache")
    made = Cluster(project, env, port)
    up = made.cli("up")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield made
    finally:
        down = made.cli("down", "--yes")
        assert down.returncode == 0, down.stdout + down.stderr


def failed(result: subprocess.CompletedProcess[str]) -> str:
    """The failures the command named (stderr), checked to be exit VERIFY_FAILED."""
    assert result.returncode == exitcodes.VERIFY_FAILED, result.stdout + result.stderr
    return result.stderr


def test_healthy_cluster_passes_every_check(cluster: Cluster) -> None:
    result = cluster.verify("--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["failures"] == []
    rows = {row["check"]: row["nodes"] for row in report["checks"]}
    for check in (
        "ready",
        "runtime",
        "topology",
        "python",
        "framework torch",
        "disk",
        "ports reachable",
        "collective",
        "verify/test_mine.py::test_node_dir_is_there",
    ):
        assert [rows[check][n]["status"] for n in ("node-0", "node-1")] == ["pass", "pass"], check
    # The head's ports are the head's; GPU checks do not apply to CPU nodes: n/a, not a pass.
    assert rows["ports free on head"]["node-0"]["status"] == "pass"
    assert rows["ports free on head"]["node-1"]["status"] == "n/a"
    for check in ("gpus visible", "efa", "nccl network", "idle timer"):
        assert {rows[check][n]["status"] for n in ("node-0", "node-1")} == {"n/a"}, check


def test_runtime_removed_from_node_1(cluster: Cluster) -> None:
    # What `pip uninstall` removes: the launcher script, the package and its metadata.
    site = cluster.site_packages(1)
    installed = [
        cluster.node(1) / "venv" / "bin" / "skyinfra-runtime",
        site / "skyinfra_runtime",
        *site.glob("skyinfra_runtime-*.dist-info"),
    ]
    aside = cluster.project.parent / "aside"
    aside.mkdir()
    for i, path in enumerate(installed):
        path.rename(aside / str(i))
    try:
        result = cluster.verify("-k", "runtime or collective")
        stderr = failed(result)
        assert "runtime on node-1: the runtime is not installed" in stderr
        assert "runtime on node-0" not in stderr
        # Node 1 cannot join: node 0 is ended at once (not after the rendezvous timeout)
        # and names it missing.
        assert "collective on node-1: could not start the runtime's launcher" in stderr
        assert "collective on node-0: missing: node 1; ended without a result" in stderr
        assert "✗" in result.stdout and "verify: FAILED" in result.stdout
    finally:
        for i, path in enumerate(installed):
            (aside / str(i)).rename(path)
        aside.rmdir()


def test_other_framework_version_on_node_1(cluster: Cluster) -> None:
    # A package named torch in node 1's own site-packages shadows the shared one.
    fake = cluster.site_packages(1) / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text('__version__ = "0.0.1"\n')
    (cluster.project / "entry.py").write_text(
        "from pathlib import Path\n\n\ndef main():\n    Path('/dev/null').exists()\n"
        f"    Path({str(cluster.project / 'started')!r}).touch()\n"
    )
    try:
        # `run --verify` gates the run: the checks fail, so the entry never starts.
        stderr = failed(cluster.cli("run", "--verify", "entry.py:main"))
        assert "framework torch on node-1: torch 0.0.1 here, but " in stderr
        assert "framework torch on node-0" not in stderr
        assert not (cluster.project / "started").exists()
        assert not (cluster.ws / "runs").exists() or not any((cluster.ws / "runs").iterdir())
    finally:
        shutil.rmtree(fake)


def test_head_port_held_by_another_process(cluster: Cluster) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, sys\n"
            "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind(('', int(sys.argv[1]))); s.listen()\n"
            "print('held', flush=True)\n"
            "while True:\n"
            "    c, _ = s.accept(); c.sendall(b'HTTP/1.0 200 OK\\r\\n'); c.close()\n",
            str(cluster.head_port + 1),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        stderr = failed(cluster.verify("-k", "ports"))
        assert f"ports free on head on node-0: port {cluster.head_port + 1} is already held" in (
            stderr
        )
        assert (
            f"ports reachable on node-1: torch port {cluster.head_port + 1}: 127.0.0.2:" in stderr
        )
        assert "not as verify's listener: another process holds the port" in stderr
    finally:
        holder.kill()
        holder.wait()


def test_corrupt_topology_on_node_1_and_a_failing_user_check(cluster: Cluster) -> None:
    topology = cluster.node(1) / "topology.json"
    # What `run` and `verify` put on a node: the workspace's copy. Read from there, not from the
    # node, which holds it only once an earlier test ran `verify` (random order found this).
    good = (cluster.ws / "topology.json").read_text()
    topology.write_text(good[: len(good) // 2])
    check = cluster.project / "verify" / "test_only_on_node_0.py"
    check.write_text(
        "def test_head_marker(host):\n"
        "    assert host.file('head-marker').exists, 'head-marker is missing here'\n"
    )
    (cluster.node(0) / "head-marker").write_text("")
    try:
        stderr = failed(cluster.verify("-k", "topology or test_head_marker"))
        assert "topology on node-1:" in stderr and "does not read" in stderr
        assert "topology on node-0" not in stderr
        assert (
            "verify/test_only_on_node_0.py::test_head_marker on node-1: "
            "head-marker is missing here" in stderr
        )
        assert "test_head_marker on node-0" not in stderr
    finally:
        topology.write_text(good)
        check.unlink()
        (cluster.node(0) / "head-marker").unlink()
