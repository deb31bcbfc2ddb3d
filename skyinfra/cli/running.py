"""Running code on a cluster: `run`."""

from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from skyinfra_runtime.restarts import RETRY_ON

from skyinfra import exitcodes
from skyinfra.cli.options import cluster_option, dir_option
from skyinfra.cli.resolve import (
    checked,
    echo,
    refresh_shared_topology,
    reload_cluster,
    replace_alone,
    workspace,
)
from skyinfra.run import DEFAULT_KEEP_RUNS

if TYPE_CHECKING:
    from skyinfra.errors import CancelledByCtrlC
    from skyinfra.run.jobenv import JobEnv
    from skyinfra.run.launch import Restarts
    from skyinfra.spec import ClusterSpec
    from skyinfra.topology import Topology
    from skyinfra.workspace import Workspace


class NodesParam(click.ParamType["int | tuple[int, ...]", str]):
    """--nodes K or --nodes I,J,... (subset.parse_nodes_option): exit 2 naming the value."""

    name = "nodes"

    def convert(self, value: Any, param: Any, ctx: Any) -> int | tuple[int, ...]:
        from skyinfra.api.subset import parse_nodes_option

        if isinstance(value, (int, tuple)):
            return value
        try:
            return parse_nodes_option(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


@click.command(context_settings={"ignore_unknown_options": True})
@cluster_option
@dir_option
@click.option("--all-logs", is_flag=True, help="Stream every node's output, not only node 0's.")
@click.option(
    "--wait-ready",
    "wait_ready",
    type=click.IntRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Wait up to SECONDS for nodes still bootstrapping (default: 900 on AWS, where "
    "cloud-init installs for minutes after `up`; 0 on the local target: ready after `up`).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="End every node when the run takes longer (counted from the start of the nodes, "
    "across every attempt of a restarted or recovered job), "
    f"name those still running and exit {exitcodes.RUN_TIMEOUT}. Default: the spec's "
    "run_timeout, else no limit.",
)
@click.option(
    "--keep-runs",
    type=click.IntRange(min=0),
    default=DEFAULT_KEEP_RUNS,
    show_default=True,
    metavar="N",
    help="Run directories each node keeps (runs/<id>/, the newest, this one included); "
    "0 keeps all. $SKYINFRA_SHARED_DIR is never deleted.",
)
@click.option(
    "--verify",
    "verify_first",
    is_flag=True,
    help="Run `skyinfra verify`'s checks first; start nothing when one fails "
    f"(exit {exitcodes.VERIFY_FAILED}). `verify = true` in the spec does the same.",
)
@click.option(
    "--detach",
    "-d",
    is_flag=True,
    help="Start the job and return once every node has started; follow it with "
    "`skyinfra logs JOB --follow`, end it with `skyinfra cancel JOB`.",
)
@click.option(
    "--env",
    "cli_env",
    multiple=True,
    metavar="NAME[=VALUE]",
    help="A variable every worker of the job starts with (before the plugins set up); NAME "
    "alone takes its value from this environment. Repeatable; wins over the spec's env. "
    "`skyinfra jobs JOB` shows it.",
)
@click.option(
    "--secret",
    "cli_secrets",
    multiple=True,
    metavar="NAME",
    help="A variable whose value comes from this environment and is never written to a file "
    "here or on a node, and shows as *** (docs/guides/jobs.md: what this promises). "
    "Repeatable; adds to the spec's secrets.",
)
@click.option(
    "--checkpoints",
    "checkpoints",
    default=None,
    metavar="NAME",
    help="The job's checkpoint set ($SKYINFRA_CHECKPOINT_DIR on every node): jobs run with "
    "the same NAME share it, so a fresh job resumes where an earlier one stopped. Default: "
    "the spec's checkpoints, else one set per job, named by its id. `skyinfra checkpoints` "
    "lists them.",
)
@click.option(
    "--max-restarts",
    "max_restarts",
    type=click.IntRange(min=0, max=1000),
    default=None,
    metavar="N",
    help="Restart the job up to N times on the same nodes after a failure, attached or not: "
    "every node is ended and the same job starts again as the next attempt, with the same "
    "$SKYINFRA_CHECKPOINT_DIR, env and secrets (resume from your last checkpoint). Default: "
    "the spec's max_restarts, else 0 (a failure ends the job).",
)
@click.option(
    "--retry-on",
    "retry_on",
    type=click.Choice(RETRY_ON),
    default=None,
    help="Which failures restart the job: signal (a worker or launcher killed by a signal, "
    "e.g. SIGKILL from the OOM killer; the default) or error (also a non-zero exit of your "
    "code, an exception). Default: the spec's retry_on, else signal.",
)
@click.option(
    "--nodes",
    "world",
    type=NodesParam(),
    default=None,
    metavar="K|I,J",
    help="Run on K of the cluster's nodes, any free ones (the head picks them when it starts "
    "the job), or on the nodes named, in rank order, once they are free: 0,2 (one node: 1,); "
    "as the Python API's nodes=K and nodes=[0, 2]. The job's world is those nodes: ranks, "
    "instance_info() and shard() count them. Jobs on disjoint nodes run at once, each with "
    "ports of its own. Default: every node.",
)
@click.option(
    "--priority",
    type=click.IntRange(min=-1000, max=1000),
    default=0,
    show_default=True,
    metavar="N",
    help="The job's priority in the head's queue: jobs of one priority start in submission "
    "order, a higher one goes ahead of lower ones and, when it cannot start, preempts "
    "lower-priority running jobs (the lowest and newest first, only as many nodes as it needs): "
    "their workers get SIGTERM and 30 s (seconds_left()) to checkpoint, they wait in the queue "
    "`preempted` and resume from their checkpoints when nodes free (no restart spent).",
)
@click.option(
    "--ctrl-c-while-queued",
    "ctrl_c_while_queued",
    type=click.Choice(["leave", "cancel"]),
    default="leave",
    show_default=True,
    help="What Ctrl-C does to an attached run's job while it waits in the head's queue: "
    "leave it queued (the head starts it in its turn; `skyinfra cancel JOB` removes it), or "
    "cancel it (it never starts). Once the job runs, Ctrl-C cancels it either way.",
)
@click.option(
    "-m",
    "--module",
    "as_module",
    is_flag=True,
    help="ENTRY is a module run as `python -m ENTRY` (as `torchrun -m`).",
)
@click.argument("entry")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(
    cluster_name: str | None,
    clusters_root: Path | None,
    all_logs: bool,
    wait_ready: int | None,
    timeout_s: float | None,
    keep_runs: int,
    verify_first: bool,
    detach: bool,
    cli_env: tuple[str, ...],
    cli_secrets: tuple[str, ...],
    checkpoints: str | None,
    max_restarts: int | None,
    retry_on: str | None,
    world: int | tuple[int, ...] | None,
    priority: int,
    ctrl_c_while_queued: str,
    as_module: bool,
    entry: str,
    args: tuple[str, ...],
) -> None:
    """Run ENTRY on every node (--nodes K: on K free ones; --nodes 0,2: on those) through
    skyinfra-runtime (ENTRY [-- ARGS...]).

    ENTRY is script.py (run as __main__, as `python script.py` or torchrun: it gets
    torchrun's environment with the torch plugin), -m package.module, package.module:function
    or script.py:function (a function: the plugins initialise the frameworks around it).

    Nodes whose bootstrap has not finished are waited for (--wait-ready); a node whose
    bootstrap failed stops the run before anything starts. ENTRY is checked first (exit 2).
    The current directory is copied to each node's runs/<id>/work (minus secrets, build
    output and .skyinfraignore patterns), output of node 0 is streamed (--all-logs: all
    nodes), the first failure ends the other nodes. Keep outputs in $SKYINFRA_SHARED_DIR.
    Results and logs go to the workspace's runs/<id>/.

    The run is a job that lives on the nodes: a closed terminal (SIGHUP) or a killed
    `skyinfra` does not end it (`skyinfra jobs`, `logs`, `cancel`); Ctrl-C cancels it.

    On a cluster whose nodes other jobs hold, the job is queued on the head (attached or
    --detach) and the head starts it when the nodes it needs are free and its turn comes:
    higher --priority first, then first in, first out (a higher priority may preempt lower
    ones, which resume from their checkpoints); an attached run waits and says so, and Ctrl-C
    while it waits leaves it queued (`skyinfra cancel JOB` removes it), or with
    --ctrl-c-while-queued cancel cancels it. Every job gets a coordinator
    and rendezvous port of its own from head_port to head_port + 2 x nodes - 1. --verify on
    a busy cluster is refused (its checks would meet the job).
    """
    from skyinfra import lifecycle
    from skyinfra.errors import CancelledByCtrlC, Detached
    from skyinfra.run.ignore import topology_path_inside
    from skyinfra.run.job import DETACHING_SIGNALS, follow_hint
    from skyinfra.run.launch import ClusterNodes, JobLaunch
    from skyinfra.run.report import print_report, raise_for_failure
    from skyinfra.run.session import run_on_cluster
    from skyinfra.topology import read_topology

    if as_module:
        entry = f"-m {entry}"  # the runtime's text for a `python -m` entry
    ws = workspace(clusters_root, cluster_name, changes_something=True)
    # The spec's files (aws.ssh_key) first: before the shared state is read over the network.
    checked(ws.spec(), guardrails=False)
    # Bad names and missing values: exit 2 before anything is read, copied or started.
    job_env = _job_env(ws, cli_env, cli_secrets)
    checkpoints = _checkpoints_name(ws, checkpoints)
    restarts = _restarts(ws, max_restarts, retry_on)
    refresh_shared_topology(ws)
    if not ws.topology_file.is_file():
        raise lifecycle.not_up_error(ws)
    topology = read_topology(ws.topology_file)
    count, named = _check_world(world, topology)
    spec = ws.spec()
    src = Path.cwd()
    wait_s = lifecycle.default_wait_ready_s(spec) if wait_ready is None else wait_ready

    # SIGHUP (a closed terminal, a dropped SSH session) and SIGTERM (a CI runner's cancel,
    # `timeout`, `kill`) stop following, not the job.
    def hang_up(signum: int, frame: object) -> None:
        raise Detached(signum=signum)

    for signum in DETACHING_SIGNALS:
        signal.signal(signum, hang_up)
    # An `up` that would replace the nodes waits for the run. Submissions, attached or
    # detached, may overlap (a sweep from several shells): each starts a job of its own on
    # the nodes, whose queue on the head orders them; verify's checks need the cluster alone.
    overlaps = not (verify_first or spec.verify)
    with ws.lock(f"run {entry}", shared=overlaps) as hold:
        transport = lifecycle.transport_for(ws, topology, spec=spec)
        if verify_first or spec.verify:
            from skyinfra.run.job import refuse_if_busy
            from skyinfra.verify import gate

            # Before the checks: verify's collective would join the running job's coordinator.
            refuse_if_busy(transport, topology.cluster)
            gate(ws, spec, topology, transport, wait_ready_s=wait_s, echo=echo)
        try:
            launch = JobLaunch(
                entry=entry,
                src=src,
                args=args,
                job_env=job_env,
                checkpoints=checkpoints,
                restarts=restarts,
                timeout_s=timeout_s if timeout_s is not None else spec.run_timeout,
                keep_runs=keep_runs,
                as_job=True,
                detach=detach,
                all_logs=all_logs,
                extra_ignores=tuple(topology_path_inside(src, ws.path)),
                copy_cache=ws.copy_cache_file,
                world=count,
                on=named,
                priority=priority,
                store_credentials=lifecycle.store_credentials_of(spec),
                ctrl_c_cancels_queued=ctrl_c_while_queued == "cancel",
            )
            cluster = ClusterNodes(
                transport,
                topology,
                ws.topology_file,
                ws.runs_dir,
                replace_nodes=lambda lost: replace_alone(hold, lost),
                reload_nodes=lambda: reload_cluster(ws),
            )
            report = run_on_cluster(
                launch,
                cluster,
                echo=echo,
                wait_ready_s=wait_s,
                terminal=sys.stdout if sys.stdout.isatty() else None,
            )
        except Detached as hup:
            # The terminal may be gone: say it where it can still be read, and go.
            said = "SIGTERM" if hup.signum == signal.SIGTERM else "hang-up"
            with contextlib.suppress(OSError):
                if hup.job_id:
                    echo(f"[skyinfra] {said}: stopped following; the job goes on on the nodes")
                    echo(follow_hint(ws.name, hup.job_id))
                else:
                    echo(f"[skyinfra] {said} before the job started: nothing was started")
            # As a shell reports a command SIGTERM ended (143); a hang-up keeps its 130.
            code = 128 + signal.SIGTERM if hup.signum == signal.SIGTERM else exitcodes.INTERRUPTED
            raise SystemExit(code) from None
        except CancelledByCtrlC as stop:
            with contextlib.suppress(OSError):
                _say_cancelled(ws.name, stop)
            raise SystemExit(exitcodes.INTERRUPTED) from None
    if detach:
        from skyinfra.run.job import queued_hint
        from skyinfra.run.report import submitted_words

        said = submitted_words(report)
        if report.queued is not None:
            said += f"; {queued_hint(ws.name, report.run_id)}"
        echo(said)
        echo(follow_hint(ws.name, report.run_id))
        return
    print_report(report, echo)
    raise_for_failure(report)


def _say_cancelled(cluster: str, stop: CancelledByCtrlC) -> None:
    """What Ctrl-C did to the job an attached `run` followed, and where to see it."""
    job = stop.job_id
    if stop.queued and stop.cancelled:
        echo(
            f"\n[skyinfra] Ctrl-C: job {job} cancelled while queued: it never started "
            "(--ctrl-c-while-queued cancel; the default leaves it queued)"
        )
        echo(f"  state:   skyinfra jobs --cluster {cluster} {job}")
        return
    if stop.queued:
        echo(
            f"\n[skyinfra] Ctrl-C: stopped waiting; job {job} stays queued (Ctrl-C leaves a "
            "queued job in the queue by default: the head starts it when its turn comes; "
            "`run --ctrl-c-while-queued cancel` cancels it instead); "
            f"`skyinfra cancel --cluster {cluster} {job}` removes it"
        )
        echo(f"  follow:  skyinfra logs --cluster {cluster} {job} --follow")
        echo(f"  state:   skyinfra jobs --cluster {cluster} {job}")
        return
    if stop.started:
        echo(
            f"\n[skyinfra] Ctrl-C: job {job} cancelled on every node (Ctrl-C cancels the job "
            "an attached run follows; `run --detach` or a closed terminal leaves it running)"
        )
    else:
        echo(
            f"\n[skyinfra] Ctrl-C while job {job} was starting: the nodes that had started it "
            f"were ended; if `skyinfra jobs --cluster {cluster}` lists it running, "
            f"`skyinfra cancel --cluster {cluster} {job}` ends it"
        )
    echo(f"  state:   skyinfra jobs --cluster {cluster} {job}")
    echo(f"  output:  skyinfra logs --cluster {cluster} {job} --all")


def _restarts(ws: Workspace, flag: int | None, retry_on: str | None) -> Restarts:
    """--max-restarts and --retry-on, else the spec's (./skyinfra.toml when it names this
    cluster), else no restart."""
    from skyinfra import lifecycle
    from skyinfra.run.launch import Restarts

    spec = _current_spec(ws)
    return Restarts(
        max_restarts=spec.max_restarts if flag is None else flag,
        retry_on=retry_on or spec.retry_on,
        # Unattended recovery is the cluster's (`up` set it up): its spec as brought up.
        head_recovery=lifecycle.head_recovery_of(ws, ws.spec()),
    )


def _checkpoints_name(ws: Workspace, flag: str | None) -> str | None:
    """The job's checkpoint set: --checkpoints, else the spec's (./skyinfra.toml when it
    names this cluster), else None (the job id). A bad name: exit 2 naming it."""
    from skyinfra.errors import SpecError, UsageError
    from skyinfra.spec import checkpoints_name

    if flag is None:
        return _current_spec(ws).checkpoints
    try:
        return checkpoints_name(flag, "--checkpoints")
    except SpecError as err:
        raise UsageError(f"--checkpoints {flag!r}: expected {err.expected}") from None


def _current_spec(ws: Workspace) -> ClusterSpec:
    from skyinfra.spec import read_spec_file, validate_spec

    here = Path("skyinfra.toml")
    if here.is_file():
        raw = read_spec_file(here)
        if raw.get("name") == ws.name:
            return validate_spec(raw)
    return ws.spec()


def _job_env(ws: Workspace, cli_env: tuple[str, ...], cli_secrets: tuple[str, ...]) -> JobEnv:
    """The job's env and secrets: the spec's (./skyinfra.toml when it names this cluster, so an
    edit needs no `up`; else the spec the cluster was brought up with), then the flags."""
    import os

    from skyinfra.run.jobenv import resolve

    spec = _current_spec(ws)
    return resolve(
        spec_env=spec.env,
        spec_secrets=spec.secrets,
        cli_env=cli_env,
        cli_secrets=cli_secrets,
        environ=os.environ,
    )


def _check_world(
    world: int | tuple[int, ...] | None, topology: Topology
) -> tuple[int | None, tuple[int, ...] | None]:
    """--nodes against the cluster: (K any free nodes, or the named ones in rank order);
    exit 2 naming the value before anything is queued."""
    from skyinfra.api.subset import selected_nodes
    from skyinfra.errors import UsageError

    total = len(topology.nodes)
    if isinstance(world, tuple):
        shown = ",".join(map(str, world)) + ("," if len(world) == 1 else "")
        named = selected_nodes(world, topology, shown=f"--nodes {shown}")
        return None, None if named is None else tuple(named)
    if world is not None and world > total:
        raise UsageError(
            f"--nodes {world}: cluster {topology.cluster!r} has {total} node(s); expected 1 to "
            f"{total}, or node indices from 0 to {total - 1} (0,1; one node: 1,)"
        )
    return world, None
