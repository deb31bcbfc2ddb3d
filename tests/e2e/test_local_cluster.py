"""End to end through the CLI, as a user runs it: up -> run -> down on the local target with
the real runtime (runtime/). Generous timeouts, no timed assertions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, skyinfra_argv

pytestmark = pytest.mark.slow

if not (REPO_ROOT / "runtime" / "src" / "skyinfra_runtime" / "launcher.py").is_file():
    pytest.skip(
        "the runtime (runtime/src/skyinfra_runtime/launcher.py) is not there yet",
        allow_module_level=True,
    )


def cli(
    args: list[str], cwd: Path, env: dict[str, str], timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*skyinfra_argv(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project folder holding the examples and a failing entrypoint."""
    proj = tmp_path / "project"
    shutil.copytree(REPO_ROOT / "examples", proj / "examples")
    (proj / "fail_on_node1.py").write_text(
        "import os, time\n\n\n"
        "def main():\n"
        "    if os.environ['SKYINFRA_NODE'] == '1':\n"
        "        raise RuntimeError('node 1 fails on purpose')\n"
        "    # node 0 would wait forever: only skyinfra ending it lets the run finish\n"
        "    while True:\n"
        "        time.sleep(1)\n"
    )
    (proj / ".skyinfraignore").write_text("big.bin\n")
    (proj / "big.bin").write_bytes(b"0" * 1024)
    return proj


def results(stdout: str, run_root: Path) -> list[dict[str, object]]:
    run_dirs = sorted(p for p in run_root.iterdir() if p.is_dir())
    summary = json.loads((run_dirs[-1] / "summary.json").read_text())
    return [w["value"] for n in summary["nodes"] for w in (n["result"] or {}).get("workers", [])]


@pytest.fixture
def cluster(
    project: Path, clean_env: dict[str, str], request: pytest.FixtureRequest
) -> Iterator[tuple[str, Path]]:
    plugins: list[str] = request.param
    name = "e2e"
    flags = [f for p in plugins for f in ("--plugin", p)]
    up = cli(["up", "--name", name, "--nodes", "2", *flags], project, clean_env)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield name, project
    finally:
        down = cli(["down", "--yes", "--cluster", name], project, clean_env)
        assert down.returncode == 0, down.stdout + down.stderr
        ws = project / ".skyinfra" / "clusters" / name
        assert not any((ws / "nodes").iterdir()), "node directories left after down"
        state = cli(["tf", "--cluster", name, "--", "state", "list"], project, clean_env)
        assert state.returncode == 0 and state.stdout.strip() == ""
        leftover = subprocess.run(
            ["pgrep", "-f", str(ws / "nodes")], capture_output=True, text=True
        )
        assert leftover.stdout.strip() == "", f"processes left: {leftover.stdout}"


@pytest.mark.parametrize("cluster", [["jax", "keras:backend=jax"]], indirect=True)
def test_keras_digits_same_weights_on_both_nodes(
    cluster: tuple[str, Path], clean_env: dict[str, str]
) -> None:
    name, project = cluster
    run = cli(["run", "--cluster", name, "examples/keras_digits.py:main"], project, clean_env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "[node-0]" in run.stdout or "node-0: ok" in run.stdout
    values = results(run.stdout, project / ".skyinfra" / "clusters" / name / "runs")
    assert sorted(v["node"] for v in values) == [0, 1]
    assert values[0]["weights_sha256"] == values[1]["weights_sha256"]
    assert all(float(v["accuracy"]) > 0.8 for v in values)  # type: ignore[arg-type]
    # .skyinfraignore kept big.bin off the nodes; the examples went.
    node0 = project / ".skyinfra" / "clusters" / name / "nodes" / "node-0" / "work"
    assert (node0 / "examples" / "keras_digits.py").is_file()
    assert not (node0 / "big.bin").exists()
    assert not (node0 / ".skyinfra").exists()


@pytest.mark.parametrize("cluster", [["torch"]], indirect=True)
def test_torch_ddp_same_weights_on_both_nodes(
    cluster: tuple[str, Path], clean_env: dict[str, str]
) -> None:
    name, project = cluster
    run = cli(["run", "--cluster", name, "examples/torch_ddp.py:main"], project, clean_env)
    assert run.returncode == 0, run.stdout + run.stderr
    values = results(run.stdout, project / ".skyinfra" / "clusters" / name / "runs")
    assert sorted(v["rank"] for v in values) == [0, 1]
    assert values[0]["weights_sha256"] == values[1]["weights_sha256"]


@pytest.mark.parametrize("cluster", [["jax"]], indirect=True)
def test_failure_on_node_1_ends_node_0(
    cluster: tuple[str, Path], clean_env: dict[str, str]
) -> None:
    name, project = cluster
    run = cli(["run", "--cluster", name, "--all-logs", "fail_on_node1.py:main"], project, clean_env)
    # One fixed code for "a node failed" (exitcodes.NODE_FAILED), not the node's own code;
    # the node's code and its meaning are in the message and in summary.json.
    assert run.returncode == 4, run.stdout + run.stderr
    assert "failed on node 1" in run.stderr
    assert "(node-1, exit 1: user code raised)" in run.stderr
    assert "node-1: failed (exit 1, user code raised)" in run.stdout
    assert "node-0: ended by skyinfra" in run.stdout
    ws = project / ".skyinfra" / "clusters" / name
    (run_dir,) = [p for p in (ws / "runs").iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["exit_code"], summary["first_failure"]) == (4, 1)
    node1 = summary["nodes"][1]
    assert (node1["exit_code"], node1["exit_meaning"]) == (1, "user code raised")
    assert summary["nodes"][0]["ended_by_skyinfra"] is True
    assert not list((ws / "nodes" / "node-0" / "pids").iterdir()), (
        "node 0's process is still recorded"
    )
    assert os.path.isdir(ws / "runs")


# Keras model parallelism written in skyinfra.toml (TOML has no null: "" is a replicated
# dimension), carried in topology.json as JSON, and applied by the runtime on both nodes.
MODEL_PARALLEL_SPEC = """
name = "mp"
nodes = 2
[[plugins]]
name = "jax"
options = { init_timeout = 60 }
[[plugins]]
name = "keras"
[plugins.options]
backend = "jax"
mesh_shape = [1, 2]
axis_names = ["batch", "model"]
layout_map = { ".*wide/kernel" = ["", "model"] }
"""


def test_keras_model_parallel_from_the_spec_file_splits_a_kernel(
    project: Path, clean_env: dict[str, str]
) -> None:
    (project / "skyinfra.toml").write_text(MODEL_PARALLEL_SPEC)
    shutil.copy(REPO_ROOT / "tests" / "runtime" / "entries" / "keras_model_parallel.py", project)
    ws = project / ".skyinfra" / "clusters" / "mp"
    up = cli(["up"], project, clean_env)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        keras = json.loads((ws / "topology.json").read_text())["plugins"][1]
        assert keras["options"]["layout_map"] == {".*wide/kernel": [None, "model"]}
        assert keras["options"]["mesh_shape"] == [1, 2]
        run = cli(["run", "keras_model_parallel.py:main"], project, clean_env)
        assert run.returncode == 0, run.stdout + run.stderr
        values = results(run.stdout, ws / "runs")
        assert len(values) == 2
        for value in values:
            assert value["distribution"] == "ModelParallel"
            assert value["kernel_spec"] == [None, "model"]
            assert value["global_shape"] == [8, 4]
            assert value["local_shard_shape"] == [8, 2]  # half of the columns on each node
        assert values[0]["kernel_sum"] == values[1]["kernel_sum"]
    finally:
        down = cli(["down", "--yes"], project, clean_env)
        assert down.returncode == 0, down.stdout + down.stderr
