"""The node check that ends an AWS node's bootstrap (infra/scripts/check-node.py), for real on
this CPU-only machine: a topology that says the node has GPUs must make the bootstrap fail,
naming each framework and what it saw; a framework the plugins need that does not import
fails it too. The frameworks are the project's own (jax, torch, keras), shared into the node
venv with --inherit-site-packages as the local target does; the scripts are written beside
each other as the user data writes them (cloudinit.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from skyinfra import resources
from skyinfra.targets.aws.cloudinit import CHECK_SCRIPT
from skyinfra.wheel import build_runtime_wheel


def topology(plugins: list[dict[str, Any]], gpus: int | None) -> dict[str, Any]:
    accelerator = None if gpus is None else {"type": "A10G", "count": gpus}
    return {
        "schema": 1,
        "nodes": [{"index": 0, "name": "node-0", "accelerator": accelerator}],
        "plugins": plugins,
    }


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("scripts")
    for name in (resources.BOOTSTRAP_SCRIPT, CHECK_SCRIPT):
        path = folder / Path(name).name
        path.write_text(resources.read_text(name))
        path.chmod(0o755)
    return folder


def check(scripts: Path, tmp_path: Path, topo: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """check-node.py with this interpreter (the project's venv, where the frameworks are)."""
    path = tmp_path / "topology.json"
    path.write_text(json.dumps(topo))
    return subprocess.run(
        [sys.executable, str(scripts / "check-node.py"), str(path), "0"],
        capture_output=True,
        text=True,
    )


def test_bootstrap_fails_when_the_topology_claims_gpus(
    scripts: Path,
    tmp_path: Path,
    minimal_runtime_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A g5.12xlarge's topology (4 GPUs), plugin keras on jax, on a machine whose jax sees
    none: the bootstrap exits non-zero and says which framework saw how many."""
    wheel = build_runtime_wheel(minimal_runtime_dir, cache=tmp_path_factory.mktemp("wheels"))
    topo = tmp_path / "topology.json"
    topo.write_text(json.dumps(topology([{"name": "keras", "options": {}}], gpus=4)))
    done = subprocess.run(
        [
            "bash",
            str(scripts / "bootstrap-node.sh"),
            "--node-dir",
            str(tmp_path / "node"),
            "--python",
            sys.executable,
            "--wheel",
            str(wheel.path),
            "--inherit-site-packages",
            "--check-topology",
            str(topo),
            "--node-index",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0, done.stdout + done.stderr
    assert "sees 0 GPU(s) but this node has 4" in done.stderr
    assert "check-node: jax " in done.stderr  # keras's backend, counted through jax
    assert "check-node: keras 3." in done.stdout  # keras itself imported
    assert "bootstrap-node: node check failed" in done.stderr
    assert "bootstrap-node: ready" not in done.stdout


def test_frameworks_follow_the_plugins(scripts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Which modules the check imports (pure): keras brings its backend, none twice."""
    namespace: dict[str, Any] = {"__name__": "check_node"}
    exec(compile((scripts / "check-node.py").read_text(), "check-node.py", "exec"), namespace)
    # frameworks() sets KERAS_BACKEND for the imports that follow: restore it afterwards.
    monkeypatch.setenv("KERAS_BACKEND", "")
    monkeypatch.delenv("KERAS_BACKEND")
    frameworks = namespace["frameworks"]
    plugins = [{"name": "jax"}, {"name": "keras", "options": {"backend": "torch"}}]
    assert frameworks({"plugins": plugins}) == ["jax", "keras", "torch"]
    assert frameworks({"plugins": [{"name": "keras"}, {"name": "jax"}]}) == ["keras", "jax"]
    assert frameworks({"plugins": [{"name": "torch"}]}) == ["torch"]


def test_a_cpu_node_without_frameworks_passes(scripts: Path, tmp_path: Path) -> None:
    done = check(scripts, tmp_path, topology([], gpus=None))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_framework_that_does_not_import_fails(scripts: Path, tmp_path: Path) -> None:
    """keras on a backend whose package is missing here ("mlx"): keras's import fails, which
    is what a node without its framework looks like."""
    done = check(
        scripts, tmp_path, topology([{"name": "keras", "options": {"backend": "mlx"}}], gpus=0)
    )
    assert done.returncode == 3
    assert "check-node: keras does not import with Python 3." in done.stderr


def test_a_node_missing_from_the_topology_is_an_error(scripts: Path, tmp_path: Path) -> None:
    topo = topology([], gpus=None)
    topo["nodes"] = []
    done = check(scripts, tmp_path, topo)
    assert done.returncode == 2
    assert "node 0 is not in the topology" in done.stderr
