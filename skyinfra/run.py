"""`skyinfra run`: copy the working directory to every node, launch the runtime on all of them
in parallel, stream output, stop at the first failure, and collect results into runs/<id>/.
"""

from __future__ import annotations

import fnmatch
import json
import queue
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyinfra_runtime import exitcodes as node_exitcodes
from skyinfra_runtime.topology import NODE_ENV, TOPOLOGY_ENV, Topology

from skyinfra import exitcodes
from skyinfra.errors import NodesNotReadyError, RunError, SkyinfraError
from skyinfra.transport.base import NodeProcess, NodeTransport, Readiness

IGNORE_FILE = ".skyinfraignore"
# Never shipped: VCS data, environments, caches, and skyinfra's own workspaces.
DEFAULT_IGNORES = (
    ".git",
    ".venv",
    "venv",
    ".skyinfra",
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".mypy_cache",
)


def read_ignore_patterns(src: Path) -> list[str]:
    patterns = list(DEFAULT_IGNORES)
    ignore_file = src / IGNORE_FILE
    if ignore_file.is_file():
        for line in ignore_file.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                patterns.append(line.rstrip("/"))
    return patterns


def make_ignore(patterns: Sequence[str], extra_paths: Sequence[str] = ()) -> Callable[[str], bool]:
    """gitignore-like: a pattern with '/' matches the relative path, else any path component."""

    def ignored(rel: str) -> bool:
        if rel in extra_paths:
            return True
        name = rel.rsplit("/", 1)[-1]
        for pattern in patterns:
            p = pattern.lstrip("/")
            if "/" in pattern:
                if fnmatch.fnmatchcase(rel, p):
                    return True
            elif fnmatch.fnmatchcase(name, p):
                return True
        return False

    return ignored


# How often `run` asks the nodes again while it waits, and how often it says it still waits
# when nothing changed.
READY_POLL_S = 5.0
READY_PROGRESS_S = 30.0


def check_readiness(transport: NodeTransport, topology: Topology) -> dict[int, Readiness]:
    """Every node's readiness, asked in parallel (an unreachable node costs a connect
    timeout; asked one after the other, N of them would cost N)."""
    indices = [n.index for n in topology.nodes]

    def ask(node: int) -> Readiness:
        try:
            return transport.readiness(node)
        except SkyinfraError as err:  # the protocol says never; a broken transport still might
            return Readiness("unreachable", str(err))

    if len(indices) == 1:
        return {indices[0]: ask(indices[0])}
    with ThreadPoolExecutor(max_workers=min(32, len(indices))) as pool:
        return dict(zip(indices, pool.map(ask, indices), strict=True))


def wait_until_ready(
    transport: NodeTransport,
    topology: Topology,
    *,
    timeout_s: float,
    echo: Callable[[str], None] = print,
    poll_s: float = READY_POLL_S,
    progress_s: float = READY_PROGRESS_S,
) -> None:
    """Return once every node's bootstrap finished; NodesNotReadyError as soon as one failed,
    or after ``timeout_s`` seconds (0: ask once) naming the nodes that are not ready."""
    names = {n.index: n.name for n in topology.nodes}
    total = len(names)
    start = time.monotonic()
    last_said: tuple[str, float] | None = None

    def describe(some: dict[int, Readiness]) -> str:
        return "; ".join(f"{names[i]}: {r.detail or r.state}" for i, r in sorted(some.items()))

    while True:
        states = check_readiness(transport, topology)
        failed = {i: r for i, r in states.items() if r.state == "failed"}
        if failed:
            raise NodesNotReadyError(
                f"cannot run: {describe(failed)}",
                nodes={names[i]: r.state for i, r in failed.items()},
            )
        waiting = {i: r for i, r in states.items() if not r.ready}
        elapsed = time.monotonic() - start
        if not waiting:
            if last_said is not None:
                echo(f"[skyinfra] all {total} node(s) ready after {elapsed:.0f} s")
            return
        if elapsed >= timeout_s:
            waited = f" after {timeout_s:.0f} s" if timeout_s > 0 else ""
            hint = (
                "; wait longer with `skyinfra run --wait-ready SECONDS`, or check `skyinfra status`"
                if timeout_s > 0
                else ""
            )
            raise NodesNotReadyError(
                f"{len(waiting)} of {total} node(s) not ready{waited}: {describe(waiting)}{hint}",
                nodes={names[i]: r.state for i, r in waiting.items()},
            )
        who = ", ".join(
            names[i] + (" (not reachable yet)" if r.state == "unreachable" else "")
            for i, r in sorted(waiting.items())
        )
        line = f"[skyinfra] waiting for {who} to finish bootstrap"
        if last_said is None or last_said[0] != line or elapsed - last_said[1] >= progress_s:
            echo(f"{line} ({total - len(waiting)}/{total} ready, {elapsed:.0f}/{timeout_s:.0f} s)")
            last_said = (line, elapsed)
        time.sleep(max(0.0, min(poll_s, timeout_s - elapsed)))


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


@dataclass
class NodeOutcome:
    node: int
    exit_code: int | None = None
    ended_by_us: bool = False
    result: Any = None


@dataclass
class RunReport:
    run_id: str
    run_dir: Path
    outcomes: dict[int, NodeOutcome] = field(default_factory=dict)
    first_failure: int | None = None

    @property
    def exit_code(self) -> int:
        """What `skyinfra run` exits with: OK, or NODE_FAILED whatever the node's own code."""
        return exitcodes.OK if self.first_failure is None else exitcodes.NODE_FAILED


def run_on_cluster(
    *,
    transport: NodeTransport,
    topology: Topology,
    topology_file: Path,
    runs_dir: Path,
    src: Path,
    entry: str,
    args: Sequence[str],
    all_logs: bool,
    extra_ignores: Sequence[str] = (),
    echo: Callable[[str], None] = print,
    wait_ready_s: float = 0.0,
    ready_poll_s: float = READY_POLL_S,
) -> RunReport:
    """``wait_ready_s``: how long to wait for nodes still bootstrapping (0: they must be
    ready now); nothing is copied or started before every node is ready."""
    wait_until_ready(transport, topology, timeout_s=wait_ready_s, echo=echo, poll_s=ready_poll_s)
    nodes = [n.index for n in topology.nodes]
    run_id = new_run_id()
    run_dir = runs_dir / run_id
    run_dir.mkdir(parents=True)
    report = RunReport(run_id, run_dir, {i: NodeOutcome(i) for i in nodes})
    ignore = make_ignore(read_ignore_patterns(src), extra_ignores)

    for i in nodes:
        root = transport.node_root(i)
        transport.copy_dir(i, src, f"{root}/work", ignore)
        transport.put_file(i, topology_file, f"{root}/topology.json")

    procs: dict[int, NodeProcess] = {}
    events: queue.Queue[tuple[int, str | None]] = queue.Queue()
    log_files = {i: (run_dir / f"node-{i}.log").open("w", encoding="utf-8") for i in nodes}

    def pump(i: int, proc: NodeProcess) -> None:
        for line in proc.lines():
            events.put((i, line))
        events.put((i, None))

    try:
        for i in nodes:
            root = transport.node_root(i)
            argv = [
                f"{root}/venv/bin/skyinfra-runtime", "launch",
                "--topology", f"{root}/topology.json",
                "--node", str(i),
                "--result", f"{root}/runs/{run_id}/result.json",
                entry,
            ]  # fmt: skip
            if args:
                argv += ["--", *args]
            env = {
                TOPOLOGY_ENV: f"{root}/topology.json",
                NODE_ENV: str(i),
                "SKYINFRA_RUN_ID": run_id,
                "PYTHONUNBUFFERED": "1",
            }
            procs[i] = transport.start(i, argv, env=env, cwd=f"{root}/work", tag=run_id)
            threading.Thread(target=pump, args=(i, procs[i]), daemon=True).start()

        open_streams = set(nodes)
        while open_streams:
            i, line = events.get()
            if line is None:
                open_streams.discard(i)
                code = procs[i].wait()
                report.outcomes[i].exit_code = code
                if code != 0 and report.first_failure is None:
                    report.first_failure = i
                    echo(f"[skyinfra] node-{i} exited with {code}; ending the other nodes")
                    for j, other in procs.items():
                        if j != i and other.poll() is None:
                            report.outcomes[j].ended_by_us = True
                            other.kill()
                continue
            log_files[i].write(line + "\n")
            log_files[i].flush()
            if all_logs or i == 0:
                echo(f"[node-{i}] {line}")
    except KeyboardInterrupt:
        for proc in procs.values():
            proc.kill()
        raise
    finally:
        for f in log_files.values():
            f.close()

    for i in nodes:
        local = run_dir / f"node-{i}.result.json"
        if transport.fetch(i, f"{transport.node_root(i)}/runs/{run_id}/result.json", local):
            try:
                report.outcomes[i].result = json.loads(local.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                report.outcomes[i].result = None

    summary = {
        "run_id": run_id,
        "entry": entry,
        "args": list(args),
        # What `skyinfra run` exits with (skyinfra.exitcodes); each node's own code is below.
        "exit_code": report.exit_code,
        "first_failure": report.first_failure,
        "nodes": [
            {
                "node": o.node,
                "exit_code": o.exit_code,
                "exit_meaning": node_exitcodes.describe(o.exit_code),
                "ended_by_skyinfra": o.ended_by_us,
                "result": o.result,
            }
            for o in report.outcomes.values()
        ],
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return report


def describe_exit(outcome: NodeOutcome) -> str:
    """A node's outcome in words, with the runtime's meaning of its exit code."""
    if outcome.ended_by_us:
        return f"ended by skyinfra after another node failed (exit {outcome.exit_code})"
    if outcome.exit_code == 0:
        return "ok (exit 0)"
    return f"failed (exit {outcome.exit_code}, {node_exitcodes.describe(outcome.exit_code)})"


def raise_for_failure(report: RunReport) -> None:
    """RunError (exit NODE_FAILED) naming the first failing node and every node's own code."""
    if report.first_failure is None:
        return
    first = report.outcomes[report.first_failure]
    codes = {i: o.exit_code for i, o in report.outcomes.items()}
    per_node = ", ".join(f"node-{o.node}: {describe_exit(o)}" for o in report.outcomes.values())
    raise RunError(
        f"run {report.run_id} failed on node {first.node} "
        f"(node-{first.node}, exit {first.exit_code}: "
        f"{node_exitcodes.describe(first.exit_code)}); "
        f"nodes: {per_node}; logs in {report.run_dir}",
        node=first.node,
        exit_codes=codes,
    )
