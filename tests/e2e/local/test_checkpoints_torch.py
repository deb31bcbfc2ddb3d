"""torch DDP checkpoints that outlive a killed worker, end to end on one 2-node local cluster
(torch plugin, gloo on CPU, shared by the module): examples/torch_resume.py with
`torch.distributed.checkpoint` and with `torch.save` from rank 0 on $SKYINFRA_CHECKPOINT_DIR;
node 1's worker is SIGKILLed in the middle of epoch 3, a fresh job on the same `--checkpoints`
set resumes from the end of epoch 2 and ends with weights bit-identical (sha256) to an
uninterrupted run's; a half-written checkpoint (DCP without `.metadata`, torch.save without
its COMMITTED mark) is ignored; with `run --max-restarts 1` the same job resumes by itself
(attempt 2), bit-identical too. Real processes only."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.local_jobs import cli, cluster_up, module_env
from tests.support.resume_proof import (
    kill_node_1_in_epoch_3,
    lose_node_1,
    pausing_entry,
    reference_sha256,
    restarted_after_kill,
    results,
)

pytestmark = pytest.mark.slow

NAME = "ckpt-torch"
SPEC = f"""\
name = "{NAME}"
nodes = 2
plugins = ["torch"]
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> dict[str, str]:
    return module_env(tmp_path_factory, tf_plugin_cache, "ckpt-torch")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Path]:
    proj = tmp_path_factory.mktemp("ckpt-torch-project")
    (proj / "skyinfra.toml").write_text(SPEC)
    (proj / "train.py").write_text(pausing_entry("torch_resume"))
    shutil.copy(REPO_ROOT / "examples" / "torch_resume.py", proj / "torch_resume.py")
    with cluster_up(proj, env, NAME):
        yield proj


def workspace(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME


@pytest.fixture(scope="module")
def reference(project: Path, env: dict[str, str]) -> str:
    """The uninterrupted run's final weights (how it checkpoints does not change them)."""
    return reference_sha256(project, env, workspace(project))


@pytest.mark.parametrize(
    ("saver", "marker", "half_file"),
    [("dcp", ".metadata", "__0_0.distcp"), ("torch-save", "COMMITTED", "state.pt")],
)
def test_a_killed_ddp_run_resumes_from_its_last_epoch_bit_identical(
    project: Path, env: dict[str, str], reference: str, saver: str, marker: str, half_file: str
) -> None:
    name = f"resume-{saver}"
    kill_node_1_in_epoch_3(
        project, env, workspace(project), name, ["train.py:main", "--", "--saver", saver]
    )
    steps = workspace(project) / "checkpoints" / name
    complete = sorted(p.parent.name for p in steps.glob(f"step-*/{marker}"))
    assert complete == ["step-00000001", "step-00000002"], complete
    half = steps / "step-00000099"  # newer than any, its commit marker missing: ignored
    half.mkdir()
    (half / half_file).write_bytes(b"half-written")

    run = cli(["run", "--checkpoints", name, "train.py:main", "--", "--saver", saver], project, env)
    values = results(workspace(project), run)
    assert f"resumed from {steps / 'step-00000002'} (epoch 2)" in run.stdout, run.stdout
    assert "epoch 2 begins" not in run.stdout and "epoch 3 begins" in run.stdout
    assert {v["resumed_epoch"] for v in values} == {2}
    assert {v["weights_sha256"] for v in values} == {reference}


def test_a_killed_ddp_job_restarts_by_itself_and_ends_bit_identical(
    project: Path, env: dict[str, str], reference: str
) -> None:
    name = "restart-dcp"
    run, summary = restarted_after_kill(
        project, env, workspace(project), name, ["train.py:main", "--", "--saver", "dcp"]
    )
    assert run.returncode == 0, run.stdout
    attempts = summary["attempts"]
    assert isinstance(attempts, list) and [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[0]["cause"]["kind"] == "signal", attempts
    assert "killed by signal SIGKILL" in attempts[0]["cause"]["meaning"], attempts
    assert attempts[1]["outcome"] == "succeeded" and attempts[1]["recovery_s"] >= 0
    resumed_from_epoch_2_bit_identical(project, name, run.stdout, summary, reference)
    print(f"attempts: {attempts}")


def resumed_from_epoch_2_bit_identical(
    project: Path, name: str, stdout: str, summary: dict[str, object], reference: str
) -> None:
    """Attempt 2 resumed from the end of epoch 2 on every node and ended with the
    uninterrupted run's weights."""
    steps = workspace(project) / "checkpoints" / name
    assert f"resumed from {steps / 'step-00000002'} (epoch 2)" in stdout, stdout
    values = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]  # type: ignore[attr-defined]
    assert {v["resumed_epoch"] for v in values} == {2}
    assert {v["weights_sha256"] for v in values} == {reference}


def test_a_lost_node_is_replaced_by_the_attached_run_and_the_job_ends_bit_identical(
    project: Path, env: dict[str, str], reference: str
) -> None:
    name = "lost-node"
    run, summary = restarted_after_kill(
        project,
        env,
        workspace(project),
        name,
        ["train.py:main", "--", "--saver", "dcp"],
        lose=lose_node_1,
    )
    assert run.returncode == 0, run.stdout
    assert "node-1 lost: replacing it" in run.stdout, run.stdout
    # Node 0's log goes on where it was: attempt 1's lines are not shown twice.
    assert run.stdout.count("[node-0] epoch 1 batch 1 ") == 1, run.stdout
    assert 'replacing broken node(s): module.nodes.terraform_data.node["node-1"]' in run.stdout
    attempts = summary["attempts"]
    assert isinstance(attempts, list) and [a["attempt"] for a in attempts] == [1, 2], attempts
    assert attempts[0]["cause"]["kind"] == "lost" and attempts[0]["cause"]["node"] == 1
    assert attempts[1]["outcome"] == "succeeded" and attempts[1]["recovery_s"] >= 0
    resumed_from_epoch_2_bit_identical(project, name, run.stdout, summary, reference)
    print(f"attempts: {attempts}")
