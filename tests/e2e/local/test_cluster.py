"""End to end through the CLI, as a user runs it: up -> run -> down on the local target with
the real runtime (runtime/). Generous timeouts, no timed assertions."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from skyinfra_runtime.imds_standin import PID_FILE as IMDS_STANDIN_PID
from skyinfra_runtime.jobs.records import DEAD_PEER_GRACE_S, END_GRACE_S

from tests.conftest import REPO_ROOT, skyinfra_argv
from tests.support.specs import MODEL_PARALLEL_SPEC
from tests.support.waits import wait_until

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
    plugins: list[str] = request.param  # plugin flags; an item starting with -- is a flag
    name = "e2e"
    flags = [f for p in plugins for f in ((p,) if p.startswith("--") else ("--plugin", p))]
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
    # .skyinfraignore kept big.bin off the nodes; the examples went (to the run's own dir).
    run_root = project / ".skyinfra" / "clusters" / name / "runs"
    (run_id,) = [p.name for p in run_root.iterdir() if p.is_dir()]
    node0 = run_root.parent / "nodes" / "node-0" / "runs" / run_id / "work"
    assert (node0 / "examples" / "keras_digits.py").is_file()
    assert not (node0 / "big.bin").exists()
    assert not (node0 / ".skyinfra").exists()
    # The nodes were made with the operator's uv, and `up` left its timeline: every stage
    # and each node's bootstrap (its resource's apply) with a duration.
    ws = project / ".skyinfra" / "clusters" / name
    assert "uv = " in (ws / "nodes" / "node-0" / "venv" / "pyvenv.cfg").read_text()
    timeline = json.loads((ws / "timeline.json").read_text())
    names = [stage["name"] for stage in timeline["stages"]]
    assert {"wheel build", "terraform init", "terraform plan", "terraform apply"} <= set(names)
    assert sum(name.endswith('node["node-1"]') for name in names) == 1


# A torchrun-style DDP script (gloo on CPU) printing, per rank, the thread settings torch
# took as it was imported and its trained weights' checksum.
DDP_THREADS = """import hashlib, os, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
x = torch.randn(64, 8)
y = x @ torch.arange(1.0, 9.0)
model = DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for _ in range(4):
    optimizer.zero_grad()
    out = model(x[rank::world]).squeeze(-1)
    torch.nn.functional.mse_loss(out, y[rank::world]).backward()
    optimizer.step()
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
threads = (os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads(),
           torch.get_num_interop_threads())
# One write per line: the node's workers share its output.
sys.stdout.write(f"rank {rank} threads={threads} weights_sha256={digest.hexdigest()}\\n")
sys.stdout.flush()
dist.destroy_process_group()
"""
DDP_LINE = re.compile(r"rank (\d) threads=(\([^)]*\)) weights_sha256=([0-9a-f]{64})")


def ddp_threads_run(
    name: str, project: Path, env: dict[str, str], *flags: str
) -> tuple[dict[str, str], str]:
    """rank -> its threads and checksum, and the job's id."""
    run = cli(["run", "--cluster", name, "--all-logs", *flags, "ddp_threads.py"], project, env)
    assert run.returncode == 0, run.stdout + run.stderr
    ranks = {rank: f"{threads} {digest}" for rank, threads, digest in DDP_LINE.findall(run.stdout)}
    assert sorted(ranks) == ["0", "1", "2", "3"], run.stdout
    return ranks, latest_job(project, name)


def latest_job(project: Path, name: str) -> str:
    """The cluster's latest job."""
    runs = project / ".skyinfra" / "clusters" / name / "runs"
    latest = max(p for p in runs.iterdir() if p.is_dir())
    return str(json.loads((latest / "summary.json").read_text())["run_id"])


def worker_starts(nodes: Path, job: str) -> list[str]:
    """How each node's workers started ("warm"/"cold"), as the nodes' timelines say."""
    found = []
    for node in ("node-0", "node-1"):
        timeline = json.loads((nodes / node / "runs" / job / "timeline.json").read_text())
        found += [w["start"] for w in timeline["attempts"][-1]["workers"]]
    return found


def wait_for_standbys(nodes: Path, slots: int) -> None:
    """Until each node has a standby waiting in every slot (its socket); else what the
    standby folders hold, their logs' last lines, before the test's own timeout."""
    folders = [nodes / node / "standby" for node in ("node-0", "node-1")]

    def held() -> dict[str, str]:
        return {
            str(p.relative_to(nodes)): p.read_text()[-1000:] if p.suffix == ".log" else ""
            for f in folders
            for p in sorted(f.glob("*"))
        }

    def ready(_: object) -> bool:
        return all(list(f.glob(f"w{s}-*.sock")) for f in folders for s in range(slots))

    wait_until("a standby in every slot of every node", held, ready, deadline_s=200)


@pytest.mark.parametrize("cluster", [["torch", "--procs-per-node=2"]], indirect=True)
def test_torch_ddp_same_weights_on_both_nodes(
    cluster: tuple[str, Path], clean_env: dict[str, str]
) -> None:
    name, project = cluster
    nodes = project / ".skyinfra" / "clusters" / name / "nodes"
    (project / "ddp_threads.py").write_text(DDP_THREADS)
    # Cold whatever `up`'s standbys are doing: a job that sets a TORCH_ variable (here torch's
    # own default) starts cold, its timeline says why.
    cold, cold_job = ddp_threads_run(
        name, project, clean_env, "--env", "TORCH_SHOW_CPP_STACKTRACES=0"
    )
    assert worker_starts(nodes, cold_job) == ["cold"] * 4
    # torchrun's OMP_NUM_THREADS=1 with 2 workers per node, read as torch was imported.
    assert all(r.startswith("('1', 1, ") for r in cold.values()), cold

    # The example function (the plugin's process group, skyinfra's shard): the same weights
    # on every rank, 2 nodes x 2 processes.
    run = cli(["run", "--cluster", name, "examples/torch_ddp.py:main"], project, clean_env)
    assert run.returncode == 0, run.stdout + run.stderr
    values = results(run.stdout, project / ".skyinfra" / "clusters" / name / "runs")
    assert sorted(v["rank"] for v in values) == [0, 1, 2, 3]
    assert len({v["weights_sha256"] for v in values}) == 1

    # On the standbys (torch imported with the plugin's thread count before the job): the
    # same thread settings and bit-identical weights as the cold job's, rank by rank.
    wait_for_standbys(nodes, slots=2)
    warm, warm_job = ddp_threads_run(name, project, clean_env)
    assert worker_starts(nodes, warm_job) == ["warm"] * 4
    assert warm == cold
    # An unmodified torchrun script (its own init_process_group), as `-m` with arguments:
    # torchrun's environment on every node, as under torchrun; on the standbys, which had
    # imported torch._dynamo (its DDP a function's local, its group destroyed first). Such a
    # worker hung at its end, in gloo's process-group destructor, until the plugin kept the
    # job's groups to its teardown: the run ending at all is the proof.
    wait_for_standbys(nodes, slots=2)
    argv = ["run", "--cluster", name, "--all-logs", "-m", "examples.torchrun_ddp"]
    script = cli([*argv, "--", "--epochs", "2"], project, clean_env, timeout=300)
    assert script.returncode == 0, script.stdout + script.stderr
    assert worker_starts(nodes, latest_job(project, name)) == ["warm"] * 4
    line = re.compile(r"rank (\d)/4 epochs=2 loss=\S+ weights_sha256=([0-9a-f]{64})$", re.M)
    lines = line.findall(script.stdout)
    assert sorted(rank for rank, _ in lines) == ["0", "1", "2", "3"], script.stdout
    assert len({digest for _, digest in lines}) == 1  # identical parameters on every rank


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
    # The job's processes are gone from node 0's record; the node's own IMDS stand-in (the
    # Spot notice's address on the local target) lives as long as the node.
    recorded = {p.name for p in (ws / "nodes" / "node-0" / "pids").iterdir()}
    assert recorded <= {IMDS_STANDIN_PID}, f"node 0's job processes are still recorded: {recorded}"
    assert os.path.isdir(ws / "runs")


RUN_ID = re.compile(r"^\d{8}-\d{6}-\d{6}-[0-9a-f]{4}$")

TRAIN = """import os, pathlib


def main():
    shared = pathlib.Path(os.environ["SKYINFRA_SHARED_DIR"])
    ckpt = shared / "ckpt.txt"
    before = ckpt.read_text() if ckpt.exists() else None
    ckpt.write_text(os.environ["SKYINFRA_RUN_ID"])
    pathlib.Path("scratch.txt").write_text("this run's own")
    return {"node": int(os.environ["SKYINFRA_NODE"]), "before": before, "cwd": os.getcwd()}
"""

HANG = """import os, time


def main():
    if os.environ["SKYINFRA_NODE"] == "1":
        print("node 1 waits for a peer that never comes", flush=True)
        time.sleep(600)
"""

KILLED = """import os, signal, time


def main():
    if os.environ["SKYINFRA_NODE"] == "1":
        time.sleep(1)
        print("node 1 is about to be killed", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as JAX blocked in a collective
    while True:
        time.sleep(1)
"""

LAUNCHER_KILLED = """import os, signal, time


def main():
    if os.environ["SKYINFRA_NODE"] == "1":
        time.sleep(1)
        os.kill(os.getppid(), signal.SIGKILL)  # the launcher, not this worker
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:  # node 1's worker too, unless it dies with its launcher
        time.sleep(1)
"""


def run_dirs(node_dir: Path) -> list[str]:
    return sorted(p.name for p in (node_dir / "runs").iterdir() if RUN_ID.match(p.name))


@pytest.mark.parametrize("cluster", [[]], indirect=True)
def test_runs_keep_their_own_dirs_and_the_shared_one(
    cluster: tuple[str, Path], clean_env: dict[str, str]
) -> None:
    """Plain entries on a 2-node cluster without plugins, run after run: a module entry from
    the project, a checkpoint in the shared dir seen by the next run, each run in its own
    directory, no secrets copied, a bad ENTRY refused before anything, --timeout, a killed
    worker on node 1 stopping node 0 (which ignores SIGTERM) within seconds, pruning."""
    name, project = cluster
    ws = project / ".skyinfra" / "clusters" / name
    nodes = [ws / "nodes" / f"node-{i}" for i in range(2)]
    (project / "mypkg").mkdir()
    (project / "mypkg" / "__init__.py").write_text("")
    (project / "mypkg" / "train.py").write_text(TRAIN)
    (project / "hang.py").write_text(HANG)
    (project / "killed.py").write_text(KILLED)
    (project / "launcher_killed.py").write_text(LAUNCHER_KILLED)
    for rel in (".env", ".ssh/id_ed25519", ".aws/credentials", "keep.pem", "other.pem"):
        (project / rel).parent.mkdir(exist_ok=True)
        (project / rel).write_text("SECRET")
    (project / ".skyinfraignore").write_text("big.bin\n!keep.pem\n")

    # A package.module:function entry from the project (never ran before).
    first = cli(["run", "--cluster", name, "mypkg.train:main"], project, clean_env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "not copied (secrets): .aws, .env, .ssh, other.pem" in first.stdout
    first_id = json.loads((run_summaries(ws)[-1]).read_text())["run_id"]
    values = results(first.stdout, ws / "runs")
    assert [v["before"] for v in values] == [None, None]
    for value, node in zip(values, nodes, strict=True):
        work = node / "runs" / first_id / "work"
        assert value["cwd"] == str(work)
        copied = {p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file()}
        assert "keep.pem" in copied and "mypkg/train.py" in copied
        assert not {".env", ".ssh/id_ed25519", ".aws/credentials", "other.pem"} & copied

    # The next run sees the checkpoint; the first run's directory is still there.
    second = cli(["run", "--cluster", name, "mypkg.train:main"], project, clean_env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert [v["before"] for v in results(second.stdout, ws / "runs")] == [first_id, first_id]
    for node in nodes:
        assert (node / "runs" / first_id / "work" / "scratch.txt").read_text() == "this run's own"
        assert len(run_dirs(node)) == 2

    # A bad ENTRY: exit 2, nothing copied or started, no runs/<id> on either side.
    before = sorted((ws / "runs").iterdir())
    bad = cli(["run", "--cluster", name, "mypkg.train:mian"], project, clean_env)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "mypkg/train.py defines no 'mian' at top level (its functions: main)" in bad.stderr
    assert sorted((ws / "runs").iterdir()) == before
    assert all(len(run_dirs(node)) == 2 for node in nodes)

    # --timeout: node 1 hangs; it is named, ended, and its last line shown.
    hung = cli(["run", "--cluster", name, "--timeout", "4", "hang.py:main"], project, clean_env)
    assert hung.returncode == 6, hung.stdout + hung.stderr
    assert "still running: node-1;" in hung.stdout
    assert "[node-1] node 1 waits for a peer that never comes" in hung.stdout
    assert "timed out after 4 s (--timeout); still running then, and ended: node-1" in hung.stderr
    summary = json.loads(run_summaries(ws)[-1].read_text())
    assert (summary["exit_code"], summary["timed_out"]) == (6, [1])
    assert summary["nodes"][0]["exit_code"] == 0

    # Node 1's worker killed; node 0 ignores SIGTERM: said as it is, node 0 ended in seconds.
    killed = cli(["run", "--cluster", name, "killed.py:main"], project, clean_env)
    assert killed.returncode == 4, killed.stdout + killed.stderr
    assert (
        "node-1 failed first: exit 137 (a worker was killed by signal SIGKILL); ending node-0"
    ) in killed.stdout
    assert "[node-1] node 1 is about to be killed" in killed.stdout  # without --all-logs
    assert "user code raised" not in killed.stdout + killed.stderr
    assert "node-0: ended by skyinfra after node-1 failed" in killed.stdout
    # Ended by the SIGKILL after the short grace a failed peer's ending names (not the usual
    # END_GRACE_S), as the job's record says; read from the record, not from a clock, so that
    # a slow machine cannot fail it (tests/unit/runtime/test_job_end_grace.py times the kill).
    record = json.loads((run_summaries(ws)[-1].parent / "job.json").read_text())
    assert record["attempts"][-1]["end_grace_s"] == DEAD_PEER_GRACE_S < END_GRACE_S, record
    node_0 = record["nodes"][0]
    assert (node_0["exit_code"], node_0["ended_reason"]) == (-9, "after node-1 failed"), record

    # Node 1's launcher killed: noticed at once (its worker dies with it), node 0 ended.
    gone = cli(["run", "--cluster", name, "launcher_killed.py:main"], project, clean_env, 120)
    assert gone.returncode == 4, gone.stdout + gone.stderr
    assert "node-1 failed first: exit -9 (killed by signal SIGKILL)" in gone.stdout
    assert "node-0: ended by skyinfra after node-1 failed" in gone.stdout

    # Pruning: the newest runs are kept, the shared directory always.
    kept = cli(
        ["run", "--cluster", name, "--keep-runs", "2", "mypkg.train:main"], project, clean_env
    )
    assert kept.returncode == 0, kept.stdout + kept.stderr
    for node in nodes:
        assert len(run_dirs(node)) == 2
        assert first_id not in run_dirs(node)
        assert (node / "shared" / "ckpt.txt").is_file()


def run_summaries(ws: Path) -> list[Path]:
    """Every run's summary.json, oldest first (by when it was written)."""
    paths = [p / "summary.json" for p in (ws / "runs").iterdir() if (p / "summary.json").is_file()]
    return sorted(paths, key=lambda p: p.stat().st_mtime)


def test_keras_model_parallel_from_the_spec_file_splits_a_kernel(
    project: Path, clean_env: dict[str, str]
) -> None:
    (project / "skyinfra.toml").write_text(MODEL_PARALLEL_SPEC)
    shutil.copy(
        REPO_ROOT / "tests/integration/runtime/entries/keras_model_parallel.py",
        project,
    )
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


def test_the_spec_sets_run_timeout(project: Path, clean_env: dict[str, str]) -> None:
    """`run_timeout` in skyinfra.toml is `run`'s default --timeout (a flag still wins)."""
    (project / "skyinfra.toml").write_text('name = "rt"\nnodes = 1\nrun_timeout = 3\n')
    (project / "sleepy.py").write_text("import time\n\n\ndef main():\n    time.sleep(600)\n")
    up = cli(["up"], project, clean_env)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        run = cli(["run", "sleepy.py:main"], project, clean_env)
        assert run.returncode == 6, run.stdout + run.stderr  # exitcodes.RUN_TIMEOUT
        assert "timed out after 3 s" in run.stderr and "node-0" in run.stderr
    finally:
        down = cli(["down", "--yes"], project, clean_env)
    assert down.returncode == 0, down.stdout + down.stderr
