"""Touch only what the user named: the CLI on real local clusters (real Terraform, real node
processes). Each covers a fault issue 8 reproduced on the code before this work: `down`
destroyed the only other cluster, `--cluster ../x` reached outside the clusters folder, `up`
removed nodes without asking, another spec file silently reshaped a cluster, two `up`s ran at
once, two clusters shared a head port, and the workspace was world-readable."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyinfra.workspace import Workspace
from tests.conftest import skyinfra_argv

pytestmark = pytest.mark.slow


@pytest.fixture
def env(clean_env: dict[str, str], minimal_runtime_dir: Path) -> dict[str, str]:
    # The Terraform and CLI layers are under test, not the runtime.
    return {**clean_env, "SKYINFRA_RUNTIME_DIR": str(minimal_runtime_dir)}


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "project"
    root.mkdir()
    yield root
    # Whatever a test left up goes down, so no node process outlives the test.
    clusters = root / ".skyinfra" / "clusters"
    for ws in sorted(clusters.iterdir()) if clusters.is_dir() else []:
        if (ws / "terraform.tfstate").is_file():
            skyinfra(["down", "--yes", "--cluster", ws.name], root, {**os.environ})


def skyinfra(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*skyinfra_argv(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def up(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    proc = skyinfra(["up", *args], project, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


def test_down_acts_only_on_the_named_cluster(project: Path, env: dict[str, str]) -> None:
    up(project, env, "--name", "other", "--nodes", "1")
    (project / "skyinfra.toml").write_text('name = "train"\nnodes = 1\n')
    before = tree(project / ".skyinfra")
    proc = skyinfra(["down", "--yes"], project, env)  # skyinfra.toml names train: not up
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no cluster named 'train'" in proc.stderr and "clusters there: other" in proc.stderr
    assert tree(project / ".skyinfra") == before  # `other` untouched
    (project / "skyinfra.toml").unlink()
    proc = skyinfra(["down", "--yes"], project, env)  # no name at all: no fallback either
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "which cluster? name it with --cluster NAME" in proc.stderr
    # A read-only command may fall back to the only cluster, and says so on stderr.
    status = skyinfra(["status", "--json"], project, env)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state"] == "up"
    assert "cluster 'other': the only one in" in status.stderr


@pytest.mark.parametrize("name", ["../other/.skyinfra/clusters/x", "/etc", "X", "a-"])
def test_cluster_names_are_checked_everywhere(
    project: Path, env: dict[str, str], name: str
) -> None:
    for command in (
        ["tf", "--cluster", name, "--", "state", "list"],
        ["status", "--cluster", name],
    ):
        proc = skyinfra(command, project, env)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "invalid value for --cluster: got" in proc.stderr


def test_down_off_a_terminal_needs_yes(project: Path, env: dict[str, str]) -> None:
    up(project, env, "--name", "keep", "--nodes", "1")
    proc = skyinfra(["down", "--cluster", "keep"], project, env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "`down` would destroy" in proc.stderr and "pass --yes" in proc.stderr
    assert (project / ".skyinfra/clusters/keep/nodes/node-0/.skyinfra-node").is_file()


def test_up_that_removes_nodes_shows_them_and_asks(project: Path, env: dict[str, str]) -> None:
    up(project, env, "--name", "shrink", "--nodes", "2")
    ws = project / ".skyinfra/clusters/shrink"
    proc = skyinfra(["up", "--name", "shrink", "--nodes", "1"], project, env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "this would destroy or replace" in proc.stdout
    node_1 = 'module.nodes.terraform_data.node["node-1"]'
    assert f"destroy {node_1}: the cluster no longer has it (fewer nodes)" in proc.stdout
    assert "nothing was changed" in proc.stderr
    assert (ws / "nodes/node-1/.skyinfra-node").is_file()
    assert len(json.loads((ws / "topology.json").read_text())["nodes"]) == 2
    assert not (ws / "skyinfra.tfplan").exists()  # the refused plan is not left behind
    up(project, env, "--name", "shrink", "--nodes", "1", "--yes")
    assert not (ws / "nodes/node-1").exists()


def test_up_again_keeps_what_was_applied(project: Path, env: dict[str, str]) -> None:
    """The README's "run the same command again" as a bare `up --name X` (issue 42, item 4)
    planned to destroy node-1 and drop the plugins, and `--yes` did it. A field that neither a
    flag nor the spec file gives now keeps its applied value, said in a line; a flag changes it.
    """
    up(project, env, "--name", "kept", "--nodes", "2", "--procs-per-node", "2", "--plugin", "jax")
    ws = project / ".skyinfra/clusters/kept"

    def applied() -> dict[str, object]:
        spec: dict[str, object] = json.loads((ws / "spec.json").read_text())
        return {key: spec[key] for key in ("nodes", "procs_per_node", "plugins")}

    made = applied()
    how = "from the applied cluster (change it with {} or skyinfra.toml)"
    again = up(project, env, "--name", "kept", "--yes")
    assert f"kept nodes = 2 {how.format('--nodes')}" in again.stdout
    assert f"kept procs_per_node = 2 {how.format('--procs-per-node')}" in again.stdout
    assert f'kept plugins = ["jax"] {how.format("--plugin")}' in again.stdout
    assert "no changes: the cluster already matches the spec" in again.stdout
    assert applied() == made and (ws / "nodes/node-1/.skyinfra-node").is_file()
    plan = skyinfra(["plan", "--name", "kept"], project, env)  # plans what `up` would apply
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "kept nodes = 2" in plan.stdout
    # A spec file that leaves the fields out keeps them the same way.
    (project / "skyinfra.toml").write_text('name = "kept"\n')
    again = up(project, env, "--yes")
    assert "kept nodes = 2" in again.stdout and "no changes" in again.stdout
    # A flag changes its field; the others are still kept.
    fewer = up(project, env, "--nodes", "1", "--yes")
    assert "kept nodes" not in fewer.stdout and 'kept plugins = ["jax"]' in fewer.stdout
    assert applied() == {**made, "nodes": 1} and not (ws / "nodes/node-1").exists()


def test_another_spec_file_cannot_reshape_a_cluster(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    shared = tmp_path / "shared-clusters"
    (project / "skyinfra.toml").write_text('name = "team"\nnodes = 1\n')
    up(project, env, "--dir", str(shared))
    elsewhere = tmp_path / "other-project"
    elsewhere.mkdir()
    (elsewhere / "skyinfra.toml").write_text('name = "team"\nnodes = 2\n')
    proc = skyinfra(["up", "--dir", str(shared), "--yes"], elsewhere, env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"was made from {project / 'skyinfra.toml'}" in proc.stderr
    assert "--adopt" in proc.stderr
    assert len(json.loads((shared / "team/topology.json").read_text())["nodes"]) == 1
    skyinfra(["down", "--yes", "--dir", str(shared)], project, env)


def test_one_operation_at_a_time(project: Path, env: dict[str, str]) -> None:
    up(project, env, "--name", "busy", "--nodes", "1")
    ws = Workspace(project / ".skyinfra/clusters/busy")
    with ws.lock("run train.py:main"):
        proc = skyinfra(["up", "--name", "busy", "--nodes", "1"], project, env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "cluster 'busy' is busy: `skyinfra run train.py:main` (pid " in proc.stderr
    assert "terraform" not in proc.stdout


def test_local_clusters_cannot_share_a_head_port(project: Path, env: dict[str, str]) -> None:
    up(project, env, "--name", "first", "--nodes", "1")
    proc = skyinfra(["up", "--name", "second", "--nodes", "1"], project, env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cluster 'first'" in proc.stderr and "is up on 29500-29501" in proc.stderr
    assert not (project / ".skyinfra/clusters/second").exists()
    with socket.socket() as taken:
        taken.bind(("127.0.0.2", 0))  # the head's address (jax's coordinator binds only it)
        taken.listen()
        port = taken.getsockname()[1]
        (project / "third.toml").write_text(f'name = "third"\nhead_port = {port}\n')
        proc = skyinfra(["up", "--spec", "third.toml"], project, env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{port} is in use on this machine" in proc.stderr


def test_workspace_is_private(project: Path, env: dict[str, str]) -> None:
    up(project, env, "--name", "private", "--nodes", "1")
    ws = project / ".skyinfra/clusters/private"
    assert stat.S_IMODE(ws.stat().st_mode) == 0o700
    for name in ("spec.json", "topology.json", "terraform.tfvars.json", "terraform.tfstate"):
        assert stat.S_IMODE((ws / name).stat().st_mode) == 0o600, name
