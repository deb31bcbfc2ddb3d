"""`skyinfra checkpoints`: the cluster's checkpoint sets, listed and deleted on purpose.

The cluster's target keeps them and lists and deletes them (its checkpoint verbs,
skyinfra/targets/base.py; local: folders of the workspace; AWS: the sets under the cluster's
checkpoints_url, through S3). A set that a job of the cluster runs on (or waits to resume on:
needs_nodes) is never deleted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from skyinfra.cli.options import cluster_option, dir_option
from skyinfra.cli.resolve import echo, workspace
from skyinfra.spec import ClusterSpec
from skyinfra.workspace import Workspace


@click.group("checkpoints", invoke_without_command=True)
@cluster_option
@dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the sets as JSON.")
@click.pass_context
def checkpoints(
    ctx: click.Context, cluster_name: str | None, clusters_root: Path | None, as_json: bool
) -> None:
    """The cluster's checkpoint sets ($SKYINFRA_CHECKPOINT_DIR of its jobs): name, size,
    files, last modified and the jobs that used each. They outlive the nodes and `down`;
    `skyinfra checkpoints delete NAME` deletes one."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = (cluster_name, clusters_root)
        return
    from skyinfra import lifecycle
    from skyinfra.checkpoints import human_size

    ws = workspace(clusters_root, cluster_name, changes_something=False)
    spec = ws.spec()
    listing = lifecycle.target_of(spec).checkpoint_sets(ws, spec)
    if as_json:
        click.echo(json.dumps([s.to_dict() for s in listing.sets], indent=2))
        return
    if not listing.sets:
        echo(f"cluster {ws.name!r}: no checkpoint sets {listing.where}")
        return
    # NODES only where a target keeps a copy per node (ssh): elsewhere every node sees one.
    per_node = any(s.nodes is not None for s in listing.sets)
    lines = [("NAME", "SIZE", "FILES", *(("NODES",) if per_node else ()), "MODIFIED", "JOBS")]
    lines += [
        (s.name, human_size(s.size_bytes), str(s.items),
         *((",".join(map(str, s.nodes or ())) or "-",) if per_node else ()),
         s.modified or "-", ", ".join(s.jobs) or "-")
        for s in listing.sets
    ]  # fmt: skip
    _table(lines)
    echo(listing.where)


def _table(lines: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in lines) for i in range(len(lines[0]) - 1)]
    for r in lines:
        echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1])


def _jobs_using(ws: Workspace, spec: ClusterSpec, name: str) -> list[str]:
    """The cluster's jobs that run on set ``name``, or wait to resume on it (needs_nodes),
    from the head's job records; none when the cluster is down. A head that cannot be asked
    is a refusal: nothing tells that no job uses the set."""
    if not ws.topology_file.is_file():
        return []
    from skyinfra import lifecycle
    from skyinfra.errors import SkyinfraError, UsageError
    from skyinfra.run.job import JobState, list_jobs
    from skyinfra.topology import read_topology

    try:
        transport = lifecycle.transport_for(ws, read_topology(ws.topology_file), spec=spec)
        jobs = list_jobs(transport)
    except (SkyinfraError, OSError) as err:
        raise UsageError(
            f"checkpoint set {name!r}: cannot tell whether a job of cluster {ws.name!r} uses it "
            f"(its head did not answer: {err}); nothing was deleted. Once the cluster is whole "
            "(`up`) or down (`down`), try again"
        ) from None
    return [
        j.id
        for j in jobs
        if j.checkpoints == name and (not j.final or j.state is JobState.NEEDS_NODES)
    ]


@checkpoints.command("delete")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (needed off a terminal).")
@click.argument("name", metavar="NAME")
@click.pass_obj
def delete(obj: tuple[str | None, Path | None], yes: bool, name: str) -> None:
    """Delete checkpoint set NAME and everything in it (asks on a terminal; --yes elsewhere).
    A set that a job of the cluster runs on is refused."""
    from skyinfra import lifecycle
    from skyinfra.checkpoints import human_size
    from skyinfra.errors import ConfirmationRequired, Declined, UsageError

    cluster_name, clusters_root = obj
    ws = workspace(clusters_root, cluster_name, changes_something=True)
    spec = ws.spec()
    target = lifecycle.target_of(spec)
    found = target.checkpoint_set(ws, spec, name)
    what = (
        f"checkpoint set {name!r} ({human_size(found.size_bytes)}, "
        f"{found.items} {found.item_unit}(s))"
    )
    running = _jobs_using(ws, spec, name)
    if running:
        raise UsageError(
            f"{what}: job(s) {', '.join(running)} of cluster {ws.name!r} use it (running, or "
            "waiting to resume from it); nothing was deleted. `skyinfra cancel JOB` first"
        )
    if not yes:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise ConfirmationRequired(f"delete {what}: --yes is needed off a terminal; "
                                       "nothing was deleted")  # fmt: skip
        if not click.confirm(f"Delete {what} in {found.place}?"):
            raise Declined(f"delete cancelled: you answered no; {what} was not deleted")
    said = target.delete_checkpoint_set(ws, spec, found)
    echo(f"deleted {what}{said}")
