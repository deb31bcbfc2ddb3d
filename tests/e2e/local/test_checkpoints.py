"""Checkpoints that outlive a killed worker, end to end on one 2-node local cluster (Keras on
JAX, CPU, shared by the module): $SKYINFRA_CHECKPOINT_DIR on every worker, an uninterrupted
run, a run whose node-1 worker is SIGKILLed in the middle of epoch 3, and a fresh job on the
same `--checkpoints` set that resumes from the end of epoch 2 and ends with weights
bit-identical (sha256) to the uninterrupted run's; a half-written step is ignored; with
`run --max-restarts 1` the killed job resumes by itself (attempt 2), bit-identical too, and
so does one whose node 1 is lost (its folder deleted, its processes gone: `run` replaces it),
and one whose node 1 gets a Spot interruption notice from `skyinfra drill interrupt` (it saves
within the notice, the node goes and is replaced, the job restarts);
a Keras job whose nodes each have their own backup_dir restarts by itself and ends
bit-identical too (node 1 gets process 0's backup); a higher-priority torch DDP job preempts
the training, which saves within the notice, resumes once the DDP job ended and ends
bit-identical too (issue 47); a job that never uses its set leaves
none; `skyinfra checkpoints` lists and deletes sets; `down` keeps them. Real processes only."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from skyinfra_runtime.jobs.files import Paths

from tests.conftest import REPO_ROOT
from tests.support.local_jobs import cli, job_record, module_env
from tests.support.resume_proof import (
    kill_node_1_in_epoch_3,
    lose_node_0,
    lose_node_1,
    restarted_after_kill,
)
from tests.support.resume_proof import results as run_results
from tests.support.workers import wait_for_line

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


def writes_on_node_1():
    if os.environ["SKYINFRA_NODE"] == "1":
        with open(os.path.join(os.environ["SKYINFRA_CHECKPOINT_DIR"], "node-1.bin"), "wb") as f:
            f.write(b"state")


def per_node():
    # The usual way around Keras's own BackupAndRestore on several processes: a backup_dir of
    # each node's own, under the job's directory.
    import keras

    keras_backup = keras.callbacks.BackupAndRestore
    node = os.environ["SKYINFRA_NODE"]
    keras.callbacks.BackupAndRestore = lambda backup_dir, **kw: keras_backup(
        os.path.join(backup_dir, "keras-backup", f"node-{node}"), **kw
    )
    return main()


def on_notice():
    # The example as a Spot-aware loop: SIGTERM asks it to stop at the next epoch's end,
    # once that epoch's backup is written. Node 1 waits after epoch 3 batch 4 in attempt 1
    # until the notice's SIGTERM comes (a drill is sent meanwhile).
    import signal

    import keras
    import keras_resume
    from skyinfra_runtime import seconds_left

    asked = []
    signal.signal(signal.SIGTERM, lambda *_: asked.append(time.time()))
    node, attempt = os.environ["SKYINFRA_NODE"], os.environ["SKYINFRA_ATTEMPT"]

    class StopOnNotice(keras.callbacks.Callback):
        resumed = attempt == "1"

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch + 1

        def on_train_batch_end(self, batch, logs=None):
            if not self.resumed:
                self.resumed = True
                print(f"first step of attempt {attempt} at {time.time():.3f}", flush=True)
            if attempt == "1" and node == "1" and (self.epoch, batch + 1) == (3, 4):
                print("paused at epoch 3 batch 4", flush=True)
                while not asked:
                    time.sleep(0.05)

        def on_epoch_end(self, epoch, logs=None):
            if asked:  # after BackupAndRestore's on_epoch_end: this epoch is saved
                print(
                    f"saved epoch {epoch + 1} on the notice at {time.time():.3f}, "
                    f"{seconds_left():.1f} s left",
                    flush=True,
                )
                # Not stop_training: fit's end would run on_train_end, which deletes the backup.
                raise SystemExit(130)

    fit = keras.Model.fit
    keras.Model.fit = lambda self, *a, callbacks=(), **k: fit(
        self, *a, callbacks=[*callbacks, StopOnNotice()], **k
    )
    return keras_resume.main()


def ddp():
    # A few torch DDP steps, rank = node, its process group set up as a torch script without
    # torchrun does (the cluster's plugins are jax and keras), on the job's own rendezvous
    # port: the topology the job's workers see has the head's ports for this job.
    import hashlib

    import torch
    import torch.distributed as dist
    from skyinfra_runtime import instance_info
    from skyinfra_runtime.topology import load_topology
    from torch.nn.parallel import DistributedDataParallel

    me, port = instance_info(), load_topology().torch_port
    dist.init_process_group(
        "gloo", init_method=f"tcp://{me.head_addr}:{port}", rank=me.node, world_size=me.total_nodes
    )
    torch.manual_seed(me.node)  # different on purpose: DDP broadcasts rank 0's weights
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(me.node))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(3):  # each rank's own data: the gradients are averaged across the two
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True)).backward()
        optimizer.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    world = dist.get_world_size()
    dist.destroy_process_group()
    return [world, hashlib.sha256(flat.numpy().tobytes()).hexdigest()]
"""
STEP_EPOCH_2 = "step-00000016"  # 128 samples per node, batches of 16: 8 steps an epoch
STEP_EPOCH_3 = "step-00000024"


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
        # Whichever sets the module's tests left (any subset of them may have run): a node
        # folder deleted (a lost node) takes none of them with it, and down keeps them.
        kept = sets_in(proj)
        shutil.rmtree(proj / ".skyinfra" / "clusters" / NAME / "nodes" / "node-1")
        assert sets_in(proj) == kept
        down = cli(["down", "--yes", "--cluster", NAME], proj, env)
        assert down.returncode == 0, down.stdout + down.stderr
        assert sets_in(proj) == kept
        if kept:  # and says where and how much
            assert "checkpoint set(s) in" in down.stdout, down.stdout


def sets_dir(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME / "checkpoints"


def sets_in(project: Path) -> list[str]:
    return sorted(p.name for p in sets_dir(project).iterdir()) if sets_dir(project).is_dir() else []


def results(project: Path, run: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    return run_results(project / ".skyinfra" / "clusters" / NAME, run)


def test_every_job_gets_its_own_set_which_it_leaves_only_if_it_wrote_there(
    project: Path, env: dict[str, str]
) -> None:
    """Each run here starts jax and keras on both nodes, so the three runs serve every proof:
    the default set (the job's id), the spec's, a bad name refused; a set nobody wrote in is
    not left (not even a named one), one node's file keeps it."""

    def listed() -> list[str]:
        out = cli(["checkpoints", "--json"], project, env)
        assert out.returncode == 0, out.stdout + out.stderr
        return [s["name"] for s in json.loads(out.stdout)]

    before = listed()
    runs_dir = project / ".skyinfra" / "clusters" / NAME / "runs"
    values = results(project, cli(["run", "train.py:where"], project, env))
    job = max(runs_dir.iterdir()).name
    assert values == [str(sets_dir(project) / job)] * 2
    assert not (sets_dir(project) / job).exists()  # it wrote nothing there
    shown = cli(["jobs", job], project, env)
    assert f"checkpoints: {job}" in shown.stdout, shown.stdout
    runs = sorted(runs_dir.iterdir())
    bad = cli(["run", "--checkpoints", "../escape", "train.py:where"], project, env)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "--checkpoints '../escape'" in bad.stderr and "letters, digits" in bad.stderr
    assert not (sets_dir(project).parent / "escape").exists()
    assert sorted(runs_dir.iterdir()) == runs
    # the spec's `checkpoints`: every job's set, unless --checkpoints names another
    spec = project / "skyinfra.toml"
    spec.write_text(SPEC + 'checkpoints = "from-spec"\n')
    try:
        values = results(project, cli(["run", "train.py:where"], project, env))
    finally:
        spec.write_text(SPEC)
    assert values == [str(sets_dir(project) / "from-spec")] * 2
    assert not (sets_dir(project) / "from-spec").exists()  # named, and still not left
    assert listed() == before
    # One node's file keeps the set (one folder of every node's here: node 0, which wrote
    # nothing, leaves it to the head's end, once every node's launcher has ended).
    run = cli(["run", "--checkpoints", "one-file", "train.py:writes_on_node_1"], project, env)
    results(project, run)
    assert [p.name for p in (sets_dir(project) / "one-file").iterdir()] == ["node-1.bin"]
    assert sorted(listed()) == sorted([*before, "one-file"])
    assert cli(["checkpoints", "delete", "one-file", "--yes"], project, env).returncode == 0


@pytest.fixture(scope="module")
def reference(project: Path, env: dict[str, str]) -> list[dict[str, object]]:
    """The uninterrupted run's results (checkpoint set "ref")."""
    started = time.monotonic()
    values = results(project, cli(["run", "--checkpoints", "ref", "train.py:main"], project, env))
    print(f"uninterrupted run: {time.monotonic() - started:.1f} s")
    assert {v["epochs_run"] for v in values} == {5}
    assert len({v["weights_sha256"] for v in values}) == 1
    # The jax plugin kept what node 0's worker compiled on its node (JAX writes from process 0
    # only), for the module's later jobs, which end bit-identical to this one from it.
    cache = project / ".skyinfra" / "clusters" / NAME / "nodes" / "node-0" / "cache" / "jax"
    assert any(cache.iterdir()), cache
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


def resumed_from_epoch_2_bit_identical(
    project: Path,
    name: str,
    out: str,
    summary: dict[str, object],
    reference: list[dict[str, object]],
) -> list[dict[str, Any]]:
    """The job of set ``name`` resumed from epoch 2's backup on every node and ended with the
    uninterrupted run's weights; each node's worker value, for what a test checks besides."""
    steps = sets_dir(project) / name
    assert f"resumed from {steps / STEP_EPOCH_2} (epoch 2, step 16)" in out, out
    values = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]  # type: ignore[index]
    assert {v["resumed_step"] for v in values} == {16}
    assert {v["weights_sha256"] for v in values} == {reference[0]["weights_sha256"]}
    return values


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
    values = resumed_from_epoch_2_bit_identical(project, "restart", run.stdout, summary, reference)
    assert {v["epochs_run"] for v in values} == {3}  # epochs 3, 4 and 5, in attempt 2
    print(f"attempts: {attempts}")


def test_a_backup_dir_per_node_restarts_and_ends_bit_identical(
    project: Path, env: dict[str, str], reference: list[dict[str, object]]
) -> None:
    # Process 0 wrote every backup into node-0's folder; node-1's holds none: attempt 2
    # restores from node-0's and sends the state to node 1, as the weights are.
    ws = project / ".skyinfra" / "clusters" / NAME
    run, summary = restarted_after_kill(project, env, ws, "per-node", ["train.py:per_node"])
    assert run.returncode == 0, run.stdout
    attempts = summary["attempts"]
    assert isinstance(attempts, list) and [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[1]["outcome"] == "succeeded", attempts
    node_0 = sets_dir(project) / "per-node" / "keras-backup" / "node-0"
    said = f"resumed from {node_0 / STEP_EPOCH_2} (epoch 2, step 16)"
    assert said in run.stdout, run.stdout
    values = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]  # type: ignore[index]
    assert {v["resumed_step"] for v in values} == {16}
    assert {v["epochs_run"] for v in values} == {3}  # epochs 3, 4 and 5, in attempt 2
    assert {v["weights_sha256"] for v in values} == {reference[0]["weights_sha256"]}


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
    resumed_from_epoch_2_bit_identical(project, "lost-node", run.stdout, summary, reference)
    # The new node-1 started its standby before attempt 2 was started there: it ran warm.
    timeline = ws / "nodes" / "node-1" / "runs" / str(summary["run_id"]) / "timeline.json"
    (worker,) = json.loads(timeline.read_text())["attempts"][-1]["workers"]
    assert worker["start"] == "warm", worker
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
    assert (
        "node-0 (the job's head) was lost: its machine is gone (its folder, or its instance)"
        in said
    ), said
    assert "node-0 lost: replacing it" in said, said
    attempts = summary["attempts"]
    assert isinstance(attempts, list) and [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[0]["cause"]["kind"] == "lost" and attempts[0]["cause"]["node"] == 0
    assert attempts[0]["restarted_by"] == "the operator, after replacing the lost node(s)"
    resumed_from_epoch_2_bit_identical(project, "lost-head", said, summary, reference)


def test_a_drill_saves_within_the_notice_replaces_the_node_and_ends_bit_identical(
    project: Path, env: dict[str, str], reference: list[dict[str, object]]
) -> None:
    ws = project / ".skyinfra" / "clusters" / NAME
    drills: list[subprocess.CompletedProcess[str]] = []

    def drill(workspace: Path, job: str) -> None:
        drills.append(cli(["drill", "interrupt", "node-1", "--notice-seconds", "60"], project, env))

    run, summary = restarted_after_kill(
        project, env, ws, "drill", ["train.py:on_notice"], lose=drill
    )
    said = drills[0]
    assert said.returncode == 0, said.stdout + said.stderr
    assert "Spot interruption notice sent to node-1: terminate at" in said.stdout
    assert run.returncode == 0, run.stdout
    out = run.stdout
    assert "a Spot interruption notice on node-1: terminate at" in out, out  # the head's word
    assert "node-1 interrupted: replacing it" in out, out
    attempts = summary["attempts"]
    assert isinstance(attempts, list) and [a["attempt"] for a in attempts] == [1, 2]
    cause = attempts[0]["cause"]
    assert cause["kind"] == "interrupted" and cause["node"] == 1, attempts
    notice = attempts[0]["interruptions"][0]
    assert notice["node"] == 1 and notice["action"] == "terminate"
    # Saved within the notice: node 0's worker wrote epoch 3's backup (process 0 writes them)
    # and then said when, with time left before the notice's time; the next attempt resumed
    # from that very step (its COMMITTED mark; Keras deletes the backups when training ends).
    steps = sets_dir(project) / "drill"
    saved = [line for line in out.splitlines() if "saved epoch 3 on the notice" in line]
    assert len(saved) == 1, out  # node 0's (run shows node 0)
    saved_at = float(saved[0].split(" at ")[1].split(",")[0])
    assert notice["noticed_at"] <= saved_at < notice["time"], (notice, saved)
    assert float(saved[0].split(", ")[-1].split()[0]) > 0, saved
    # The node was replaced (a new folder, its own stand-in), the job resumed after epoch 3.
    assert f"resumed from {steps / STEP_EPOCH_3} (epoch 3, step 24)" in out, out
    values = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]  # type: ignore[index]
    assert {v["resumed_step"] for v in values} == {24}
    assert {v["epochs_run"] for v in values} == {2}  # epochs 4 and 5, in attempt 2
    assert {v["weights_sha256"] for v in values} == {reference[0]["weights_sha256"]}
    assert (ws / "nodes" / "node-1" / "notice.json").is_file()
    assert not (ws / "nodes" / "node-1" / "interruption.json").exists()
    job = max((ws / "runs").iterdir()).name  # the newest run: this job
    shown = cli(["jobs", job], project, env)
    assert "node-1 interrupted at" in shown.stdout and "(Spot notice: terminate at" in shown.stdout
    print(f"attempts: {attempts}")


def test_a_higher_priority_torch_ddp_job_preempts_the_keras_training_which_ends_bit_identical(
    project: Path, env: dict[str, str], reference: list[dict[str, object]]
) -> None:
    """Issue 47's proof: the Keras training (a backup each epoch, a stop at the epoch's end on
    SIGTERM), detached, is preempted in epoch 3 by an attached `run --priority 5` of a torch
    DDP job on both nodes: it saves epoch 3 within the notice and is `preempted` (no restart
    spent), the DDP job runs and ends, and the training resumes from epoch 3 by itself and
    ends with the uninterrupted run's weights, bit for bit."""
    ws = project / ".skyinfra" / "clusters" / NAME
    started = time.monotonic()
    argv = ["run", "-d", "--max-restarts", "1", "--checkpoints", "preempted"]
    low = cli([*argv, "train.py:on_notice"], project, env)
    assert low.returncode == 0, low.stdout + low.stderr
    low_id = low.stdout.split("job ", 1)[1].split()[0]
    logs = [ws / "nodes" / f"node-{i}" / "runs" / low_id / "output.log" for i in (0, 1)]
    wait_for_line(logs[1], "paused at epoch 3 batch 4")
    # Attached (the workspace is free: the training was started detached): it waits in the
    # queue, preempts the training, runs, and ends.
    high = cli(["run", "--priority", "5", "train.py:ddp"], project, env)
    ddp = results(project, high)
    assert "is queued (position 1)" in high.stdout, high.stdout
    high_id = high.stdout.split("job ", 1)[1].split()[0]
    # Both ranks of one process group (world 2) ended with the same weights (DDP's).
    assert [world for world, _ in ddp] == [2, 2] and len({sha for _, sha in ddp}) == 1, ddp
    record = Paths(ws / "nodes" / "node-0", low_id).record  # the head's, read as it is
    until = time.monotonic() + 300  # a bound on the wait, not an assertion on time
    while json.loads(record.read_text())["state"] not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < until, record.read_text()
        time.sleep(0.2)
    print(f"preempted training and DDP job: {time.monotonic() - started:.1f} s")
    lo, hi = (job_record(NAME, project, env, job) for job in (low_id, high_id))
    assert lo["state"] == "succeeded", lo
    first, second = lo["attempts"]
    assert (first["outcome"], first["preempted_by"]) == ("preempted", high_id), first
    # The training's first attempt ended, the DDP job ran, then the training resumed.
    assert first["ended_at"] <= hi["started_at"] <= hi["ended_at"] <= second["started_at"]
    assert (lo["preemptions"], lo["restarts_left"]) == (1, 1), lo  # --max-restarts 1 kept
    out = logs[0].read_text()  # node 0's: process 0 writes the backups and says so
    saved = [line for line in out.splitlines() if "saved epoch 3 on the notice" in line]
    assert len(saved) == 1 and float(saved[0].split(", ")[-1].split()[0]) > 0, out
    steps = sets_dir(project) / "preempted"
    assert f"resumed from {steps / STEP_EPOCH_3} (epoch 3, step 24)" in out, out
    values = [n["result"]["workers"][0]["value"] for n in lo["nodes"]]
    assert {v["resumed_step"] for v in values} == {24}
    assert {v["epochs_run"] for v in values} == {2}  # epochs 4 and 5, after the preemption
    assert {v["weights_sha256"] for v in values} == {reference[0]["weights_sha256"]}


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["7"], "NODE '7': expected a worker node of the cluster (node-1 to node-1)"),
        (["0"], "NODE '0': node-0 is the head"),
        (["1", "--notice-seconds", "-5"], "'--notice-seconds': -5 is not in the range x>=0"),
    ],
)
def test_a_bad_drill_changes_nothing(
    project: Path, env: dict[str, str], args: list[str], named: str
) -> None:
    bad = cli(["drill", "interrupt", *args], project, env)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert named in bad.stderr, bad.stderr
    nodes = project / ".skyinfra" / "clusters" / NAME / "nodes"
    assert not list(nodes.glob("*/interruption.json"))
    assert (nodes / "node-1" / "notice.json").is_file()
