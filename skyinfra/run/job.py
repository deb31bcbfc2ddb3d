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
import json
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from skyinfra_runtime.jobrecord import (
    FINAL_STATES,
    RECOVERABLE_STATES,
    JobRecord,
    JobState,
    NodeResult,
)

from skyinfra import exitcodes
from skyinfra.errors import (
    ClusterBusyError,
    HeadLostError,
    SkyinfraError,
    SupervisorGoneError,
    TransportError,
    UsageError,
)
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
# How long `run --detach` waits for every node to report in, and how often it reads the
# head's record meanwhile (a launcher reports in within a fraction of a second: a poll of
# RECORD_EVERY_S made every submission wait 0.15 s more on average).
STARTED_WAIT_S = 60.0
STARTED_POLL_S = 0.1
# FINAL_STATES and RECOVERABLE_STATES: skyinfra_runtime.jobrecord's, the head's too.
__all__ = ["FINAL_STATES", "RECOVERABLE_STATES", "JobRecord", "JobState"]
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
        rec = self.client.record()
        if rec is not None and rec.world and self.node not in rec.world:
            return 0  # not one of the nodes the head gave the job (`run --nodes K`)
        n = self.client.node(self.node)
        if not n.ended:
            return None
        if rec is not None and rec.restarts_left and not rec.final:
            return None  # the supervisor may start it again as the next attempt
        if rec is not None and (rec.queued or rec.preempting):
            return None  # preempted: it resumes as its next attempt when its turn comes
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
        time.sleep(STARTED_POLL_S)


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
    alive; a running one before a queued one), or None; as JSON (what ClusterBusyError and
    verify say of it)."""
    jobs = [j for j in list_jobs(transport) if not j.final]
    for job in sorted(jobs, key=lambda j: j.queued):
        return job.to_dict()
    return None


def queue_words(job_id: str, queued: Mapping[str, Any]) -> str:
    """A queued job's place in the head's queue in words, from the head's word on it (its
    record's ``queue``, or what the head said when it queued it)."""
    position = queued.get("position") or 1
    waits = queued.get("waits_for") or "the cluster's nodes"
    return f"job {job_id} is queued (position {position}): it waits for {waits}"


def queued_hint(cluster: str, job_id: str) -> str:
    return (
        "the head starts it when its turn comes (first in, first out), whether or not "
        f"anything follows it; `skyinfra cancel --cluster {cluster} {job_id}` removes it "
        "from the queue"
    )


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


def running_jobs(
    make_transport: Callable[[], NodeTransport],
) -> tuple[list[JobRecord], str]:
    """The jobs still running or queued on the cluster (its head's records), newest first,
    and why they could not be read ("" when they could): for `status` and `down`."""
    found, why = cluster_jobs(make_transport)
    return [j for j in found if is_running(j)], why


def is_running(job: JobRecord) -> bool:
    """The job runs, or waits in the head's queue (it too ends with the cluster)."""
    return job.running or job.queued


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


def job_line(job: JobRecord) -> str:
    """One running job in words: id, entry, who started it and when."""
    entry = " ".join([job.entry, *job.args])
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.created_at or 0))
    if job.queued and job.queue is not None:
        return (
            f"{job.id} ({entry}; queued (position {job.queue.position}) by {job.started_by} "
            f"at {started})"
        )
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
