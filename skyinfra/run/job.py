"""The operator's side of a job (skyinfra_runtime.jobs holds the nodes' side).

A job is started by starting ``skyinfra-runtime supervise`` on the head (it detaches, listens
on the head's private address and prints its port), then on every peer, told where the head
listens; each returns at once. From then on the job belongs to the nodes: `run` (attached),
`jobs`, `logs` and `cancel` are clients that read the head's record
(``<head node dir>/jobs/<id>.json``) and follow the nodes' logs
(``<node dir>/runs/<id>/output.log``) through the cluster's NodeTransport, and can come and go.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import secrets
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from skyinfra_runtime.jobrecord import (
    FINAL_STATES,
    RECOVERABLE_STATES,
    JobRecord,
    JobState,
    NodeResult,
)
from skyinfra_runtime.topology import Topology

from skyinfra import exitcodes
from skyinfra.errors import (
    ClusterBusyError,
    Detached,
    HeadLostError,
    SkyinfraError,
    SupervisorGoneError,
    TransportError,
    UsageError,
)
from skyinfra.run.launch import JobLaunch, Restarts
from skyinfra.transport.base import NodeProcess, NodeTransport

# The signals that make an attached `run` stop following and leave the job running: a closed
# terminal (SIGHUP), and what CI runners, `timeout` and `kill` send (SIGTERM).
DETACHING_SIGNALS = (signal.SIGHUP, signal.SIGTERM)
# What an attached run says when the job's head went (head_gone).
HEAD_LOST = "node-0 (the job's head) was lost: its machine is gone (its folder, or its instance)"
# How often a client reads the head's record (at most).
RECORD_EVERY_S = 0.3
# How long a running job's record may stand still (its supervisor rewrites it every second
# while an attempt runs) before a follower asks the head whether the supervisor still lives;
# also how often it asks again while the record stands still (a final checkpoint upload).
SUPERVISOR_QUIET_S = 10.0
# How long `run --detach` waits for every node to report in.
STARTED_WAIT_S = 60.0
# FINAL_STATES and RECOVERABLE_STATES: skyinfra_runtime.jobrecord's, the head's too.
__all__ = ["FINAL_STATES", "RECOVERABLE_STATES", "JobRecord", "JobState"]
# `jobs --stall-after`'s default, in minutes: longer than what a healthy job may spend
# without a line (an XLA compile of a large model, a checkpoint written to disk, an evaluation
# pass that prints only at its end: each can take 10-20 minutes), shorter than the idle
# shutdown's default 60 minutes, so a hung job (a collective waiting on a dead peer) is flagged
# well within the hour it would otherwise burn unnoticed.
DEFAULT_STALL_AFTER_MIN = 30.0
# What `logs --follow` (and a job's exit code in general) comes to, per final state.
STATE_EXIT = {
    JobState.SUCCEEDED: exitcodes.OK,
    JobState.FAILED: exitcodes.NODE_FAILED,
    JobState.TIMED_OUT: exitcodes.RUN_TIMEOUT,
    JobState.CANCELLED: exitcodes.INTERRUPTED,
    JobState.LOST: exitcodes.ERROR,
    JobState.NEEDS_NODES: exitcodes.NODE_FAILED,
}


def follow_hint(cluster: str, job_id: str) -> str:
    """How to come back to a job, in commands."""
    return (
        f"  follow:  skyinfra logs --cluster {cluster} {job_id} --follow\n"
        f"  state:   skyinfra jobs --cluster {cluster} {job_id}\n"
        f"  cancel:  skyinfra cancel --cluster {cluster} {job_id}"
    )


def runtime_bin(transport: NodeTransport, node: int) -> str:
    return f"{transport.node_root(node)}/venv/bin/skyinfra-runtime"


def record_path(transport: NodeTransport, job_id: str) -> str:
    return f"{transport.node_root(0)}/jobs/{job_id}.json"


def _call(
    transport: NodeTransport, node: int, args: Sequence[str], tag: str, timeout: float = 60.0
) -> str:
    """Run a short skyinfra-runtime command on a node; its output (exit 0 expected)."""
    root = transport.node_root(node)
    proc = transport.start(node, [runtime_bin(transport, node), *args], env={}, cwd=root, tag=tag)
    out = "\n".join(proc.lines())
    code = proc.wait(timeout)
    if code != 0:
        raise TransportError(f"node {node}: skyinfra-runtime {args[0]} exited {code}: {out}")
    return out


def who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


# Per node: the launcher's argv, environment and working directory.
NodeLaunches = Mapping[int, tuple[list[str], dict[str, str], str]]


def start_job(
    transport: NodeTransport,
    topology: Topology,
    job_id: str,
    launch: JobLaunch,
    per_node: NodeLaunches,
    *,
    timeout_s: float | None,
    attempts_before: Sequence[Mapping[str, Any]] = (),
    created_at: float | None = None,
) -> None:
    """Start every node's agent: the head first (it says which port it listens on), then
    the peers. ``per_node``: each node's launcher. The job's token and ``launch``'s job_env
    (the user's env and secrets) go on each agent's stdin, never on a command line or in a
    file; the record keeps env and the secrets' names. ``launch``'s checkpoints: the job's
    checkpoint set (None: the job id), on every agent's command line (``--checkpoints``) and
    in the record. ``created_at``: a job started again (after ``attempts_before``) keeps its
    first creation time, from which its timeout counts."""
    # A hang-up or SIGTERM while the agents start waits until every one has (a job whose peers
    # never start would fail after JOIN_WAIT_S), then stops following (Detached), as the
    # handler `run` installed would. Deferred by a handler of our own, not by blocking the
    # signal: a blocked mask would be inherited by the agents and the user's processes.
    old: dict[int, Any] = {}
    hung_up: list[int] = []
    if threading.current_thread() is threading.main_thread():
        for signum in DETACHING_SIGNALS:
            current = signal.getsignal(signum)
            if callable(current):
                old[signum] = current
                signal.signal(signum, lambda got, _: hung_up.append(got))
    recover = (launch.restarts or Restarts()).head_recovery
    if recover is not None and recover.prepare is not None:
        recover.prepare(transport)  # what node 0's recovery command needs there
    try:
        _start_agents(
            transport,
            topology,
            job_id,
            launch,
            per_node,
            timeout_s=timeout_s,
            attempts_before=attempts_before,
            created_at=created_at,
        )
    finally:
        for number, handler in old.items():
            signal.signal(number, handler)
    if hung_up:  # every agent started (a failure to start raised above)
        raise Detached(job_id, hung_up[0])


def _start_agents(
    transport: NodeTransport,
    topology: Topology,
    job_id: str,
    launch: JobLaunch,
    per_node: NodeLaunches,
    *,
    timeout_s: float | None,
    attempts_before: Sequence[Mapping[str, Any]] = (),
    created_at: float | None = None,
) -> None:
    """``attempts_before``: a job started again after a lost node was replaced goes on as the
    next attempt (its record keeps the earlier ones)."""
    token = secrets.token_hex(16)
    job_env, checkpoints = launch.job_env, launch.checkpoints
    restarts = launch.restarts or Restarts()
    private = {"token": token, **job_env.private()}
    # The head's alone, with the token and secrets (not in the record): the command it runs
    # to recover the job itself, and that command's settings.
    recover = restarts.head_recovery
    head_private = {**private, **({"recover": recover.private()} if recover else {})}
    head_ip = topology.nodes[0].private_ip
    meta = {
        "entry": launch.entry,
        "args": list(launch.args),
        "started_by": who(),
        "nodes_total": len(per_node),
        "checkpoints": checkpoints or job_id,
        **job_env.record(),
        **({"attempts_before": [dict(a) for a in attempts_before]} if attempts_before else {}),
        **({"created_at": created_at} if created_at is not None else {}),
    }

    def start(i: int, role: list[str]) -> NodeProcess:
        argv, env, cwd = per_node[i]
        sup = [
            runtime_bin(transport, i), "supervise",
            "--job", job_id,
            "--node-dir", transport.node_root(i),
            "--node", str(i),
            "--private-stdin",
            "--checkpoints", checkpoints or job_id,
            "--attempt", str(len(attempts_before) + 1),
            *role,
        ]  # fmt: skip
        stdin = json.dumps(head_private if i == 0 else private).encode()
        return transport.start(
            i, [*sup, "--", *argv], env=env, cwd=cwd, tag=f"{job_id}-start", stdin=stdin
        )

    def started(i: int, proc: NodeProcess) -> dict[str, Any]:
        out = list(proc.lines())
        code = proc.wait(60)
        said = json_line(out)
        if said is not None and isinstance(said.get("busy"), dict):
            # The head refused: another job's supervisor started first (refuse_if_busy's
            # look came before it).
            raise ClusterBusyError(topology.cluster, said["busy"])
        if code != 0 or said is None:
            raise TransportError(
                f"node {i}: the job's agent did not start (exit {code}): "
                + job_env.mask(" ".join(out))
            )
        return said

    role = ["--nodes", str(len(per_node)), "--listen", head_ip, "--meta", json.dumps(meta)]
    if timeout_s is not None:
        role += ["--timeout", f"{timeout_s:g}"]
    role += ["--max-restarts", str(restarts.max_restarts), "--retry-on", restarts.retry_on]
    said = started(0, start(0, role))
    head = f"{said.get('host', head_ip)}:{said['port']}"
    # The peers start together: each start is a process (or an SSH channel) of its own, and
    # waiting for one before starting the next cost 0.2 s a node (1.5 s of an 8-node start).
    peers = {i: start(i, ["--head", head]) for i in sorted(per_node) if i != 0}
    failed: list[TransportError] = []
    for i, proc in peers.items():  # every one is waited for, even after a failure
        try:
            started(i, proc)
        except TransportError as err:
            failed.append(err)
    if failed:
        raise failed[0]


def json_line(lines: Sequence[str]) -> dict[str, Any] | None:
    for line in reversed(lines):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return None


class JobClient:
    """Reads one job's record from the head (at most every RECORD_EVERY_S) and asks for its
    end; shared by the threads of an attached run."""

    def __init__(self, transport: NodeTransport, job_id: str, local_copy: Path) -> None:
        self.transport = transport
        self.job_id = job_id
        self._local = local_copy
        self._lock = threading.Lock()
        self._read_at = 0.0
        self._record: JobRecord | None = None
        self._cancelled = threading.Event()
        self._cancelling = False
        self.head_lost = False  # node 0 is gone: its supervisor and the record with it
        # The record's last saved_at and when (monotonic) it was first seen, or last asked.
        self._saved_at: object = None
        self._quiet_since = time.monotonic()
        self._supervisor_gone: SupervisorGoneError | None = None  # once seen, said every time

    def record(self, *, fresh: bool = False) -> JobRecord | None:
        """The head's record, read again at most every RECORD_EVERY_S; HeadLostError once the
        head itself is gone (its last copy stays in ``last_record``)."""
        with self._lock:
            if self._supervisor_gone is not None:
                raise self._supervisor_gone
            if fresh or time.monotonic() - self._read_at >= RECORD_EVERY_S:
                if self._fetch():
                    # Never half-written on the head (atomic); a copy cut short: read again.
                    with contextlib.suppress(ValueError):
                        self._record = JobRecord.from_dict(
                            json.loads(self._local.read_text(encoding="utf-8"))
                        )
                self._read_at = time.monotonic()
                self._check_supervisor()
            return self._record

    def _check_supervisor(self) -> None:
        """SupervisorGoneError when the record of a running job has stood still for
        SUPERVISOR_QUIET_S and the head says its supervisor is gone (a killed supervisor
        never writes the record's end: without this a follower would wait forever)."""
        rec = self._record
        if rec is None or rec.final:
            return
        if rec.saved_at != self._saved_at:
            self._saved_at, self._quiet_since = rec.saved_at, time.monotonic()
            return
        if time.monotonic() - self._quiet_since < SUPERVISOR_QUIET_S:
            return
        self._quiet_since = time.monotonic()  # asked again only after another quiet spell
        for job in list_jobs(self.transport):
            if job.id == self.job_id and job.state is JobState.LOST:
                self.head_lost = True
                self._supervisor_gone = SupervisorGoneError(
                    f"the job's supervisor on node-0 is gone (pid {rec.supervisor_pid}:"
                    " killed; its record still says the job runs)",
                    record=rec.to_dict(),
                )
                raise self._supervisor_gone

    def _fetch(self) -> bool:
        try:
            return self.transport.fetch(0, record_path(self.transport, self.job_id), self._local)
        except TransportError as err:
            if head_gone(self.transport):
                self.head_lost = True
                raise HeadLostError(HEAD_LOST) from err
            raise

    @property
    def last_record(self) -> JobRecord | None:
        """The record as last read (the head's, before it was lost)."""
        return self._record

    def node(self, i: int) -> NodeResult:
        """Node ``i``'s part as the record says (one still starting before the record has
        it)."""
        rec = self.record()
        return (rec.node(i) if rec is not None else None) or NodeResult(i)

    def cancel(self) -> None:
        """Ask the supervisor to end every node, wait until it did; one ask, however many
        threads call."""
        with self._lock:
            if self.head_lost:
                return  # nobody left to ask: the run ends the others' parts (end_node_part)
            first = not self._cancelling
            self._cancelling = True
        if first:
            try:
                # A job that already ended has nothing to end, and one that waits for its lost
                # nodes must stay so (a cancel would say it is not to be recovered).
                rec = self.record(fresh=True)
                if rec is None or not rec.final:
                    cancel_job(self.transport, self.job_id)
            finally:
                self._cancelled.set()
        self._cancelled.wait(120)

    def follow(self, node: int, skip_lines: int = 0) -> NodeProcess:
        """The node's log from its start (after ``skip_lines`` lines already shown)."""
        root = self.transport.node_root(node)
        return self.transport.start(
            node,
            [runtime_bin(self.transport, node), "logs", "--job", self.job_id,
             "--node-dir", root, "--follow", "--skip-lines", str(skip_lines)],
            env={},
            cwd=root,
            tag=f"{self.job_id}-follow-{secrets.token_hex(3)}",
        )  # fmt: skip


class JobNodeProcess:
    """One node of a job as a NodeProcess: its output from the node's log, its exit code from
    the head's record, and kill() asks the job to end (the supervisor ends every node)."""

    def __init__(self, node: int, client: JobClient, skip_lines: int = 0) -> None:
        self.node = node
        self.client = client
        self.follower = client.follow(node, skip_lines)

    def lines(self) -> Iterator[str]:
        return self.follower.lines()

    def poll(self) -> int | None:
        n = self.client.node(self.node)
        if not n.ended:
            return None
        rec = self.client.record()
        if rec is not None and rec.restarts_left and not rec.final:
            return None  # the supervisor may start it again as the next attempt
        return n.exit_code if n.exit_code is not None else 255  # an agent that vanished

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if end is not None and time.monotonic() >= end:
                raise TimeoutError(f"node {self.node} still runs")
            time.sleep(RECORD_EVERY_S)
        return code

    def vanished(self) -> bool:
        """The node ended without an exit code: its agent went away (the node lost), which
        the 255 that ``poll`` returns for it does not say."""
        return self.client.node(self.node).vanished

    def kill(self, grace_s: float = 10.0) -> None:
        self.client.cancel()

    def job_reason(self) -> str:
        """Why the job's supervisor ended this node ("" when it ended by itself)."""
        return self.client.node(self.node).ended_reason

    def tail_at_end(self) -> list[str] | None:
        """The node's last lines when the job ended it (before its SIGTERM's own output)."""
        tail = self.client.node(self.node).tail_at_end
        return None if tail is None else list(tail)

    def finish(self, timeout: float = 10.0) -> None:
        """Wait for the follower (it ends once the node's part of the job has), else end it."""
        try:
            self.follower.wait(timeout)
        except (TimeoutError, subprocess.TimeoutExpired):
            self.stop_following()

    def stop_following(self) -> None:
        with contextlib.suppress(SkyinfraError, OSError, subprocess.SubprocessError):
            self.follower.kill(grace_s=1.0)


def wait_started(client: JobClient, timeout_s: float = STARTED_WAIT_S) -> JobRecord:
    """The record once every node has started (or the job already ended)."""
    end = time.monotonic() + timeout_s
    while True:
        rec = client.record(fresh=True)
        if rec is not None and rec.state is not JobState.STARTING:
            return rec
        if time.monotonic() >= end:
            raise TransportError(f"job {client.job_id}: not every node started in {timeout_s:g} s")
        time.sleep(RECORD_EVERY_S)


def list_jobs(transport: NodeTransport) -> list[JobRecord]:
    """Every job the head knows, newest first: the one place the operator reads the head's
    records into the type (skyinfra_runtime.jobrecord)."""
    out = _call(transport, 0, ["jobs", "--node-dir", transport.node_root(0)], tag=f"jobs-{_tag()}")
    data = _json_any(out)
    jobs = []
    for item in data if isinstance(data, list) else []:
        with contextlib.suppress(ValueError):  # not a job's record: the head skips them too
            jobs.append(JobRecord.from_dict(item))
    return sorted(jobs, key=lambda j: j.id, reverse=True)


def running_job(transport: NodeTransport) -> dict[str, Any] | None:
    """The job that holds the cluster's nodes now (its record not final, its supervisor
    alive), or None; as JSON (what ClusterBusyError and verify say of it)."""
    for job in list_jobs(transport):
        if not job.final:
            return job.to_dict()
    return None


def refuse_if_busy(transport: NodeTransport, cluster: str) -> None:
    """ClusterBusyError (exit 2) while a job runs on the cluster: one job at a time, since
    every job's coordinator and rendezvous are the cluster's ports. The head checks again,
    under its lock, when the job's supervisor starts."""
    job = running_job(transport)
    if job is not None:
        raise ClusterBusyError(cluster, job)


# The word for the newest job wherever a command takes a job id.
LAST_JOB = "last"


def resolve_job(transport: NodeTransport, given: str) -> JobRecord:
    """The job a person means by ``given``: its full id, ``last`` (the newest), or a part of
    an id that only one job's id starts or ends with. UsageError (exit 2) naming the
    candidates when several match, or when none does."""
    jobs = list_jobs(transport)  # newest first
    if given == LAST_JOB:
        if not jobs:
            raise UsageError("`last`: this cluster has no jobs yet (`skyinfra jobs` lists them)")
        return jobs[0]
    exact = [j for j in jobs if j.id == given]
    if exact:
        return exact[0]
    matches = [j for j in jobs if j.id.startswith(given) or j.id.endswith(given)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        ids = ", ".join(j.id for j in matches[:10])
        more = f" and {len(matches) - 10} more" if len(matches) > 10 else ""
        raise UsageError(
            f"job {given!r} matches {len(matches)} jobs: {ids}{more}; give more of the id"
        )
    raise UsageError(
        f"no job {given!r} on this cluster: give a job's id, a part that only one id starts or "
        f"ends with, or `{LAST_JOB}` (`skyinfra jobs` lists them)"
    )


def find_job(transport: NodeTransport, job_id: str) -> JobRecord:
    """The job's record; UsageError (exit 2) naming the id when there is none."""
    for job in list_jobs(transport):
        if job.id == job_id:
            return job
    raise UsageError(f"no job {job_id!r} on this cluster (`skyinfra jobs` lists them)")


def head_gone(transport: NodeTransport) -> bool:
    """Node 0 is certainly gone, not just unreachable for a moment: only a transport that can
    tell says so (the local target: its folder; AWS: EC2 says its instance is terminated);
    elsewhere a failed read stays an error."""
    return transport.node_gone(0)


def end_node_part(transport: NodeTransport, node: int, job_id: str) -> None:
    """End one node's part of a job whose head is gone: its agent (SIGTERM: it ends its
    launcher) and wait until it went, so that a next attempt never meets it."""
    root = transport.node_root(node)
    _call(
        transport,
        node,
        ["cancel", "--job", job_id, "--node-dir", root],
        tag=f"{job_id}-end-{_tag()}",
        timeout=120,
    )


def cancel_job(transport: NodeTransport, job_id: str) -> dict[str, Any]:
    out = _call(
        transport,
        0,
        ["cancel", "--job", job_id, "--node-dir", transport.node_root(0)],
        tag=f"{job_id}-cancel-{_tag()}",
        timeout=120,
    )
    said = json_line(out.splitlines())
    return said or {}


def _json_any(text: str) -> Any:
    for line in reversed(text.splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def _tag() -> str:
    return secrets.token_hex(3)


@dataclass(frozen=True)
class JobView:
    """A job's record as `jobs` shows it: with the newest output of its nodes, that output's
    age and whether the job is stalled (:func:`annotate`), each node's result when it is
    known, and the state said otherwise for a copy kept after the cluster went down."""

    record: JobRecord
    last_output_at: float | None = None
    last_output_age_s: float | None = None
    stalled: bool = False
    results: Mapping[int, Any] | None = None  # each node's result.json (a function's job)
    shown_state: str | None = None

    @property
    def state(self) -> str:
        return self.shown_state or self.record.state.value

    def to_dict(self) -> dict[str, Any]:
        """What `jobs --json` prints: the record, and the three keys :func:`annotate` adds."""
        out = {
            **self.record.to_dict(),
            "last_output_at": self.last_output_at,
            "last_output_age_s": self.last_output_age_s,
            "stalled": self.stalled,
        }
        if self.results is not None:
            for n in out["nodes"]:
                n["result"] = self.results.get(n["node"])
        return out


def annotate(job: JobRecord, stall_after_s: float) -> JobView:
    """``job`` with ``last_output_at`` (the newest of its nodes'), ``last_output_age_s``
    (from the head's ``checked_at``: one clock; counted from the job's start while no node
    has printed) and ``stalled`` (a running job whose every node has been silent that long)."""
    times = [n.last_output_at for n in job.nodes if n.last_output_at]
    last = max(times) if times else None
    since = last or job.started_at or job.created_at
    checked = job.checked_at or time.time()
    age = max(0.0, float(checked) - float(since)) if since else None
    return JobView(
        job,
        last_output_at=last,
        last_output_age_s=None if age is None else round(age, 1),
        stalled=bool(job.running and age is not None and age >= stall_after_s),
    )


def is_function_entry(entry: str) -> bool:
    """``script.py:function`` or ``package.module:function`` (what returns a value)."""
    return ":" in entry and not entry.startswith("-m ")


def job_results(transport: NodeTransport, job: JobRecord, into: Path) -> dict[int, Any]:
    """Each node's result.json of the job (the launcher writes it when the entry, a function,
    returned on every worker of the node), fetched into ``into``; a node without one: None."""
    job_id = job.id
    results: dict[int, Any] = {}
    for n in job.nodes:
        i = n.node
        local = into / f"node-{i}.result.json"
        try:  # a lost node (its folder gone) has none: the others' are still shown
            remote = f"{transport.node_root(i)}/runs/{job_id}/result.json"
            found = transport.fetch(i, remote, local)
        except (SkyinfraError, OSError):
            found = False
        results[i] = None
        if found:
            with contextlib.suppress(ValueError, OSError):
                results[i] = json.loads(local.read_text(encoding="utf-8"))
    return results


def running_jobs(
    make_transport: Callable[[], NodeTransport],
) -> tuple[list[JobRecord], str]:
    """The jobs still running on the cluster (its head's records), newest first, and why
    they could not be read ("" when they could): for `status` and `down`."""
    found, why = cluster_jobs(make_transport)
    return [j for j in found if is_running(j)], why


def is_running(job: JobRecord) -> bool:
    return job.running


def cluster_jobs(
    make_transport: Callable[[], NodeTransport],
) -> tuple[list[JobRecord], str]:
    """Every job on the cluster (its head's records), newest first, and why they could not be
    read ("" when they could)."""
    try:
        transport = make_transport()
        try:
            found = list_jobs(transport)
        finally:
            transport.close()
    except (SkyinfraError, OSError) as err:
        return [], str(err)
    return found, ""


# The copy of the job's record (from the head) in runs/<id>/.
JOB_COPY = "job.json"


def keep_job_copies(runs_dir: Path, jobs: Sequence[JobRecord]) -> None:
    """Each job's record as the head has it now, into the copy a `run` from this workspace
    keeps (runs/<id>/job.json): `down` takes the head's records with the cluster, and a
    detached job's copy was last written when it started."""
    for job in jobs:
        folder = runs_dir / job.id
        if not folder.is_dir():  # started from another workspace
            continue
        kept = replace(job, checked_at=None)  # the head's clock, now
        _write_copy(folder / JOB_COPY, kept.to_dict())


def mark_ended_by_down(runs_dir: Path, job_ids: Sequence[str]) -> None:
    """The kept copies of the running jobs `down` ends with the cluster say so."""
    for job_id in job_ids:
        copy = runs_dir / job_id / JOB_COPY
        try:
            kept = JobRecord.from_dict(json.loads(copy.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
        _write_copy(copy, replace(kept, ended_by_down=True).to_dict())


def _write_copy(path: Path, record: Mapping[str, Any]) -> None:
    part = path.with_name(f".{path.name}.part")
    part.write_text(json.dumps(record, indent=2), encoding="utf-8")
    part.replace(path)


def job_line(job: JobRecord) -> str:
    """One running job in words: id, entry, who started it and when."""
    entry = " ".join([job.entry, *job.args])
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.created_at or 0))
    return f"{job.id} ({entry}; started by {job.started_by} at {started})"


def announce_running(found: tuple[list[JobRecord], str], echo: Callable[[str], None]) -> list[str]:
    """`down`: say which running jobs end with the cluster (or that they could not be read);
    their ids."""
    jobs, why = found
    if why:
        echo(f"[skyinfra] could not read the cluster's jobs (any still running ends): {why}")
    for job in jobs:
        echo(f"[skyinfra]   running job {job_line(job)}: ends with the cluster")
    return [job.id for job in jobs]
