"""`skyinfra checkpoints`: the cluster's checkpoint sets, listed and deleted on purpose."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from skyinfra import exitcodes
from skyinfra.cli.options import cluster_option, dir_option
from skyinfra.cli.resolve import echo, workspace


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
    provider = ws.spec().provider
    if provider != "local":
        # The AWS target keeps its sets on the nodes and in S3 (issue 25's AWS part).
        click.echo(
            f"[skyinfra] cluster {ws.name!r} ({provider}): only sets kept in this workspace "
            "are listed here",
            err=True,
        )
    sets = list_sets(ws)
    if as_json:
        click.echo(json.dumps([s.to_dict() for s in sets], indent=2))
        return
    if not sets:
        echo(f"cluster {ws.name!r}: no checkpoint sets in {local_root(ws)}")
        return
    rows = [("NAME", "SIZE", "FILES", "MODIFIED", "JOBS")]
    for s in sets:
        d = s.to_dict()
        rows.append(
            (s.name, human_size(s.size_bytes), str(s.files), d["modified"] or "-",
             ", ".join(s.jobs) or "-")
        )  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1])
    echo(f"in {local_root(ws)}")


@checkpoints.command("delete")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (needed off a terminal).")
@click.argument("name", metavar="NAME")
@click.pass_obj
def delete(obj: tuple[str | None, Path | None], yes: bool, name: str) -> None:
    """Delete checkpoint set NAME and everything in it (asks on a terminal; --yes elsewhere)."""
    from skyinfra.checkpoints import delete_set, find_set, human_size
    from skyinfra.errors import ConfirmationRequired

    cluster_name, clusters_root = obj
    ws = workspace(clusters_root, cluster_name, changes_something=True)
    found = find_set(ws, name)
    what = f"checkpoint set {name!r} ({human_size(found.size_bytes)}, {found.files} file(s))"
    if not yes:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise ConfirmationRequired(f"delete {what}: --yes is needed off a terminal; "
                                       "nothing was deleted")  # fmt: skip
        if not click.confirm(f"Delete {what} in {found.path}?"):
            raise SystemExit(exitcodes.USAGE)
    delete_set(found)
    echo(f"deleted {what}")
