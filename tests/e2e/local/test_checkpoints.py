"""Checkpoints that outlive a killed worker, end to end on one 2-node local cluster (Keras on
JAX, CPU, shared by the module): $SKYINFRA_CHECKPOINT_DIR on every worker, an uninterrupted
run, a run whose node-1 worker is SIGKILLed in the middle of epoch 3, and a fresh job on the
same `--checkpoints` set that resumes from the end of epoch 2 and ends with weights
bit-identical (sha256) to the uninterrupted run's; a half-written step is ignored; with
`run --max-restarts 1` the killed job resumes by itself (attempt 2), bit-identical too, and
so does one whose node 1 is lost (its folder deleted, its processes gone: `run` replaces it);
`skyinfra checkpoints` lists and deletes sets; `down` keeps them. Real processes only."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.local_jobs import cli, module_env
from tests.support.resume_proof import (
    kill_node_1_in_epoch_3,
    lose_node_0,
    lose_node_1,
    restarted_after_kill,
)
from tests.support.resume_proof import results as run_results

pytestmark = pytest.mark.slow

NAME = "ckpt"
SPEC = f"""\
name = "{NAME}"
nodes = 2
plugins = ["jax", "keras:backend=jax"]
"""
# The example, plus a pause: with PAUSE_AT=NODE:EPOCH:BATCH that node's worker stops after
# that batch (its loss printed, so the step ran) and says so, for the test to kill it there.
TRAIN = """\
import os, sys, time


def main():
    import keras
    import keras_resume

    pause = os.environ.get("PAUSE_AT")
    node = int(os.environ["SKYINFRA_NODE"])
    # Attempt 1 only: a job restarted by itself (--max-restarts) runs on.
    if pause and int(pause.split(":")[0]) == node and os.environ["SKYINFRA_ATTEMPT"] == "1":
        _, epoch_at, batch_at = (int(p) for p in pause.split(":"))

        class Pause(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                self.epoch = epoch + 1

            def on_train_batch_end(self, batch, logs=None):
                if (self.epoch, batch + 1) == (epoch_at, batch_at):
                    print(f"paused at epoch {epoch_at} batch {batch_at}", flush=True)
                    time.sleep(300)

        fit = keras.Model.fit
        keras.Model.fit = lambda self, *a, callbacks=(), **k: fit(
            self, *a, callbacks=[*callbacks, Pause()], **k
        )
    return keras_resume.main()


def where():
    return os.environ["SKYINFRA_CHECKPOINT_DIR"]
"""
STEP_EPOCH_2 = "step-00000016"  # 128 samples per node, batches of 16: 8 steps an epoch


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> dict[str, str]:
    return module_env(tmp_path_factory, tf_plugin_cache, "ckpt")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Path]:
    proj = tmp_path_factory.mktemp("ckpt-project")
    (proj / "skyinfra.toml").write_text(SPEC)
    (proj / "train.py").write_text(TRAIN)
    shutil.copy(REPO_ROOT / "examples" / "keras_resume.py", proj / "keras_resume.py")
    up = cli(["up"], proj, env)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield proj
    finally:
        # A node folder deleted (a lost node) takes none of the sets with it.
        shutil.rmtree(proj / ".skyinfra" / "clusters" / NAME / "nodes" / "node-1")
        assert (sets_dir(proj) / "resume").is_dir()
        down = cli(["down", "--yes", "--cluster", NAME], proj, env)
        assert down.returncode == 0, down.stdout + down.stderr
        # down keeps the sets, and says where and how much
        assert "checkpoint set(s) in" in down.stdout, down.stdout
        assert (sets_dir(proj) / "resume").is_dir()


def sets_dir(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME / "checkpoints"


def results(project: Path, run: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    return run_results(project / ".skyinfra" / "clusters" / NAME, run)


def test_every_worker_gets_the_jobs_own_directory_by_default(
    project: Path, env: dict[str, str]
) -> None:
    values = results(project, cli(["run", "train.py:where"], project, env))
    job = max((project / ".skyinfra" / "clusters" / NAME / "runs").iterdir()).name
    assert values == [str(sets_dir(project) / job)] * 2
    shown = cli(["jobs", job], project, env)
    assert f"checkpoints: {job}" in shown.stdout, shown.stdout
    runs = sorted((project / ".skyinfra" / "clusters" / NAME / "runs").iterdir())
    bad = cli(["run", "--checkpoints", "../escape", "train.py:where"], project, env)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "--checkpoints '../escape'" in bad.stderr and "letters, digits" in bad.stderr
    assert not (sets_dir(project).parent / "escape").exists()
    assert sorted((project / ".skyinfra" / "clusters" / NAME / "runs").iterdir()) == runs
    # the spec's `checkpoints`: every job's set, unless --checkpoints names another
    spec = project / "skyinfra.toml"
    spec.write_text(SPEC + 'checkpoints = "from-spec"\n')
    try:
        values = results(project, cli(["run", "train.py:where"], project, env))
    finally:
        spec.write_text(SPEC)
    assert values == [str(sets_dir(project) / "from-spec")] * 2


@pytest.fixture(scope="module")
def reference(project: Path, env: dict[str, str]) -> list[dict[str, object]]:
    """The uninterrupted run's results (checkpoint set "ref")."""
    started = time.monotonic()
    values = results(project, cli(["run", "--checkpoints", "ref", "train.py:main"], project, env))
    print(f"uninterrupted run: {time.monotonic() - started:.1f} s")
    assert {v["epochs_run"] for v in values} == {5}
    assert len({v["weights_sha256"] for v in values}) == 1
    return values


def test_a_killed_run_resumes_from_its_last_epoch_bit_identical(
    project: Path, env: dict[str, str], reference: list[dict[str, object]]
) -> None:
    # The second run: node 1's worker stops in the middle of epoch 3 and is SIGKILLed there.
    ws = project / ".skyinfra" / "clusters" / NAME
    kill_node_1_in_epoch_3(project, env, ws, "resume", ["train.py:main"])
    steps = sets_dir(project) / "resume"
    committed = sorted(p.parent.name for p in steps.glob("step-*/COMMITTED"))
    assert committed == ["step-00000008", STEP_EPOCH_2], committed
    # A half-written step, newer than any: files but no COMMITTED mark. Ignored.
    half = steps / "step-99999999"
    half.mkdir()
    (half / "latest.weights.h5").write_bytes(b"\x89HDF\r\n half")
    (half / "training_metadata.json").write_text('{"epoch": 4}')

    # --keep: the backups stay when training ends (Keras deletes them by default)
    run = cli(["run", "--checkpoints", "resume", "train.py:main", "--", "--keep"], project, env)
    resumed = results(project, run)
    assert f"resumed from {steps / STEP_EPOCH_2} (epoch 2, step 16)" in run.stdout, run.stdout
    assert {v["resumed_step"] for v in resumed} == {16}
    assert {v["epochs_run"] for v in resumed} == {3}  # epochs 3, 4 and 5
    assert {v["weights_sha256"] for v in resumed} == {reference[0]["weights_sha256"]}

    # `skyinfra checkpoints` lists both sets, and deletes one only when told so
    listed = cli(["checkpoints", "--json"], project, env)
    assert listed.returncode == 0, listed.stderr
    sets = {s["name"]: s for s in json.loads(listed.stdout)}
    assert {"ref", "resume"} <= set(sets)
    assert len(sets["resume"]["jobs"]) == 2  # the killed job and the one that resumed
    assert sets["resume"]["files"] >= 3 and sets["resume"]["size_bytes"] > 0
    refused = cli(["checkpoints", "delete", "ref"], project, env)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert (sets_dir(project) / "ref").is_dir()
    gone = cli(["checkpoints", "delete", "ref", "--yes"], project, env)
    assert gone.returncode == 0, gone.stderr
    assert not (sets_dir(project) / "ref").exists()


def test_a_killed_job_restarts_by_itself_and_ends_bit_identical(
    project: Path, env: dict[str, str], reference: list[dict[str, object]]
) -> None:
    ws = project / ".skyinfra" / "clusters" / NAME
    run, summary = restarted_after_kill(project, env, ws, "restart", ["train.py:main"])
    assert run.returncode == 0, run.stdout
    attempts = summary["attempts"]
    assert isinstance(attempts, list) and [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[0]["cause"]["kind"] == "signal", attempts
    assert attempts[1]["outcome"] == "succeeded" and attempts[1]["recovery_s"] >= 0
    assert "restarting the job as attempt 2 on the same nodes" in run.stdout, run.stdout
    steps = sets_dir(project) / "restart"
    assert f"resumed from {steps / STEP_EPOCH_2} (epoch 2, step 16)" in run.stdout, run.stdout
    values = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]  # type: ignore[index]
    assert {v["resumed_step"] for v in values} == {16}
    assert {v["epochs_run"] for v in values} == {3}  # epochs 3, 4 and 5, in attempt 2
    assert {v["weights_sha256"] for v in values} == {reference[0]["weights_sha256"]}
    print(f"attempts: {attempts}")


def test_a_lost_node_is_replaced_and_the_job_ends_bit_identical(
    project: Path, env: dict[str, str], reference: list[dict[str, object]]
) -> None:
    ws = project / ".skyinfra" / "clusters" / NAME
    run, summary = restarted_after_kill(
        project, env, ws, "lost-node", ["train.py:main"], lose=lose_node_1
    )
    assert run.returncode == 0, run.stdout
    assert "node-1 lost: replacing it" in run.stdout, run.stdout
    attempts = summary["attempts"]
    assert isinstance(attempts, list) and [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[0]["cause"]["kind"] == "lost" and attempts[0]["cause"]["node"] == 1
    steps = sets_dir(project) / "lost-node"
    assert f"resumed from {steps / STEP_EPOCH_2} (epoch 2, step 16)" in run.stdout, run.stdout
    values = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]  # type: ignore[index]
    assert {v["resumed_step"] for v in values} == {16}
    assert {v["weights_sha256"] for v in values} == {reference[0]["weights_sha256"]}
    print(f"attempts: {attempts}")


def test_a_lost_head_is_replaced_and_the_job_ends_bit_identical(
    project: Path, env: dict[str, str], reference: list[dict[str, object]]
) -> None:
    # Node 0 (the job's supervisor and record) lost while node 1 waits in epoch 3: the
    # attached run replaces it, as it does node 1, from the record's last copy.
    ws = project / ".skyinfra" / "clusters" / NAME
    run, summary = restarted_after_kill(
        project, env, ws, "lost-head", ["train.py:main"], lose=lose_node_0
    )
    assert run.returncode == 0, run.stdout
    said = run.stdout
    assert "node-0 (the job's head) was lost: its folder is gone" in said, said
    assert "node-0 lost: replacing it" in said, said
    attempts = summary["attempts"]
    assert isinstance(attempts, list) and [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[0]["cause"]["kind"] == "lost" and attempts[0]["cause"]["node"] == 0
    assert attempts[0]["restarted_by"] == "the operator, after replacing the lost node(s)"
    steps = sets_dir(project) / "lost-head"
    assert f"resumed from {steps / STEP_EPOCH_2} (epoch 2, step 16)" in said, said
    values = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]  # type: ignore[index]
    assert {v["resumed_step"] for v in values} == {16}
    assert {v["weights_sha256"] for v in values} == {reference[0]["weights_sha256"]}
