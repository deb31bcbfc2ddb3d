"""``skyinfra-runtime launch``: run ENTRY on this node with the cluster's plugins around it.

The launcher is a small supervisor: it validates everything it can before waiting on any
peer (topology, node index, plugin names and options, entrypoint), then starts one worker
process per local worker (``--procs-per-node``; torch on a GPU node: one per GPU), forwards
SIGINT and SIGTERM, ends the other workers at the first failure, and writes the node's results.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from skyinfra_runtime import exitcodes, rundirs, standbys, startwork, warm
from skyinfra_runtime.devices import node_gpus, torch_procs
from skyinfra_runtime.entry import Entrypoint
from skyinfra_runtime.errors import (
    EntrypointError,
    PluginOptionError,
    RuntimeSetupError,
    TopologyError,
    UsageError,
)
from skyinfra_runtime.jobports import job_topology
from skyinfra_runtime.jobrecord import WorkerStart, record_starts
from skyinfra_runtime.parentdeath import AGENT_PID_ENV, end_with_parent
from skyinfra_runtime.plugin_table import parse_plugin_flag, validate_plugins
from skyinfra_runtime.restarts import worker_killed
from skyinfra_runtime.topology import (
    NODE_ENV,
    TOPOLOGY_ENV,
    WORKER_ENV,
    WORKERS_PER_NODE_ENV,
    Topology,
    load_topology,
    node_index,
)

GRACE_SECONDS = 10.0
# A worker: a process started cold, or a standby that took the job (standbys.py).
Worker = subprocess.Popen[bytes] | standbys.WarmWorker


def resolve_procs(value: int | str, topology: Topology, node: int) -> int:
    if value == "auto":
        accel = topology.nodes[node].accelerator
        return accel.count if accel and accel.count > 0 else 1
    try:
        procs = int(value)
    except (TypeError, ValueError):
        raise UsageError(
            f"--procs-per-node {value!r}: expected an integer >= 1 or 'auto'"
        ) from None
    if procs < 1:
        raise UsageError(f"--procs-per-node {procs}: expected an integer >= 1 or 'auto'")
    return procs


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="skyinfra-runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    launch = sub.add_parser("launch", help="run ENTRY on this node with the cluster's plugins")
    launch.add_argument("--topology", help=f"path or inline JSON (default ${TOPOLOGY_ENV})")
    launch.add_argument("--node", help=f"this node's index (default ${NODE_ENV}, else 0)")
    launch.add_argument(
        "--plugin",
        action="append",
        default=None,
        help="NAME or NAME:key=value,...; repeat in set-up order (replaces the topology's list)",
    )
    launch.add_argument("--procs-per-node", help="worker processes on this node: N or 'auto'")
    launch.add_argument("--result", help="write the node's results here as JSON")
    launch.add_argument(
        "-m",
        "--module",
        action="store_true",
        help="ENTRY is a module run as `python -m ENTRY` (as torchrun -m)",
    )
    launch.add_argument(
        "entry", help="package.module:function | script.py | script.py:function | -m package.module"
    )
    launch.add_argument("args", nargs=argparse.REMAINDER, help="-- ARGS passed to the entry")
    return parser


def main(argv: list[str] | None = None) -> None:
    """``skyinfra-runtime``, any of its commands (skyinfra_runtime.command)."""
    from skyinfra_runtime import command

    command.main(argv)


def launch(argv: list[str]) -> int:
    # Started by a job's agent: never outlive it (Linux), whatever ends it.
    agent = os.environ.pop(AGENT_PID_ENV, None)
    if agent is not None and not end_with_parent(signal.SIGTERM, agent):
        return exitcodes.INTERRUPTED  # the agent died before the call took effect
    parser = _parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the usage error
        return exitcodes.USAGE if exc.code else exitcodes.OK
    args = list(ns.args)
    if args[:1] == ["--"]:
        args = args[1:]
    project = _project_on_path()
    try:
        entry = Entrypoint.main_module(ns.entry) if ns.module else Entrypoint.parse(ns.entry)
        entry.check()
        flags = [parse_plugin_flag(p) for p in ns.plugin] if ns.plugin is not None else None
        if flags is not None:  # the user's flags are usage: refused as such, before any wait
            flags = list(validate_plugins(flags))
    except (EntrypointError, UsageError, PluginOptionError) as exc:
        print(f"skyinfra-runtime: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    try:
        # A job's own ports and nodes (the head gave them): its workers' world.
        cluster = load_topology(ns.topology)
        topology, node = job_topology(cluster, node_index(cluster, ns.node), os.environ)
        if flags is not None:
            topology = dataclasses.replace(topology, plugins=tuple(flags))
        # Unknown names and bad options fail here, before any wait (the table's rules).
        topology = dataclasses.replace(topology, plugins=validate_plugins(topology.plugins))
        procs = resolve_procs(
            ns.procs_per_node if ns.procs_per_node is not None else topology.procs_per_node,
            topology,
            node,
        )
        if any(p.name == "torch" for p in topology.plugins):
            procs = _torch_procs(procs, topology, node, chosen=ns.procs_per_node is not None)
    except UsageError as exc:
        print(f"skyinfra-runtime: {exc}", file=sys.stderr)
        return exitcodes.USAGE
    except RuntimeSetupError as exc:
        print(f"skyinfra-runtime: {exc}", file=sys.stderr)
        return exitcodes.SETUP_FAILED
    rundirs.prepare()
    return _supervise(entry, args, topology, node, procs, ns.result, project)


def _torch_procs(procs: int, topology: Topology, node: int, *, chosen: bool) -> int:
    accel = topology.nodes[node].accelerator
    gpus = node_gpus(accel.count if accel else 0, topology.provider)
    resolved = torch_procs(procs, gpus, chosen=chosen)
    if resolved != procs:
        print(
            f"skyinfra-runtime: torch on node {node} with {gpus} GPUs: {resolved} processes,"
            " one per GPU (procs_per_node 1 is the default; set it to choose)",
            file=sys.stderr,
        )
    return resolved


def _project_on_path() -> str:
    """The project (the current directory: `skyinfra run` starts the launcher in the run's
    copy of it) first on sys.path, so that ``package.module:function`` entries from it are
    found here and in the workers (which get it first on PYTHONPATH)."""
    project = os.getcwd()
    if project in sys.path:
        sys.path.remove(project)
    sys.path.insert(0, project)
    return project


def _scratch_parent() -> str | None:
    """Where the workers' result and status files go: the run's own directory, where a
    launcher killed before its cleanup leaves them to go with the run (pruned, or by `down`),
    never in the node's /tmp; the system's temporary folder where there is no run directory."""
    run_dir = os.environ.get(rundirs.RUN_DIR_ENV)
    if not run_dir:
        return None
    try:
        os.makedirs(run_dir, exist_ok=True)
    except OSError:
        return None
    return run_dir


def _supervise(
    entry: Entrypoint,
    args: list[str],
    topology: Topology,
    node: int,
    procs: int,
    result_path: str | None,
    project: str,
) -> int:
    topology_json = json.dumps(topology.to_dict())
    with tempfile.TemporaryDirectory(prefix=".launch-", dir=_scratch_parent()) as tmp:
        workers: list[Worker] = []
        interrupted = False
        # The workers have all ended and the exit code is known: a SIGTERM now (the job ending
        # this node after a peer's failure) neither changes it nor kills this launcher.
        decided = False

        warmth = _Warmth.of(topology, node, procs)

        def forward(signum: int, frame: object) -> None:
            nonlocal interrupted
            if decided:
                return
            interrupted = True
            _signal_each(workers, signal.SIGTERM)
            # Ended from outside (a peer died, a cancel, a notice), this launcher may be
            # killed before its end: the refill is asked now, so a restart finds it.
            warmth.after_end()

        old_int = signal.signal(signal.SIGINT, forward)
        old_term = signal.signal(signal.SIGTERM, forward)
        try:
            for worker in range(procs):
                if interrupted:
                    break  # ended while its workers were being started: start no more
                env = dict(os.environ)
                env.update(
                    {
                        TOPOLOGY_ENV: topology_json,
                        NODE_ENV: str(node),
                        WORKER_ENV: str(worker),
                        WORKERS_PER_NODE_ENV: str(procs),
                        startwork.LAUNCHER_PID_ENV: str(os.getpid()),
                        "PYTHONPATH": os.pathsep.join(
                            p for p in (project, os.environ.get("PYTHONPATH")) if p
                        ),
                    }
                )
                argv = [
                    sys.executable,
                    "-m",
                    "skyinfra_runtime.worker",
                    entry.text,
                    str(Path(tmp) / f"result-{worker}.json"),
                    str(_status_file(Path(tmp), worker)),
                    "--",
                    *args,
                ]
                workers.append(warmth.start(worker, argv, env))
            if interrupted:
                # The signal came while a worker was being started (a standby's imports, which
                # its take waits for, can last a while): forward reached only those before it.
                _signal_each(workers, signal.SIGTERM)
            warmth.after_start(node)
            code = _wait(workers, node, Path(tmp), lambda: warmth.when_past_start(Path(tmp)))
            decided = True
            # A worker killed by a signal (137 for SIGKILL; never the SIGTERM this launcher
            # forwards) died before the job ended this node: it, not the ending, is the exit,
            # so the job's record names the killed worker as the cause (a restart), not the
            # error its peers' collectives raised because of it.
            if interrupted and not worker_killed(code):
                return exitcodes.INTERRUPTED
            if not interrupted:
                warmth.after_end()
            if code == exitcodes.OK and result_path:
                _write_results(Path(tmp), procs, node, result_path)
            return code
        finally:
            # Once decided, forward stays (and ignores): this process exits with the code,
            # and a SIGTERM before its exit would kill it (-15) and lose the code.
            if not decided:
                signal.signal(signal.SIGINT, old_int)
                signal.signal(signal.SIGTERM, old_term)


def _write_results(tmp: Path, procs: int, node: int, result_path: str) -> None:
    results = [json.loads((tmp / f"result-{w}.json").read_text()) for w in range(procs)]
    Path(result_path).parent.mkdir(parents=True, exist_ok=True)
    Path(result_path).write_text(
        json.dumps({"schema": 1, "node": node, "workers": results}, indent=2)
    )


@dataclasses.dataclass
class _Warmth:
    """This job's use of the node's standbys: each worker taken from one or started cold,
    recorded in the run's timeline.json (the node's agent puts it in the job's record); then
    the keeper asked to fill every slot: as the job starts on a node with cores to spare (a
    restart within the job then starts warm), else once the job's workers here are past their
    start (the standbys' imports never compete with it) or it ended, whichever comes first
    (a cluster that runs nothing never pays for standbys)."""

    folder: Path | None
    warmup: warm.Warmup | None
    procs: int
    starts: list[WorkerStart] = dataclasses.field(default_factory=list)
    why_cold: str = ""  # why every worker starts cold (no standby is kept here)
    at_once: bool = False  # the node has cores to spare: ask as the job starts
    ended: bool = False  # the refill after the job's part was asked for
    past_start: bool = False  # the refill once the job's workers were past their start
    checked_at: float = 0.0  # when their status files were last read for it

    @classmethod
    def of(cls, topology: Topology, node: int, procs: int) -> _Warmth:
        node_dir = os.environ.get(rundirs.NODE_DIR_ENV)
        folder = standbys.folder(node_dir) if node_dir else None
        warmup = warm.node_warmup(topology.plugins, procs, os.environ)
        why = "" if warmup else "no standby for these plugins (warm: jax, torch, keras on both)"
        if not topology.warm_workers:
            if folder is not None:
                standbys.stop(folder)
            folder, why = None, "warm_workers = false"
        addresses = [n.private_ip for n in topology.nodes]
        on_host = warm.nodes_on_host(addresses, topology.nodes[node].private_ip)
        at_once = warm.cores_to_spare(len(os.sched_getaffinity(0)), on_host, procs)
        why = why or ("" if folder else "no node folder")
        return cls(folder, warmup, procs, why_cold=why, at_once=at_once)

    def start(self, worker: int, argv: list[str], env: dict[str, str]) -> Worker:
        if self.folder is not None and self.warmup is not None:
            job = standbys.Job(argv[3:], env, os.getcwd(), warm.job_env_names(os.environ))
            taken, start = standbys.take(self.folder, worker, self.warmup, job)
            self.starts.append(start)
            if taken is not None:
                return taken
        else:
            self.starts.append(WorkerStart(worker, warm=False, reason=self.why_cold))
        return subprocess.Popen(argv, env=env)

    def after_start(self, node: int) -> None:
        """Recorded; and, on a node with cores to spare, the standbys asked for at once."""
        run_dir = os.environ.get(rundirs.RUN_DIR_ENV)
        if run_dir:
            attempt = os.environ.get("SKYINFRA_ATTEMPT")
            record_starts(Path(run_dir), node, attempt, self.starts)
        if self.at_once and self.folder is not None and self.warmup is not None:
            self._ensure()

    def when_past_start(self, tmp: Path) -> None:
        """On a node without cores to spare, asked for once every worker of the job here is
        past its start (warm.past_start), read from their status files twice a second: a
        restart later in the job then finds its standbys imported."""
        if self.at_once or self.ended or self.past_start:
            return
        if self.folder is None or self.warmup is None:
            return
        now = time.time()
        if now - self.checked_at < 0.5:
            return
        self.checked_at = now
        if warm.past_start([_phase(_status_file(tmp, w)) for w in range(self.procs)], now):
            self.past_start = True
            self._ensure()

    def after_end(self) -> None:
        """Asked for (again) once the job's part here ended, or is being ended: a node
        without cores to spare whose job ended before it was past its start refills the slots
        the job took only now, so its standbys never compete with the job's start."""
        if self.folder is not None and self.warmup is not None and not self.ended:
            self.ended = True
            self._ensure()

    def _ensure(self) -> None:
        assert self.folder is not None and self.warmup is not None
        if warm.job_sets_framework(warm.job_env_names(os.environ)):
            return  # such a job never uses a standby: a spec's env saying so asks for none
        try:
            standbys.ensure(self.folder, self.procs, self.warmup, warm.standby_env(os.environ))
        except OSError as err:
            # Standbys only speed up a later start: a node that cannot keep them (a full disk)
            # fails neither the job nor a launcher ending its workers (this runs in forward).
            # One os.write: print() in a signal handler can meet a write already under way.
            os.write(
                sys.stderr.fileno(),
                f"skyinfra-runtime: standby workers not asked for ({err}); the next job on "
                "this node starts cold\n".encode(),
            )


def _status_file(tmp: Path, worker: int) -> Path:
    """Where a worker writes its phase (worker.py): the launcher reads it while it waits and
    to explain a worker killed by a signal."""
    return tmp / f"status-{worker}"


def _phase(status: Path) -> tuple[str, float] | None:
    """A worker's phase and when it last entered one or did start-up work (None: none yet)."""
    try:
        return status.read_text(), status.stat().st_mtime
    except OSError:
        return None


def _wait(workers: list[Worker], node: int, tmp: Path, tick: Callable[[], None]) -> int:
    """Wait for every worker, calling ``tick`` as it polls; at the first failure end the rest
    and return its exit code."""
    while True:
        tick()
        running = False
        for worker, proc in enumerate(workers):
            code = proc.poll()
            if code is None:
                running = True
                continue
            if code != exitcodes.OK:
                _end(workers)
                return _explain(code, node, worker, _status_file(tmp, worker))
        if not running:
            return exitcodes.OK
        time.sleep(0.05)


def _signal_each(workers: list[Worker], sig: int) -> None:
    for proc in workers:
        if proc.poll() is None:
            proc.send_signal(sig)


def _end(workers: list[Worker]) -> None:
    _signal_each(workers, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    for proc in workers:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _explain(code: int, node: int, worker: int, status: Path) -> int:
    if code >= 0:
        return code
    found = _phase(status)
    phase = found[0] if found is not None else startwork.SETUP
    during = phase
    if phase.startswith(startwork.plugin_setup("")):
        plugin = phase.partition(":")[2]
        during = f"set-up of plugin {plugin!r}"
        if plugin in ("jax", "torch"):
            # XLA aborts the process (SIGABRT) instead of raising when the coordinator
            # cannot gather every process within the timeout.
            during += " (a peer that never reached the rendezvous ends like this)"
    name = exitcodes.signal_name(-code)
    print(
        f"skyinfra-runtime: worker {worker} on node {node} was killed by signal {name}"
        f" during {during}",
        file=sys.stderr,
    )
    if -code in (signal.SIGTERM, signal.SIGINT):
        return exitcodes.INTERRUPTED
    if phase.startswith(startwork.SETUP):
        return exitcodes.SETUP_FAILED
    # Killed while the entry ran (OOM killer, kill -9): not an exception of the user's code.
    return exitcodes.SIGNALLED + -code


__all__ = ["TopologyError", "launch", "main"]
