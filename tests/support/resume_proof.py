"""What the resume proofs share (tests/e2e/local/test_checkpoints*.py): an entry that pauses a
node's worker at a batch for the test to kill it there (in the job's first attempt only), a
job on a checkpoint set whose node-1 worker is SIGKILLed in the middle of epoch 3 (ending the
job, or restarting it by itself with --max-restarts), and the workers' results of a run."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from skyinfra.targets.local.processes import NODE_ENV
from tests.conftest import skyinfra_argv
from tests.support.local_jobs import cli
from tests.support.workers import wait_for_line, worker_pid

# Where the test kills: node 1, in the middle of epoch 3 (after its 4th batch).
PAUSE_AT = "1:3:4"


def pausing_entry(module: str) -> str:
    """``train.py`` around an example whose ``main`` prints "epoch E batch B ..." lines: with
    PAUSE_AT=NODE:EPOCH:BATCH that node's worker stops once it printed that batch's line (the
    step ran) and says so."""
    return f"""\
import builtins, os, time

import {module}


def _pausing_print(*args, **kwargs):
    builtins.print(*args, **kwargs)
    pause = os.environ.get("PAUSE_AT", "")
    if pause and os.environ.get("SKYINFRA_ATTEMPT", "1") == "1":  # a restarted job runs on
        node, epoch, batch = pause.split(":")
        line = " ".join(str(a) for a in args)
        here = node == os.environ["SKYINFRA_NODE"]
        if here and line.startswith(f"epoch {{epoch}} batch {{batch}} "):
            builtins.print(f"paused at epoch {{epoch}} batch {{batch}}", flush=True)
            time.sleep(300)


def main():
    {module}.print = _pausing_print
    return {module}.main()
"""


def results(workspace: Path, run: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    """The first worker's return value on each node, from the newest run's summary."""
    assert run.returncode == 0, run.stdout + run.stderr
    run_dir = max((workspace / "runs").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    return [n["result"]["workers"][0]["value"] for n in summary["nodes"]]


def reference_sha256(project: Path, env: dict[str, str], workspace: Path) -> str:
    """The final weights' sha256 of an uninterrupted run (checkpoint set "ref"), the same on
    every node."""
    run = cli(["run", "--checkpoints", "ref", "train.py:main"], project, env)
    values = results(workspace, run)
    shas = {v["weights_sha256"] for v in values}
    assert len(shas) == 1 and {v["resumed_epoch"] for v in values} == {None}
    return str(shas.pop())


def kill_node_1_in_epoch_3(
    project: Path,
    env: dict[str, str],
    workspace: Path,
    name: str,
    entry_args: list[str],
    before_kill: Callable[[], None] = lambda: None,
) -> str:
    """Start a detached job on checkpoint set ``name``, SIGKILL node 1's worker where it
    paused (``before_kill`` first), and follow the job to its end (it fails on node 1); the
    job's id."""
    argv = ["run", "-d", "--checkpoints", name, "--env", f"PAUSE_AT={PAUSE_AT}", *entry_args]
    res = cli(argv, project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    job = res.stdout.split("job ", 1)[1].split()[0]
    _, epoch, batch = PAUSE_AT.split(":")
    log = workspace / "nodes" / "node-1" / "runs" / job / "output.log"
    wait_for_line(log, f"paused at epoch {epoch} batch {batch}")
    before_kill()
    pid = worker_pid(job, 1)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    ended = cli(["logs", job, "--follow", "--all", "--tail", "5"], project, env)
    assert ended.returncode == 4, ended.stdout + ended.stderr  # the job failed on node 1
    assert "killed by signal SIGKILL" in ended.stdout
    return job


def wait_for_path(path: Path, timeout_s: float = 60) -> None:
    end = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < end, f"{path} did not appear within {timeout_s} s"
        time.sleep(0.1)


def kill_worker(workspace: Path, job: str) -> None:
    """SIGKILL node 1's worker of ``job`` (as the OOM killer does)."""
    pid = worker_pid(job, 1)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)


def lose_node_1(workspace: Path, job: str) -> None:
    """Node 1 lost, as a machine is (lose_node)."""
    lose_node(workspace, 1)


def lose_node_0(workspace: Path, job: str) -> None:
    """Node 0, the job's head, lost as a machine is: its supervisor and the record with it."""
    lose_node(workspace, 0)


def lose_node(workspace: Path, node: int) -> None:
    """A node lost, as a machine is: every process of it stopped at once, its folder gone
    (moved aside, so nothing starts there any more: a follower's command started during the
    deletion wrote into it, once), the processes SIGKILLed (its agent, launcher and worker:
    their environment names its folder), then the folder deleted."""
    node_dir = workspace / "nodes" / f"node-{node}"
    gone = workspace / f".lost-node-{node}-{time.time_ns()}"
    kill_node_processes(
        workspace, node, standin_too=True, before_kill=lambda: node_dir.rename(gone)
    )
    shutil.rmtree(gone)


def kill_node_processes(
    workspace: Path,
    node: int,
    *,
    standin_too: bool = False,
    before_kill: Callable[[], None] | None = None,
) -> None:
    """Every process of a node SIGKILLed (its agent, launcher and worker: their environment
    names its folder); the folder stays. Its metadata service's stand-in is the cloud's, not
    the node's (skyinfra_runtime.imds_standin): it goes only ``standin_too``, with the node.

    All of them are stopped (SIGSTOP) before any is killed, as a machine's processes end
    together: killed one by one as a scan of /proc found them, the others ran on meanwhile, and
    one writing into a lost node's folder by its path made the folder anew, without its marker
    (a 6-worker `make test`: `up` then refused to replace the node; test_node_loss.py).
    ``before_kill`` runs while they are stopped."""
    node_dir = workspace / "nodes" / f"node-{node}"
    stopped: set[int] = set()
    while found := _node_pids(node_dir, standin_too) - stopped:
        for pid in found:  # again until no new one: a child forked during the scan
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        stopped |= found
    if before_kill is not None:
        before_kill()
    # And what a follower started there meanwhile (its environment names the folder too).
    for pid in stopped | _node_pids(node_dir, standin_too):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _node_pids(node_dir: Path, standin_too: bool) -> set[int]:
    mark = f"{NODE_ENV}={node_dir}".encode()
    pids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if (
            mark in environ
            and int(pid) != os.getpid()
            and (standin_too or b"imds-standin" not in argv)
        ):
            pids.add(int(pid))
    return pids


def restarted_after_kill(
    project: Path,
    env: dict[str, str],
    workspace: Path,
    name: str,
    entry_args: list[str],
    lose: Callable[[Path, str], None] = kill_worker,
    node_1_dir: Path | None = None,
) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    """One attached `run --max-restarts 1` on checkpoint set ``name`` whose node 1 is hit
    where its worker paused in attempt 1 (``lose``: its worker SIGKILLed, or the whole node
    lost): the job restarts by itself; the run (its output) and its summary.json.
    ``node_1_dir``: node 1's folder (default: the local target's, in the workspace)."""
    runs = workspace / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    argv = ["run", "--max-restarts", "1", "--checkpoints", name]
    argv += ["--env", f"PAUSE_AT={PAUSE_AT}", *entry_args]
    out_file = project / f"restarted-{name}.out"
    with out_file.open("w") as out:
        proc = subprocess.Popen(
            [*skyinfra_argv(), *argv], cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            end = time.monotonic() + 120
            while not (set(runs.iterdir()) if runs.is_dir() else set()) - before:
                assert proc.poll() is None and time.monotonic() < end, out_file.read_text()
                time.sleep(0.1)
            job = max(set(runs.iterdir()) - before).name
            _, epoch, batch = PAUSE_AT.split(":")
            node_1 = node_1_dir or workspace / "nodes" / "node-1"
            wait_for_line(
                node_1 / "runs" / job / "output.log", f"paused at epoch {epoch} batch {batch}"
            )
            lose(workspace, job)
            code = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    said = out_file.read_text()
    summary = json.loads((runs / job / "summary.json").read_text())
    return subprocess.CompletedProcess(proc.args, code, said, ""), summary
