"""A handle to a detached job started by ``Cluster.submit`` (the jobs of `skyinfra run
--detach`, `jobs`, `logs`, `cancel`, through the same skyinfra.run.job code), and the
recovery of a job that lost nodes (`skyinfra jobs recover`, through skyinfra.run.recovery)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyinfra_runtime.jobrecord import JobRecord, JobState, NodeResult

from skyinfra.errors import InternalError, SupervisorGoneError, UsageError
from skyinfra.run.job import (
    RECORD_EVERY_S,
    JobClient,
    cancel_job,
    runtime_bin,
)
from skyinfra.run.jobcopies import JOB_COPY
from skyinfra.run.report import NodeOutcome, RunReport
from skyinfra.transport.base import NodeTransport
from skyinfra.workspace import Workspace

if TYPE_CHECKING:
    from skyinfra.lifecycle import Confirm
    from skyinfra.terraform import EngineFactory
    from skyinfra.topology import Topology


class Job:
    """One job on the cluster's nodes: ``id``, ``state``, ``logs()``, ``wait()``,
    ``cancel()``, ``result()``. The job belongs to the nodes: this handle (and the Python
    process holding it) can go without ending it; `skyinfra jobs/logs/cancel` see it too."""

    def __init__(
        self,
        ws: Workspace,
        transport: NodeTransport,
        job_id: str,
        run_dir: Path,
        name: str,
        echo: Callable[[str], None],
    ) -> None:
        self.id = job_id
        self.name = name
        self.run_dir = run_dir
        self._ws = ws
        self._transport = transport
        self._echo = echo
        self._client = JobClient(transport, job_id, run_dir / JOB_COPY)

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, call={self.name!r}, state={self.state!r})"

    def record(self) -> dict[str, Any]:
        """The head's record of the job, read now (what `skyinfra jobs JOB --json` prints)."""
        return self._record().to_dict()

    def _record(self) -> JobRecord:
        try:
            rec = self._client.record(fresh=True)
        except SupervisorGoneError as gone:  # killed: its record will never say so itself
            return replace(JobRecord.from_dict(gone.record), state=JobState.LOST)
        if rec is None:
            raise UsageError(f"no job {self.id!r} on cluster {self._ws.name!r}")
        return rec

    @property
    def state(self) -> str:
        """queued, starting, running, preempted, succeeded, failed, cancelled, timed_out,
        needs_nodes or lost."""
        return self._record().state.value

    def logs(
        self,
        *,
        follow: bool = False,
        node: int | None = 0,
        tail: int | None = None,
    ) -> str:
        """The job's output as the nodes keep it, each line prefixed by its node (``node``:
        one node, None: every node). ``follow``: print the lines as they come until the job
        ends (as `skyinfra logs --follow`). Returns the text."""
        total = len(self._record().nodes)
        if node is not None and not 0 <= node < total:
            raise UsageError(f"logs(node={node}): the job has nodes 0 to {total - 1}")
        nodes = list(range(total)) if node is None else [node]
        lines: dict[int, list[str]] = {i: [] for i in nodes}
        lock = threading.Lock()

        def read(i: int) -> None:
            root = self._transport.node_root(i)
            argv = [runtime_bin(self._transport, i), "logs", "--job", self.id, "--node-dir", root]
            argv += ["--follow"] if follow else []
            argv += ["--tail", str(tail)] if tail is not None else []
            proc = self._transport.start(
                i, argv, env={}, cwd=root, tag=f"{self.id}-logs-{i}-{time.time_ns()}"
            )
            for line in proc.lines():
                text = f"[node-{i}] {line}"
                with lock:
                    lines[i].append(text)
                    if follow:
                        self._echo(text)
            proc.wait(30)

        threads = [threading.Thread(target=read, args=(i,), daemon=True) for i in nodes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return "\n".join(line for i in nodes for line in lines[i])

    def wait(self, timeout: float | None = None) -> str:
        """Wait until the job ends; its final state. TimeoutError after ``timeout`` s."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            rec = self._record()
            state = rec.state.value
            if rec.final:
                return state
            if end is not None and time.monotonic() >= end:
                raise TimeoutError(f"job {self.id} still {state} after {timeout:g} s")
            time.sleep(RECORD_EVERY_S)

    def cancel(self) -> str:
        """End the job on every node (as `skyinfra cancel`) and wait until nothing of it runs;
        its final state. A job that already ended is left as it is."""
        if not self._record().final:
            cancel_job(self._transport, self.id)
        return self.state

    def result(self, timeout: float | None = None) -> list[Any]:
        """Wait for the job; the values the function returned, one per worker in rank order.
        A failed job raises RemoteError (every node's outcome, the first failing worker's
        traceback); a cancelled, timed-out or lost one RunError."""
        from skyinfra_runtime import exitcodes as node_exitcodes

        from skyinfra.api.calls import fetch_results, remote_error
        from skyinfra.errors import RunError

        state = self.wait(timeout)
        rec = self._record()
        nodes = {n.node: n for n in rec.nodes}
        if state == JobState.FAILED and rec.first_failure is not None:
            outcomes = {
                i: {
                    "exit_code": n.exit_code,
                    "meaning": node_exitcodes.describe(n.exit_code),
                    "ended_by_skyinfra": bool(n.ended_reason),
                    "reason": _reason(n),
                }
                for i, n in nodes.items()
            }
            first = rec.first_failure
            raise remote_error(self._transport, self.name, self.id, self.run_dir, first, outcomes)
        if state != JobState.SUCCEEDED:
            codes = {i: n.exit_code for i, n in nodes.items()}
            raise RunError(f"job {self.id} ({self.name}) ended {state}", exit_codes=codes)
        report = RunReport(self.id, self.run_dir)
        for i in nodes:
            outcome = NodeOutcome(i, exit_code=nodes[i].exit_code)
            local = self.run_dir / f"node-{i}.result.json"
            remote = f"{self._transport.node_root(i)}/runs/{self.id}/result.json"
            if self._transport.fetch(i, remote, local):
                outcome.result = json.loads(local.read_text(encoding="utf-8"))
            report.outcomes[i] = outcome
        return fetch_results(self._transport, report)


def _reason(node: NodeResult) -> str:
    said = f"exit {node.exit_code} ({node.meaning})".replace(" ()", "")
    why = node.ended_reason
    return f"ended by the job {why}: {said}" if why else said


def recover(
    ws: Workspace,
    job_id: str,
    *,
    engine_factory: EngineFactory,
    confirm: Confirm,
    echo: Callable[[str], None],
) -> RunReport:
    """`skyinfra jobs recover JOB` for the Python API (skyinfra.run.recovery.recover_job): the
    job's lost nodes replaced as `up` replaces them (``confirm`` answers what `up` asks), the
    current directory copied to them, the job started as its next attempt and followed until
    it ends; its report."""
    from skyinfra import lifecycle, shared_state
    from skyinfra.errors import ClusterDownError
    from skyinfra.run.launch import ClusterNodes
    from skyinfra.run.recovery import Recovery, recover_job
    from skyinfra.terraform.backend import has_backend
    from skyinfra.topology import read_topology
    from skyinfra.transport.readiness import wait_until_ready

    spec = ws.spec()
    if has_backend(ws.path):  # another operator may have changed the cluster
        engine = engine_factory(ws.path)
        shared_state.ensure_init(ws, engine)
        shared_state.refresh_topology(ws, spec, engine)
    if not ws.topology_file.is_file():
        raise ClusterDownError(ws.name)
    topology = read_topology(ws.topology_file)

    def replace_nodes(lost: list[int]) -> tuple[NodeTransport, Topology]:
        # As the CLI's replace_lost_nodes, under the lock recover_job holds (never node 0's
        # own copy of the workspace: that one recovers through the CLI).
        lifecycle.up(spec, ws, echo, engine_factory=engine_factory, confirm=confirm, lock_held=True)
        replaced = read_topology(ws.topology_file)
        nodes = lifecycle.transport_for(ws, replaced, spec=spec)
        wait_s = lifecycle.default_wait_ready_s(spec)
        wait_until_ready(nodes, replaced, timeout_s=wait_s, echo=echo)
        lifecycle.warm_nodes(
            nodes, spec, replaced, lost, echo, wait_s=lifecycle.REPLACED_WARM_WAIT_S
        )
        return nodes, replaced

    transport = lifecycle.transport_for(ws, topology, spec=spec)
    try:
        report = recover_job(
            ws,
            ClusterNodes(
                transport, topology, ws.topology_file, ws.runs_dir, replace_nodes=replace_nodes
            ),
            job_id,
            head_recovery=lambda: lifecycle.head_recovery_of(ws, spec),
            src=Path.cwd(),
            how=Recovery.FOLLOW,
            echo=echo,
            store_credentials=lambda: lifecycle.store_credentials_of(spec),
        )
    finally:
        transport.close()
    if report is None:  # only an unattended recovery leaves the attempt unfollowed
        raise InternalError(f"job {job_id}'s recovery returned no report")
    return report
