"""Checking the nodes before a run: `verify`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from skyinfra.cli.options import cluster_option, dir_option, json_option
from skyinfra.cli.resolve import workspace


@click.command("verify")
@cluster_option
@dir_option
@json_option
@click.option(
    "-k",
    "select",
    default=None,
    metavar="EXPR",
    help="Only the checks whose names match (pytest's -k), e.g. -k 'runtime or topology'.",
)
@click.option(
    "--min-free-gb",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Free disk space each node's directory must have.",
)
@click.option(
    "--collective-timeout",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="How long the collective waits for every node at the rendezvous.",
)
def verify_command(
    cluster_name: str | None,
    clusters_root: Path | None,
    as_json: bool,
    select: str | None,
    min_free_gb: float,
    collective_timeout: float,
) -> None:
    """Check every node before a run: runtime, topology, Python and framework versions,
    rendezvous ports, a short real collective, GPUs/EFA/NCCL, disk; then the project's own
    verify/test_*.py (pytest-testinfra). One row per check, one column per node; exits
    non-zero naming node and check when one fails."""
    from skyinfra import verify

    ws = workspace(clusters_root, cluster_name, changes_something=False)
    report = verify.verify_workspace(
        ws,
        project=Path.cwd(),
        select=select,
        min_free_gb=min_free_gb,
        collective_timeout_s=collective_timeout,
    )
    if as_json:
        click.echo(json.dumps(verify.to_json(report), indent=2))
    else:
        click.echo(verify.render_table(report), nl=False)
    verify.raise_for_failures(report)
