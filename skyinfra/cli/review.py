"""Review before apply: `render`, `plan` and `apply` (a planfile as it was reviewed), and
`prices`, the price table `plan` costs a change with."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from skyinfra import exitcodes
from skyinfra.cli.options import (
    DEFAULT_SPEC,
    dir_option,
    name_option,
    nodes_option,
    spec_option,
    target_options,
    yes_option,
)
from skyinfra.cli.resolve import (
    checked,
    confirmer,
    echo,
    engine_factory,
    int_or_raw,
    new_workspace,
    spec_file_or_default,
    spec_keeping_applied,
)

if TYPE_CHECKING:
    from skyinfra.spec import ClusterSpec


def _spec_and_overrides(
    spec_path: Path | None,
    name: str | None,
    nodes: str | None,
    clusters_root: Path | None,
    say: Callable[[str], None] = echo,
) -> tuple[ClusterSpec, Path | None]:
    # An existing cluster keeps its applied fields as `up` does, so that `plan` plans what
    # `up` would apply.
    overrides: dict[str, Any] = {"name": name, "nodes": int_or_raw(nodes)}
    spec = spec_keeping_applied(
        spec_path, overrides, clusters_root, flags={"nodes": "--nodes"}, say=say
    )
    # The guardrails are plan.md's to report (and `up`'s to refuse): only the spec here.
    return checked(spec, guardrails=False), spec_file_or_default(spec_path)


@click.command()
@spec_option
@name_option
@nodes_option
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder to write the root module into (default ./skyinfra-render/NAME).",
)
@target_options("render")
@dir_option
def render(
    spec_path: Path | None,
    name: str | None,
    nodes: str | None,
    out: Path | None,
    clusters_root: Path | None,
    **flags: Any,
) -> None:
    """Write the cluster's root module into a folder meant to be committed and reviewed.

    Self-contained (the modules it calls are copied inside), `terraform fmt`-clean, and the
    same spec renders the same bytes; `plan --from DIR` plans from it."""
    from skyinfra import planning

    spec, _ = _spec_and_overrides(spec_path, name, nodes, clusters_root)
    ws = new_workspace(clusters_root, spec.name)
    target = out or Path("skyinfra-render") / spec.name
    options = {key: value for key, value in flags.items() if value}
    names = planning.render(spec, ws, target, echo, options=options)
    echo(f"[skyinfra] rendered {len(names)} file(s) of cluster {spec.name!r} into {target}")


@click.command()
@spec_option
@name_option
@nodes_option
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for the planfile, plan.json, plan.md and plan-meta.json "
    "(default: the workspace's plan/).",
)
@click.option(
    "--from",
    "from_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Plan the root module `skyinfra render` wrote there instead of rendering anew.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--adopt", is_flag=True, help="Plan for a cluster another spec file made.")
@target_options("plan")
@dir_option
@click.pass_context
def plan(
    ctx: click.Context,
    /,
    spec_path: Path | None,
    name: str | None,
    nodes: str | None,
    out: Path | None,
    from_dir: Path | None,
    as_json: bool,
    adopt: bool,
    clusters_root: Path | None,
    **flags: Any,
) -> None:
    """Plan a change for review: save the planfile, its JSON and plan.md (a pull-request
    comment: Plan line, destroy/replace warnings with reasons, topology before -> after,
    diagram, cost, guardrails, the full plan folded).

    Exit codes as `terraform plan -detailed-exitcode`: 0 no changes, 2 changes, 1 any error;
    8 when a guardrail fails."""
    from skyinfra import planning
    from skyinfra.errors import SkyinfraError
    from skyinfra.lifecycle import SpecOrigin
    from skyinfra.review.markdown import terminal as terminal_warning

    say = (lambda line: click.echo(line, err=True)) if as_json else echo
    try:
        spec, spec_file = _spec_and_overrides(spec_path, name, nodes, clusters_root, say)
        ws = new_workspace(clusters_root, spec.name)
        options = {key: value for key, value in flags.items() if value}
        result = planning.plan(
            spec,
            ws,
            out,
            say,
            options=options,
            origin=SpecOrigin(spec_file, adopt=adopt),
            from_dir=from_dir,
            engine_factory=engine_factory(None, spec),
        )
    except SkyinfraError as err:
        click.echo(f"error: {err}", err=True)
        ctx.exit(exitcodes.ERROR)
    review = result.review
    if as_json:
        click.echo(json.dumps(review.to_dict(), indent=2))
    else:
        echo(review.summary.counts.line)
        for line in terminal_warning(review.summary.losses, target=spec.provider):
            echo(f"  {line}")
        for check in review.checks:
            echo(f"  {check.mark} {check.name}: {check.reason}")
        echo(f"[skyinfra] plan.md, plan.json and {result.planfile.name} in {result.out}")
    if not review.passed:
        ctx.exit(exitcodes.GUARDRAIL)
    ctx.exit(exitcodes.OK if review.summary.counts.no_changes else exitcodes.PLAN_CHANGES)


def apply_planfile(
    planfile: Path, clusters_root: Path | None, *, yes: bool, expect_sha256: str | None
) -> None:
    """`apply PLANFILE` and `up --plan PLANFILE`."""
    from skyinfra import planning
    from skyinfra.spec import ClusterSpec, load_spec

    meta = planning.read_meta(planfile)
    # The planned spec's files (aws.ssh_key) before the engine or the backend is touched.
    checked(ClusterSpec.from_dict(meta["spec"]), guardrails=False)
    ws = new_workspace(clusters_root, str(meta.get("cluster")))
    spec_now = load_spec(DEFAULT_SPEC, {}) if DEFAULT_SPEC.is_file() else None
    if spec_now is not None and spec_now.name != ws.name:
        spec_now = None  # ./skyinfra.toml describes another cluster
    elif spec_now is not None:  # as `plan` read it: the fields it leaves out kept as applied
        spec_now = spec_keeping_applied(None, {}, clusters_root, flags={}, say=lambda _: None)
    spec, topology = planning.apply_planfile(
        planfile,
        ws,
        echo,
        spec_now=spec_now,
        expect_sha256=expect_sha256,
        confirm=confirmer(yes),
        # The engine the plan was made for (its spec's `engine`), whatever ./skyinfra.toml says.
        engine_factory=engine_factory(None, ClusterSpec.from_dict(meta["spec"])),
    )
    echo(
        f"[skyinfra] cluster {spec.name!r} is up: {len(topology.nodes)} node(s), "
        f"head {topology.head_addr}:{topology.head_port}"
    )


@click.command()
@click.argument("planfile", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--sha256",
    "expect_sha256",
    default=None,
    help="The planfile sha256 the review showed: anything else is refused.",
)
@yes_option
@dir_option
def apply(planfile: Path, expect_sha256: str | None, yes: bool, clusters_root: Path | None) -> None:
    """Apply exactly PLANFILE (from `skyinfra plan`), refusing it when stale: the planfile,
    the spec (./skyinfra.toml) or the cluster's state changed since the plan."""
    apply_planfile(planfile, clusters_root, yes=yes, expect_sha256=expect_sha256)


@click.command()
@click.option("--region", required=True, help="AWS region whose prices to fetch.")
@click.option(
    "--instance-type",
    "instance_types",
    multiple=True,
    required=True,
    help="Instance type to price; repeatable.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The table to write; point SKYINFRA_PRICES at it for `plan`.",
)
def prices(region: str, instance_types: tuple[str, ...], out: Path) -> None:
    """Refresh on-demand prices through the AWS Price List Query API (your credentials;
    SKYINFRA_AWS_ENDPOINT_URL for an emulator) into a price table for `plan`."""
    import datetime

    import boto3

    from skyinfra.review.cost import shipped_table
    from skyinfra.review.pricing import PRICING_REGION, fetch_prices, refreshed
    from skyinfra.targets.aws.endpoints import boto3_client_kwargs, emulator_from_env

    client = boto3.client("pricing", **boto3_client_kwargs(PRICING_REGION, emulator_from_env()))
    found = fetch_prices(client, region, instance_types)
    missing = sorted(set(instance_types) - set(found))
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    table = refreshed(shipped_table(), region, found, today)
    out.write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    for name in sorted(found):
        echo(f"  {name}: ${found[name]:g}/h")
    if missing:
        echo(f"[skyinfra] no on-demand Linux price for {', '.join(missing)} in {region}")
    echo(f"[skyinfra] wrote {out}; use it with SKYINFRA_PRICES={out} skyinfra plan")
