"""Jobs that outlive the terminal: `jobs`, `logs`, `cancel` (a job is started by `run`)."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from skyinfra import exitcodes
from skyinfra.cli.jobs_shown import as_last_seen, kept_job_copies, print_jobs, show_job
from skyinfra.cli.options import cluster_option, dir_option, json_option
from skyinfra.cli.resolve import echo, refresh_shared_topology, workspace

if TYPE_CHECKING:
    from skyinfra.run.launch import ClusterNodes
    from skyinfra.run.recovery import Recovery
    from skyinfra.run.report import RunReport
    from skyinfra.transport.base import NodeProcess, NodeTransport
    from skyinfra.workspace import Workspace


def _cluster(
    clusters_root: Path | None, name: str | None, *, head_may_be_gone: bool = False
) -> tuple[Workspace, NodeTransport, int]:
    """The workspace, its transport and its node count; a cluster that is down: exit 2; one
    whose node 0 is gone: HeadLostError unless ``head_may_be_gone``."""
    ws = workspace(clusters_root, name, changes_something=False)
    refresh_shared_topology(ws)  # state in S3: another operator may have changed the cluster
    return _cluster_of(ws, head_may_be_gone=head_may_be_gone)


def _cluster_of(
    ws: Workspace, *, head_may_be_gone: bool = False
) -> tuple[Workspace, NodeTransport, int]:
    """:func:`_cluster` of a workspace already chosen (its shared state refreshed)."""
    from skyinfra import lifecycle
    from skyinfra.topology import read_topology

    if not ws.topology_file.is_file():
        raise lifecycle.not_up_error(ws)
    topology = read_topology(ws.topology_file)
    transport = lifecycle.transport_for(ws, topology, spec=ws.spec())
    if not head_may_be_gone:
        _refuse_lost_head(ws, transport)
    return ws, transport, len(topology.nodes)


def _refuse_lost_head(ws: Workspace, transport: NodeTransport) -> None:
    """Node 0 gone (local target: its folder): the job records and supervisors were on it, so
    no job can be shown, followed, cancelled or recovered; say so, and what to run."""
    from skyinfra.errors import HeadLostError
    from skyinfra.run.job import HEAD_LOST, head_gone

    if head_gone(transport):
        raise HeadLostError(
            f"cluster {ws.name!r}: {HEAD_LOST}, and with it every job's record and supervisor "
            "(the other nodes end their parts of a job once its head is gone). `skyinfra up` "
            "replaces node-0; a job's checkpoint set outlives it (`skyinfra checkpoints`): "
            "`skyinfra run --checkpoints NAME ...` starts the job again from its last "
            "checkpoint, or, for a job started from this workspace with restarts left, "
            "`skyinfra jobs recover JOB` replaces node-0 and starts it as its next attempt"
        )


@click.command("jobs")
@cluster_option
@dir_option
@json_option
@click.option(
    "--stall-after",
    "stall_after",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="MINUTES",
    help="Mark a running job stalled when every node has been silent this long "
    "(default 30: longer than a compile, a checkpoint or an evaluation pass that prints "
    "nothing, shorter than the 60-minute idle shutdown).",
)
@click.option(
    "--unattended",
    is_flag=True,
    hidden=True,
    help="`recover` as node 0's supervisor runs it (the cluster's recover setting): from "
    "node 0's copy of the project, waiting for a busy workspace, not following the job.",
)
@click.option(
    "--all",
    "recover_all",
    is_flag=True,
    help="`recover --all`: every job the lost head took with it (lost, or waiting for lost "
    "nodes), started again in the order the head had them; not followed.",
)
@click.argument("words", metavar="[JOB | recover JOB | recover --all]", nargs=-1)
def jobs(
    cluster_name: str | None,
    clusters_root: Path | None,
    as_json: bool,
    stall_after: float | None,
    unattended: bool,
    recover_all: bool,
    words: tuple[str, ...],
) -> None:
    """The cluster's jobs, newest first (id, entry, state, started, duration, the last
    output's age, each node's exit code; a running job whose every node has been silent for
    --stall-after minutes is marked stalled); JOB: that one in full, with each node's
    result when the entry is a function, and each attempt of a restarted job.

    `jobs recover JOB`: a job that lost a node while nobody followed it (state needs_nodes):
    replace the node as `up` does, copy the current directory to it (run it from the
    project's folder, as `run` was), start the job again as its next attempt and follow it;
    a job whose supervisor was killed (state lost, node 0 there): start it again on the same
    nodes. Not once its --timeout, counted from its first start, has run out.

    `jobs recover --all`: the queue after a lost head (or its killed supervisors): every such
    job started again as `recover JOB` does, in the order the head had them (the jobs that
    held nodes first, then the queue's, by priority, then submission), none followed; those
    whose nodes are taken wait in the head's queue again."""
    import tempfile

    from skyinfra.errors import UsageError

    if recover_all:
        if words != ("recover",) or unattended:
            raise UsageError(f"--all goes with `jobs recover` alone (got {' '.join(words)!r})")
        _recover_all(clusters_root, cluster_name)
        return
    if len(words) == 2 and words[0] == "recover":
        from skyinfra.errors import JobNoLongerWaits

        try:
            _recover(clusters_root, cluster_name, words[1], unattended=unattended)
        except JobNoLongerWaits:
            echo(f"[skyinfra] job {words[1]} no longer waits for its nodes: nothing to do")
        return
    if unattended:
        raise UsageError("--unattended goes with `recover JOB` only")
    if len(words) > 1:
        raise UsageError(
            f"jobs {' '.join(words)}: expected JOB, or `recover JOB` (got {len(words)} words)"
        )
    job_id = words[0] if words else None

    from dataclasses import replace

    from skyinfra.run.job import list_jobs, resolve_job
    from skyinfra.run.jobview import (
        DEFAULT_STALL_AFTER_MIN,
        annotate,
        is_function_entry,
        job_results,
    )

    stall_s = (DEFAULT_STALL_AFTER_MIN if stall_after is None else stall_after) * 60
    ws = workspace(clusters_root, cluster_name, changes_something=False)
    refresh_shared_topology(ws)  # state in S3: another operator may have changed the cluster
    kept = kept_job_copies(ws) if job_id is None and not ws.topology_file.is_file() else []
    if kept:
        # The cluster is down, its job records with it; the copies `run` kept in runs/ stay.
        if as_json:
            click.echo(json.dumps([{**j.to_dict(), "cluster_down": True} for j in kept], indent=2))
            return
        echo(
            f"cluster {ws.name!r} is down: the jobs below are this workspace's copies of their "
            f"records ({ws.runs_dir}), as last seen; `skyinfra up` makes a new cluster"
        )
        print_jobs([as_last_seen(j) for j in kept])
        return
    _, transport, _ = _cluster_of(ws)
    if job_id is not None:
        view = annotate(resolve_job(transport, job_id), stall_s)
        if is_function_entry(view.record.entry) and view.record.final:
            with tempfile.TemporaryDirectory(prefix="skyinfra-results-") as tmp:
                results = job_results(transport, view.record, Path(tmp))
            view = replace(view, results=results)
        if as_json:
            click.echo(json.dumps(view.to_dict(), indent=2))
            return
        show_job(view)
        return
    found = [annotate(j, stall_s) for j in list_jobs(transport)]
    if as_json:
        click.echo(json.dumps([j.to_dict() for j in found], indent=2))
        return
    if not found:
        echo("no jobs on this cluster")
        return
    print_jobs(found)


def _recover(
    clusters_root: Path | None, cluster_name: str | None, job_id: str, *, unattended: bool
) -> None:
    """`jobs recover JOB` (recover_job), its report printed and its exit code raised."""
    from skyinfra.run.recovery import Recovery
    from skyinfra.run.report import print_report, raise_for_failure

    ws, transport, _ = _cluster(clusters_root, cluster_name, head_may_be_gone=True)
    how = Recovery.UNATTENDED if unattended else Recovery.FOLLOW
    report = _recover_one(ws, transport, job_id, how)
    if report is None:
        return
    print_report(report, echo)
    raise_for_failure(report)


def _recover_one(
    ws: Workspace, transport: NodeTransport, job_id: str, how: Recovery
) -> RunReport | None:
    """recover_job for one job of this workspace's cluster, from the current directory."""
    from skyinfra import lifecycle
    from skyinfra.run.recovery import recover_job

    return recover_job(
        ws,
        _nodes(ws, transport),
        job_id,
        head_recovery=lambda: lifecycle.head_recovery_of(ws, ws.spec()),
        src=Path.cwd(),
        how=how,
        echo=echo,
        store_credentials=lambda: lifecycle.store_credentials_of(ws.spec()),
    )


def _nodes(ws: Workspace, transport: NodeTransport) -> ClusterNodes:
    from skyinfra.cli.resolve import replace_lost_nodes
    from skyinfra.run.launch import ClusterNodes
    from skyinfra.topology import read_topology

    return ClusterNodes(
        transport,
        read_topology(ws.topology_file),
        ws.topology_file,
        ws.runs_dir,
        replace_nodes=lambda lost: replace_lost_nodes(ws, lost),
    )


def _recover_all(clusters_root: Path | None, cluster_name: str | None) -> None:
    """`jobs recover --all`: each job the head lost, in recovery_order, started again (or
    queued again) and not followed; one that cannot be (no restart left, as `recover JOB`
    refuses it) is said and the others go on: a job lost long before stays lost."""
    from skyinfra.errors import JobNoLongerWaits, UsageError
    from skyinfra.run.job import RECOVERABLE_STATES, head_gone, list_jobs
    from skyinfra.run.recovery import Recovery, recovery_order

    ws, transport, _ = _cluster(clusters_root, cluster_name, head_may_be_gone=True)
    if head_gone(transport):  # the records went with node 0: this workspace's copies say
        found = [j for j in kept_job_copies(ws) if not j.final]
    else:
        found = [j for j in list_jobs(transport) if j.state in RECOVERABLE_STATES]
    order = recovery_order(found)
    if not order:
        echo(f"[skyinfra] cluster {ws.name!r} has no job to recover (none lost, none waits)")
        return
    echo(
        f"[skyinfra] recovering {len(order)} job(s) in the order the head had them: "
        + ", ".join(j.id for j in order)
    )
    for job in order:
        try:
            _recover_one(ws, transport, job.id, Recovery.DETACHED)
        except JobNoLongerWaits:
            echo(f"[skyinfra] job {job.id} no longer waits for its nodes: nothing to do")
        except UsageError as err:  # no restart left, its --timeout run out: said, not fatal
            echo(f"[skyinfra] job {job.id} not recovered: {err}")


@click.command("logs")
@cluster_option
@dir_option
@click.option("--node", "node", type=int, default=None, metavar="N", help="This node only.")
@click.option("--all", "all_nodes", is_flag=True, help="Every node (default: node 0).")
@click.option("--follow", "-f", is_flag=True, help="Go on until the job ends; exit with its code.")
@click.option("--tail", type=click.IntRange(min=0), default=None, metavar="N", help="Last N lines.")
@click.argument("job_id", metavar="JOB")
def logs(
    cluster_name: str | None,
    clusters_root: Path | None,
    node: int | None,
    all_nodes: bool,
    follow: bool,
    tail: int | None,
    job_id: str,
) -> None:
    """A job's output from the nodes, prefixed by node as in `run` (default node 0)."""
    import threading

    from skyinfra.errors import SkyinfraError, UsageError
    from skyinfra.run.job import (
        STATE_EXIT,
        find_job,
        follow_hint,
        resolve_job,
        runtime_bin,
    )

    if node is not None and all_nodes:
        raise UsageError("--node and --all: choose one")
    ws, transport, total = _cluster(clusters_root, cluster_name)
    if node is not None and not 0 <= node < total:
        raise UsageError(f"--node {node}: the cluster has nodes 0 to {total - 1}")
    # An unknown or ambiguous id: exit 2 before anything follows.
    job_id = resolve_job(transport, job_id).id
    nodes = list(range(total)) if all_nodes else [node or 0]
    lock = threading.Lock()
    # Without --follow each node's lines are kept and printed in node order once all are in;
    # --follow prints each line as it comes, whichever node it is from.
    kept: dict[int, list[str]] = {i: [] for i in nodes}
    procs: list[NodeProcess] = []

    def show(i: int) -> None:
        root = transport.node_root(i)
        argv = [runtime_bin(transport, i), "logs", "--job", job_id, "--node-dir", root]
        argv += ["--follow"] if follow else []
        argv += ["--tail", str(tail)] if tail is not None else []
        proc = transport.start(i, argv, env={}, cwd=root, tag=f"{job_id}-logs-{i}-{time.time_ns()}")
        with lock:
            procs.append(proc)
        for line in proc.lines():
            if not follow:
                kept[i].append(line)
                continue
            with lock, contextlib.suppress(BrokenPipeError):
                echo(f"[node-{i}] {line}")
        proc.wait(30)

    threads = [threading.Thread(target=show, args=(i,), daemon=True) for i in nodes]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    except KeyboardInterrupt:
        # Following reads the nodes' logs; the job goes on: say so, and how to come back.
        for proc in procs:
            with contextlib.suppress(SkyinfraError, OSError):
                proc.kill(grace_s=1.0)
        with contextlib.suppress(OSError):
            click.echo(f"\n[skyinfra] Ctrl-C: stopped following job {job_id}", err=True)
            job = find_job(transport, job_id)
            if not job.final:
                click.echo("[skyinfra] the job goes on on the nodes", err=True)
                click.echo(follow_hint(ws.name, job_id), err=True)
            else:
                click.echo(f"[skyinfra] the job has ended: {job.state}", err=True)
        raise SystemExit(exitcodes.INTERRUPTED) from None
    for i in nodes:
        for line in kept[i]:
            echo(f"[node-{i}] {line}")
    if follow:
        # Every node's log ended: the record's final state follows within a moment.
        for _ in range(50):
            state = find_job(transport, job_id).state
            if state in STATE_EXIT:
                raise SystemExit(STATE_EXIT[state])
            time.sleep(0.2)
        raise SystemExit(exitcodes.ERROR)


@click.command("cancel")
@cluster_option
@dir_option
@click.option("--yes", "-y", is_flag=True, help="Do not ask (needed off a terminal).")
@click.argument("job_id", metavar="JOB")
def cancel(cluster_name: str | None, clusters_root: Path | None, yes: bool, job_id: str) -> None:
    """End a job on every node (SIGTERM, SIGKILL after the grace) and wait until nothing of it
    runs; a queued job is taken out of the head's queue and never starts. A job that is
    neither queued nor running (it ended): exit 2 naming it."""
    import sys

    from skyinfra.errors import ConfirmationRequired, Declined, UsageError
    from skyinfra.run.job import JobState, cancel_job, find_job, resolve_job

    _, transport, _ = _cluster(clusters_root, cluster_name)
    job = resolve_job(transport, job_id)
    job_id = job.id
    # A job that waits for its lost nodes runs nothing; cancelling it means no recovery.
    if job.final and job.state is not JobState.NEEDS_NODES:
        raise UsageError(
            f"job {job_id} is not queued or running: it ended ({job.state}); nothing to cancel"
        )
    what = "Remove queued job" if job.queued else "Cancel job"
    if not yes:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise ConfirmationRequired(f"cancel job {job_id}: --yes is needed off a terminal")
        if not click.confirm(f"{what} {job_id} ({job.entry}) on every node?"):
            raise Declined(f"cancel cancelled: you answered no; job {job_id} goes on")
    said = cancel_job(transport, job_id)
    state = find_job(transport, job_id).state
    if said.get("was_queued"):
        # A preempted job waited in the queue too, but it ran before its preemption.
        ran = "it will not resume" if job.state is JobState.PREEMPTED else "it never started"
        echo(f"job {job_id}: {state} (taken out of the queue: {ran})")
        return
    echo(f"job {job_id}: {state}" + ("" if said.get("was_running") else " (it had just ended)"))
