"""`skyinfra run`: copy the working directory to every node, launch the runtime on all of them
in parallel, stream output, stop at the first failure or at the timeout, and collect results
into runs/<id>/.

The session in steps: check ENTRY, wait until every node is ready, copy, start all, pump
output until every node ended (ending the others at the first failure, or all at the
timeout: watch.py), collect results, write summary.json. The copy sends only what each
node's newest copy lacks (skyinfra.transport.nodesync).

On each node a run has its own directory and leaves a shared one alone
(skyinfra_runtime.rundirs): ``<node root>/runs/<id>/work`` is the copy of the project and the
entry's working directory, ``<node root>/shared`` is never deleted by a run.
"""

from __future__ import annotations

from typing import TextIO

from skyinfra.errors import InternalError
from skyinfra.run.attached import run_attempt
from skyinfra.run.entry_check import check_entry
from skyinfra.run.ignore import make_ignore, read_ignore_patterns, secrets_left_out
from skyinfra.run.launch import ClusterNodes, JobLaunch
from skyinfra.run.nodes import (
    collect_results,
    copy_to_nodes,
    new_report,
    scan_checked,
    start_and_wait,
)
from skyinfra.run.recovery import restart_on_replaced_nodes
from skyinfra.run.report import RunReport, write_summary
from skyinfra.run.startup import HeadStartup
from skyinfra.run.watch import Echo
from skyinfra.transport.readiness import READY_POLL_S, wait_until_ready


def run_on_cluster(
    launch: JobLaunch,
    cluster: ClusterNodes,
    *,
    echo: Echo = print,
    wait_ready_s: float = 0.0,
    ready_poll_s: float = READY_POLL_S,
    terminal: TextIO | None = None,
) -> RunReport:
    """Run ``launch`` on ``cluster`` (skyinfra.run.launch says what each field does).
    ``wait_ready_s``: how long to wait for nodes still bootstrapping (0: they must be ready
    now); nothing is copied or started before ENTRY was checked (UsageError) and every node
    is ready. ``terminal``: where the readiness wait redraws its progress bar (None, or not a
    terminal: lines). A detached launch returns once every node started (the report holds
    only the id and directory). A job that lost a node with restarts left, on a cluster with
    ``replace_nodes``: the nodes are replaced, the project copied again and the job started
    as its next attempt, followed here (skyinfra.run.recovery)."""
    if (launch.job_env.env or launch.job_env.secrets) and not launch.is_job:
        raise InternalError("a run's env and secrets need it to be a job (as_job)")
    if launch.restarts is not None and launch.restarts.max_restarts and not launch.is_job:
        raise InternalError("restarts need the run to be a job (as_job)")
    transport, topology = cluster.transport, cluster.topology
    startup = HeadStartup()
    patterns = read_ignore_patterns(launch.src)
    ignore = make_ignore(patterns, launch.extra_ignores)
    for note in check_entry(launch.src, launch.entry, ignore, run_files=launch.run_files):
        echo(f"[skyinfra] {note}")
    wait_until_ready(
        transport,
        topology,
        timeout_s=wait_ready_s,
        echo=echo,
        poll_s=ready_poll_s,
        terminal=terminal,
    )
    startup.mark("ready")
    left_out = secrets_left_out(launch.src, patterns)
    if left_out:
        echo(
            f"[skyinfra] not copied (secrets): {', '.join(left_out)}; "
            "a `!PATTERN` line in .skyinfraignore sends one"
        )
    wanted = scan_checked(launch.src, ignore, launch.copy_cache)
    report = new_report(cluster.runs_dir, [n.index for n in topology.nodes])
    report.timeout_s = launch.timeout_s
    copy_to_nodes(transport, report, launch, cluster.topology_file, wanted, echo)
    startup.mark("copied")
    if launch.detach:
        start_and_wait(transport, topology, report, launch)
        return report
    run_attempt(
        transport,
        topology if launch.as_job else None,
        report,
        launch,
        echo=echo,
        startup=startup,
    )
    if launch.as_job and cluster.replace_nodes is not None:
        replaced = restart_on_replaced_nodes(report, launch, cluster, wanted, echo)
        transport = replaced or transport
    said = startup.summary()
    if said:
        echo(said)
    collect_results(transport, report)
    write_summary(report, entry=launch.entry, args=launch.args)
    return report
