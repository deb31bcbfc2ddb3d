"""torch DDP checkpoints that outlive a killed worker, end to end on one 2-node local cluster
(torch plugin, gloo on CPU, shared by the module): examples/torch_resume.py with
`torch.distributed.checkpoint` and with `torch.save` from rank 0 on $SKYINFRA_CHECKPOINT_DIR;
node 1's worker is SIGKILLed in the middle of epoch 3, a fresh job on the same `--checkpoints`
set resumes from the end of epoch 2 and ends with weights bit-identical (sha256) to an
uninterrupted run's; a half-written checkpoint (DCP without `.metadata`, torch.save without
its COMMITTED mark) is ignored. Real processes only."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, skyinfra_argv
from tests.support.workers import wait_for_line, worker_pid

pytestmark = pytest.mark.slow

NAME = "ckpt-torch"
SPEC = f"""\
name = "{NAME}"
nodes = 2
plugins = ["torch"]
"""
# The example, plus a pause: with PAUSE_AT=NODE:EPOCH:BATCH that node's worker stops once it
# has printed that batch's line (the step ran) and says so, for the test to kill it there.
TRAIN = """\
import builtins, os, time

import torch_resume


def _pausing_print(*args, **kwargs):
    builtins.print(*args, **kwargs)
    pause = os.environ.get("PAUSE_AT", "")
    if pause:
        node, epoch, batch = pause.split(":")
        line = " ".join(str(a) for a in args)
        if node == os.environ["SKYINFRA_NODE"] and line.startswith(f"epoch {epoch} batch {batch} "):
            builtins.print(f"paused at epoch {epoch} batch {batch}", flush=True)
            time.sleep(300)


def main():
    torch_resume.print = _pausing_print
    return torch_resume.main()
"""


def cli(
    args: list[str], cwd: Path, env: dict[str, str], timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*skyinfra_argv(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    cache = tmp_path_factory.mktemp("ckpt-torch-cache")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")}
    env["SKYINFRA_CACHE"] = str(cache / "cache")
    env["SKYINFRA_TF_PLUGIN_CACHE"] = str(cache / "tf-plugins")
    return env


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Path]:
    proj = tmp_path_factory.mktemp("ckpt-torch-project")
    (proj / "skyinfra.toml").write_text(SPEC)
    (proj / "train.py").write_text(TRAIN)
    shutil.copy(REPO_ROOT / "examples" / "torch_resume.py", proj / "torch_resume.py")
    up = cli(["up"], proj, env)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield proj
    finally:
        down = cli(["down", "--yes", "--cluster", NAME], proj, env)
        assert down.returncode == 0, down.stdout + down.stderr


def workspace(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME


def results(project: Path, run: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    assert run.returncode == 0, run.stdout + run.stderr
    run_dir = max((workspace(project) / "runs").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    return [n["result"]["workers"][0]["value"] for n in summary["nodes"]]


@pytest.fixture(scope="module")
def reference(project: Path, env: dict[str, str]) -> str:
    """The uninterrupted run's final weights (how it checkpoints does not change them)."""
    values = results(project, cli(["run", "--checkpoints", "ref", "train.py:main"], project, env))
    shas = {v["weights_sha256"] for v in values}
    assert len(shas) == 1 and {v["resumed_epoch"] for v in values} == {None}
    return str(shas.pop())


def kill_in_epoch_3(project: Path, env: dict[str, str], name: str, saver: str) -> None:
    res = cli(
        ["run", "-d", "--checkpoints", name, "--env", "PAUSE_AT=1:3:4",
         "train.py:main", "--", "--saver", saver],
        project,
        env,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    job = res.stdout.split("job ", 1)[1].split()[0]
    log = workspace(project) / "nodes" / "node-1" / "runs" / job / "output.log"
    wait_for_line(log, "paused at epoch 3 batch 4")
    pid = worker_pid(job, 1)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    ended = cli(["logs", job, "--follow", "--all", "--tail", "5"], project, env)
    assert ended.returncode == 4, ended.stdout + ended.stderr
    assert "killed by signal SIGKILL" in ended.stdout


@pytest.mark.parametrize(
    ("saver", "marker", "half_file"),
    [("dcp", ".metadata", "__0_0.distcp"), ("torch-save", "COMMITTED", "state.pt")],
)
def test_a_killed_ddp_run_resumes_from_its_last_epoch_bit_identical(
    project: Path, env: dict[str, str], reference: str, saver: str, marker: str, half_file: str
) -> None:
    name = f"resume-{saver}"
    kill_in_epoch_3(project, env, name, saver)
    steps = workspace(project) / "checkpoints" / name
    complete = sorted(p.parent.name for p in steps.glob(f"step-*/{marker}"))
    assert complete == ["step-00000001", "step-00000002"], complete
    half = steps / "step-00000099"  # newer than any, its commit marker missing: ignored
    half.mkdir()
    (half / half_file).write_bytes(b"half-written")

    run = cli(["run", "--checkpoints", name, "train.py:main", "--", "--saver", saver], project, env)
    values = results(project, run)
    assert f"resumed from {steps / 'step-00000002'} (epoch 2)" in run.stdout, run.stdout
    assert "epoch 2 begins" not in run.stdout and "epoch 3 begins" in run.stdout
    assert {v["resumed_epoch"] for v in values} == {2}
    assert {v["weights_sha256"] for v in values} == {reference}
