"""`skyinfra checkpoints`: the cluster's checkpoint sets, listed and deleted on purpose.

Local target: folders of the workspace. AWS: the sets under the cluster's checkpoints_url
(what `up` recorded, else the spec's), listed and deleted through S3. A set that a job of the
cluster runs on (or waits to resume on: needs_nodes) is never deleted."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

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
    from skyinfra.checkpoints import human_size, list_sets, local_root

    ws = workspace(clusters_root, cluster_name, changes_something=False)
    spec = ws.spec()
    if spec.provider == "aws":
        _list_aws(ws, spec, as_json)
        return
    sets = list_sets(ws)
    if as_json:
        click.echo(json.dumps([s.to_dict() for s in sets], indent=2))
        return
    if not sets:
        echo(f"cluster {ws.name!r}: no checkpoint sets in {local_root(ws)}")
        return
    _table(
        [(s.name, human_size(s.size_bytes), str(s.files), s.to_dict()["modified"], s.jobs)
         for s in sets]
    )  # fmt: skip
    echo(f"in {local_root(ws)}")


def _table(rows: list[tuple[str, str, str, str | None, tuple[str, ...]]]) -> None:
    lines = [("NAME", "SIZE", "FILES", "MODIFIED", "JOBS")]
    lines += [
        (n, size, files, mod or "-", ", ".join(jobs) or "-") for n, size, files, mod, jobs in rows
    ]
    widths = [max(len(r[i]) for r in lines) for i in range(len(lines[0]) - 1)]
    for r in lines:
        echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1])


def _store(ws: Workspace, spec: ClusterSpec) -> tuple[Any, str]:
    """The S3 client and the cluster's store URL (UsageError when none is known)."""
    from skyinfra.errors import UsageError
    from skyinfra.targets.aws.checkpoint_store import recorded_url
    from skyinfra.targets.aws.session import clients_for
    from skyinfra.targets.aws.spec import AwsSpec

    url = recorded_url(ws, spec.section_as(AwsSpec).checkpoints_url)
    if url is None:
        raise UsageError(
            f"cluster {ws.name!r}: no checkpoint store is known yet (`up` records the default "
            "one; aws.checkpoints_url names yours)"
        )
    return clients_for(spec).client("s3"), url


def _stored(ws: Workspace, spec: ClusterSpec) -> tuple[Any, str, list[Any]]:
    from botocore.exceptions import BotoCoreError, ClientError

    from skyinfra.errors import SkyinfraError
    from skyinfra.targets.aws.checkpoint_store import list_stored

    s3, url = _store(ws, spec)
    try:
        return s3, url, list_stored(s3, url)
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") == "NoSuchBucket":
            return s3, url, []  # the default bucket before any `up` made it: no set
        raise SkyinfraError(f"could not list the checkpoint sets under {url}/: {err}") from None
    except BotoCoreError as err:
        raise SkyinfraError(f"could not list the checkpoint sets under {url}/: {err}") from None


def _list_aws(ws: Workspace, spec: ClusterSpec, as_json: bool) -> None:
    from skyinfra.checkpoints import human_size, uses

    _, url, sets = _stored(ws, spec)
    used = uses(ws)
    if as_json:
        out = [
            {
                "name": s.name,
                "url": s.url,
                "size_bytes": s.size_bytes,
                "files": s.objects,
                "modified": s.modified.isoformat(timespec="seconds") if s.modified else None,
                "jobs": used.get(s.name, []),
            }
            for s in sets
        ]
        click.echo(json.dumps(out, indent=2))
        return
    if not sets:
        echo(f"cluster {ws.name!r}: no checkpoint sets under {url}/")
        return
    _table(
        [(s.name, human_size(s.size_bytes), str(s.objects),
          s.modified.isoformat(timespec="seconds") if s.modified else None,
          tuple(used.get(s.name, ()))) for s in sets]
    )  # fmt: skip
    echo(f"under {url}/")


def _jobs_using(ws: Workspace, spec: ClusterSpec, name: str) -> list[str]:
    """The cluster's jobs that run on set ``name``, or wait to resume on it (needs_nodes),
    from the head's job records; none when the cluster is down. A head that cannot be asked
    is a refusal: nothing tells that no job uses the set."""
    if not ws.topology_file.is_file():
        return []
    from skyinfra import lifecycle
    from skyinfra.errors import SkyinfraError, UsageError
    from skyinfra.run.job import FINAL_STATES, list_jobs
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
        str(j.get("id"))
        for j in jobs
        if j.get("checkpoints") == name
        and (j.get("state") not in FINAL_STATES or j.get("state") == "needs_nodes")
    ]


@checkpoints.command("delete")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (needed off a terminal).")
@click.argument("name", metavar="NAME")
@click.pass_obj
def delete(obj: tuple[str | None, Path | None], yes: bool, name: str) -> None:
    """Delete checkpoint set NAME and everything in it (asks on a terminal; --yes elsewhere).
    A set that a job of the cluster runs on is refused."""
    from skyinfra.checkpoints import delete_set, find_set, human_size
    from skyinfra.errors import ConfirmationRequired, Declined, UsageError

    cluster_name, clusters_root = obj
    ws = workspace(clusters_root, cluster_name, changes_something=True)
    spec = ws.spec()
    if spec.provider == "aws":
        from skyinfra_runtime.checkpoints import name_problem

        problem = name_problem(name)
        if problem:
            raise UsageError(f"checkpoint set {name!r}: expected {problem}")
        s3, url, sets = _stored(ws, spec)
        stored = next((s for s in sets if s.name == name), None)
        if stored is None:
            names = ", ".join(s.name for s in sets) or "none"
            raise UsageError(
                f"checkpoint set {name!r}: cluster {ws.name!r} has no such set under {url}/ "
                f"(it has: {names})"
            )
        what = (
            f"checkpoint set {name!r} ({human_size(stored.size_bytes)}, {stored.objects} object(s))"
        )
        where = f"{stored.url}/"
    else:
        found = find_set(ws, name)
        what = f"checkpoint set {name!r} ({human_size(found.size_bytes)}, {found.files} file(s))"
        where = str(found.path)
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
        if not click.confirm(f"Delete {what} in {where}?"):
            raise Declined(f"delete cancelled: you answered no; {what} was not deleted")
    if spec.provider == "aws":
        from skyinfra.targets.aws.checkpoint_store import delete_stored

        count = delete_stored(s3, url, name)
        echo(f"deleted {what}: {count} object(s) under {where}")
        return
    delete_set(found)
    echo(f"deleted {what}")
