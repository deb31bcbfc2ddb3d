"""A cluster's life: `up`, `down`, `status` and `topology`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from skyinfra.cli.options import (
    backend_option,
    cluster_option,
    dir_option,
    json_option,
    name_option,
    nodes_option,
    spec_option,
    target_options,
    terraform_bin_option,
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
    workspace,
)
from skyinfra.target_registry import target_names


@click.command()
@spec_option
@name_option
@click.option(
    "--provider", default=None, help=f"Target: {', '.join(target_names())} (default local)."
)
@nodes_option
@click.option("--procs-per-node", default=None, help="Processes per node (integer or 'auto').")
@click.option(
    "--plugin",
    "plugins",
    multiple=True,
    help="Plugin NAME[:key=value,...]; repeat for several (replaces the file's list).",
)
@click.option(
    "--package",
    "packages",
    multiple=True,
    help="Extra pip requirement for every node; repeatable (replaces the file's list).",
)
@target_options("up")
@backend_option
@terraform_bin_option
@yes_option
@click.option(
    "--adopt",
    is_flag=True,
    help="Take over a cluster of this name that another spec file made.",
)
@click.option(
    "--plan",
    "planfile",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Apply exactly this planfile from `skyinfra plan` (as `skyinfra apply PLANFILE`).",
)
@dir_option
def up(
    spec_path: Path | None,
    name: str | None,
    provider: str | None,
    nodes: str | None,
    procs_per_node: str | None,
    plugins: tuple[str, ...],
    packages: tuple[str, ...],
    clusters_root: Path | None,
    yes: bool,
    adopt: bool,
    planfile: Path | None,
    backend: str | None,
    terraform_bin: str | None,
    **flags: Any,
) -> None:
    """Create or update a cluster: validate the spec, render Terraform, apply it."""
    from skyinfra import lifecycle
    from skyinfra.errors import UsageError
    from skyinfra.spec import FLAG_KEYS, parse_plugin_flag

    if planfile is not None:
        given = [
            flag
            for flag, value in (
                ("--spec", spec_path),
                ("--name", name),
                ("--provider", provider),
                ("--nodes", nodes),
                ("--procs-per-node", procs_per_node),
                ("--plugin", plugins),
                ("--package", packages),
                ("--adopt", adopt),
            )
            if value
        ]
        if given:
            raise UsageError(
                f"--plan applies the planfile as it was planned: {', '.join(given)} cannot "
                "change it; plan again with them instead"
            )
        from skyinfra.cli.review import apply_planfile

        apply_planfile(planfile, clusters_root, yes=yes, expect_sha256=None)
        return
    overrides: dict[str, Any] = {
        "name": name,
        "provider": provider,
        "nodes": int_or_raw(nodes),
        "procs_per_node": int_or_raw(procs_per_node),
        "plugins": [parse_plugin_flag(p, f"--plugin {p}") for p in plugins] if plugins else None,
        "python_packages": list(packages) if packages else None,
        "backend": backend,
        "engine": terraform_bin,
    }
    spec = checked(spec_keeping_applied(spec_path, overrides, clusters_root, flags=FLAG_KEYS))
    spec_file = spec_file_or_default(spec_path)
    ws = new_workspace(clusters_root, spec.name)
    engine = engine_factory(terraform_bin, spec)
    options = {name: value for name, value in flags.items() if value}
    _, topology = lifecycle.up(
        spec,
        ws,
        echo,
        options=options,
        origin=lifecycle.SpecOrigin(spec_file, adopt=adopt),
        confirm=confirmer(yes),
        engine_factory=engine,
    )
    echo(
        f"[skyinfra] cluster {spec.name!r} is up: {len(topology.nodes)} node(s), "
        f"head {topology.head_addr}:{topology.head_port}"
    )
    echo(f"[skyinfra] topology: {ws.topology_file}")


@click.command()
@cluster_option
@dir_option
@yes_option
@terraform_bin_option
def down(
    cluster_name: str | None, clusters_root: Path | None, yes: bool, terraform_bin: str | None
) -> None:
    """Destroy the cluster (terraform destroy): no node directory or process is left.

    Acts only on the cluster named by --cluster or by ./skyinfra.toml, shows what it destroys
    and asks first (--yes off a terminal)."""
    from skyinfra import lifecycle

    ws = workspace(clusters_root, cluster_name, changes_something=True)
    lifecycle.down(
        ws,
        echo,
        confirm=confirmer(yes),
        engine_factory=engine_factory(terraform_bin, ws.spec()),
    )
    echo(f"[skyinfra] cluster {ws.name!r} is down; state kept in {ws.path}")
    from skyinfra.checkpoints import kept_line

    kept = kept_line(ws)
    if kept:
        echo(kept)


@click.command()
@cluster_option
@dir_option
@json_option
@terraform_bin_option
def status(
    cluster_name: str | None, clusters_root: Path | None, as_json: bool, terraform_bin: str | None
) -> None:
    """Show whether a cluster is up, its Terraform resources and its nodes.

    Exits 11 when an `up` did not finish (state incomplete) or a node failed."""
    from skyinfra import exitcodes, lifecycle

    ws = workspace(clusters_root, cluster_name, changes_something=False)
    info = lifecycle.status(ws, engine_factory=engine_factory(terraform_bin, ws.spec()))
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        _print_status(info)
    if not info["healthy"]:
        click.get_current_context().exit(exitcodes.CLUSTER_UNHEALTHY)


def _print_status(info: dict[str, Any]) -> None:
    echo(
        f"cluster {info['cluster']} ({info['provider']}): {info['state']}, "
        f"{len(info['resources'])} resource(s)"
    )
    if info["state"] == "incomplete":
        echo(f"  {info['problems'][0]}")
    echo(f"  workspace: {info['workspace']}")
    for name, requirement in info.get("node_installs", {}).items():
        echo(f"  nodes install {name}: {requirement}")
    echo(f"  state: {info['backend']}; engine: {info['engine']}")
    if info.get("zone"):
        why = f" (not the first choice: {info['zone_reason']})" if info.get("zone_reason") else ""
        echo(f"  zone: {info['zone']}{why}")
    elif info.get("zone_reason"):
        echo(f"  zone: none ({info['zone_reason']})")
    if info.get("rung"):  # the ladder's rung `up` took (aws, issue 44)
        echo(f"  rung: {info['rung']['instance_type']} in {info['rung']['region']}")
    markets = info.get("markets") or {}
    fallback = info.get("spot_fallback")
    if "spot" in markets.values() or fallback:
        spot = [name for name, market in markets.items() if market == "spot"]
        echo(f"  Spot nodes: {', '.join(spot) or 'none'}")
    if fallback:
        echo(
            f"  Spot fallback: {', '.join(fallback['nodes'])} launched On-Demand "
            f"({fallback['reason']})"
        )
    words = {
        "ready": "ready",
        "pending": "bootstrapping",
        "failed": "FAILED",
        "unreachable": "unreachable",
    }
    for node in info["nodes"]:
        state = node.get("readiness", "")
        echo(
            f"  {node['name']}: {node['private_ip']} {node['instance_id']} "
            f"{words.get(state, state)}{phase_words(node)}{gpu_words(node)}"
        )
        if state != "ready" and node.get("readiness_detail"):
            echo(f"    {node['readiness_detail']}")
        notice = node.get("interrupted")
        if notice:
            noticed = time.strftime("%H:%M:%S", time.localtime(notice.get("noticed_at") or 0))
            due = time.strftime("%H:%M:%S", time.localtime(notice.get("time") or 0))
            echo(
                f"    interrupted at {noticed} (Spot notice: {notice.get('action')} at {due}; "
                "the job's recovery replaces it)"
            )
        if node.get("standbys"):
            echo(f"    {standby_words(node['standbys'])}")
    if info.get("jobs_error"):
        echo(f"  jobs: unknown ({info['jobs_error']})")
    elif info["nodes"] and info["nodes"][0].get("readiness") == "ready":
        from skyinfra.run.job import JobRecord, job_line

        running = info.get("jobs", [])
        echo(
            f"  running jobs: {len(running)}" + ("" if running else " (`skyinfra jobs` lists all)")
        )
        for job in running:
            echo(f"    {job_line(JobRecord.from_dict(job))}")


def standby_words(standbys: list[dict[str, Any]]) -> str:
    """A node's waiting standby workers for `status`: how many, and the memory they hold."""
    rss = sum(int(s.get("rss_bytes") or 0) for s in standbys)
    return (
        f"standby workers: {len(standbys)} waiting, {rss / 2**20:.0f} MiB resident "
        f"(pids {', '.join(str(s['pid']) for s in standbys)})"
    )


def gpu_words(node: dict[str, Any]) -> str:
    """A node's GPUs for `status`, as its topology counts them."""
    if not node.get("gpus"):
        return ", no GPU"
    return f", {node['gpus']} x {node.get('gpu_type') or 'GPU'}"


def phase_words(node: dict[str, Any]) -> str:
    """A node's bootstrap phase and times for `status` (targets that report phases)."""
    if node.get("phase") is None:
        return ""
    if node["phase"] == "ready":
        return f" (bootstrap took {node['bootstrap_s']:.0f} s)"
    phase, total = node["phase_s"], node["bootstrap_s"]
    return f" (phase {node['phase']} for {phase:.0f} s, {total:.0f} s in all)"


@click.command()
@cluster_option
@dir_option
def topology(cluster_name: str | None, clusters_root: Path | None) -> None:
    """Print the cluster's topology.json (schema 1)."""
    from skyinfra import lifecycle
    from skyinfra.topology import read_topology

    ws = workspace(clusters_root, cluster_name, changes_something=False)
    if not ws.topology_file.is_file():
        raise lifecycle.not_up_error(ws)
    click.echo(json.dumps(read_topology(ws.topology_file).to_dict(), indent=2))
