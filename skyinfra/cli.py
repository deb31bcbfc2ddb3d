"""The `skyinfra` command line (click). `main` is the console script entry point.

Every user-caused error is a SkyinfraError: printed as one message, exit with its exit_code
(the table in skyinfra.exitcodes, documented in README.md). Anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from skyinfra import __version__, exitcodes, lifecycle
from skyinfra.errors import ClusterDownError, SkyinfraError, SpecError
from skyinfra.run.ignore import topology_path_inside
from skyinfra.run.report import print_report, raise_for_failure
from skyinfra.run.session import DEFAULT_KEEP_RUNS, run_on_cluster
from skyinfra.spec import load_spec, parse_plugin_flag
from skyinfra.targets import all_targets, target_names
from skyinfra.terraform.plan import ResourceChange
from skyinfra.topology import read_topology
from skyinfra.workspace import Workspace, clusters_dir, select_workspace

DEFAULT_SPEC = Path("skyinfra.toml")

dir_option = click.option(
    "--dir",
    "clusters_root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder holding cluster workspaces (default .skyinfra/clusters, or $SKYINFRA_DIR).",
)
cluster_option = click.option(
    "--cluster",
    "cluster_name",
    default=None,
    help="Cluster name (default: the only cluster, or skyinfra.toml's name).",
)


def echo(line: str) -> None:
    click.echo(line)


def _default_cluster_name() -> str | None:
    if DEFAULT_SPEC.is_file():
        try:
            return load_spec(DEFAULT_SPEC, {}).name
        except SpecError:
            return None
    return None


def _workspace(
    clusters_root: Path | None, name: str | None, *, changes_something: bool
) -> Workspace:
    """The cluster named by --cluster or by skyinfra.toml; a read-only command may fall back
    to the only cluster (said on stderr, so --json output stays clean)."""
    return select_workspace(
        clusters_dir(clusters_root),
        name,
        spec_name=_default_cluster_name(),
        changes_something=changes_something,
        say=lambda line: click.echo(line, err=True),
    )


def _confirmer(yes: bool) -> lifecycle.Confirm:
    """--yes, else a prompt on a terminal; without either nothing is destroyed."""

    def confirm(changes: Sequence[ResourceChange]) -> bool:
        if yes:
            return True
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            return False
        return click.confirm(f"Destroy or replace these {len(changes)} resource(s)?")

    return confirm


yes_option = click.option(
    "--yes",
    is_flag=True,
    help="Destroy or replace resources without asking (needed off a terminal).",
)


def target_options(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Every target's own flags for ``command``, each help text naming its target; the
    values reach the cluster's target as TargetOptions (another target's flag is an error)."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        for target in reversed(all_targets()):
            for option in reversed(target.options):
                if command in option.commands:
                    func = click.option(
                        option.flag,
                        option.name,
                        is_flag=option.metavar is None,
                        metavar=option.metavar,
                        default=None,
                        help=f"[{target.name}] {option.help}",
                    )(func)
        return func

    return decorate


def _int_or_raw(value: str | None) -> int | str | None:
    if value is None:
        return None
    text = value.strip()
    return int(text) if text.lstrip("-").isdigit() else value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="skyinfra")
def cli() -> None:
    """Multi-node clusters from reviewable Terraform; run JAX, Keras and PyTorch code on them."""


@cli.command()
@click.option(
    "--spec",
    "spec_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Cluster spec TOML (default ./skyinfra.toml when present).",
)
@click.option("--name", default=None, help="Cluster name.")
@click.option(
    "--provider", default=None, help=f"Target: {', '.join(target_names())} (default local)."
)
@click.option("--nodes", default=None, help="Number of nodes.")
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
@yes_option
@click.option(
    "--adopt",
    is_flag=True,
    help="Take over a cluster of this name that another spec file made.",
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
    **flags: Any,
) -> None:
    """Create or update a cluster: validate the spec, render Terraform, apply it."""
    overrides: dict[str, Any] = {
        "name": name,
        "provider": provider,
        "nodes": _int_or_raw(nodes),
        "procs_per_node": _int_or_raw(procs_per_node),
        "plugins": [parse_plugin_flag(p, f"--plugin {p}") for p in plugins] if plugins else None,
        "python_packages": list(packages) if packages else None,
    }
    spec = load_spec(spec_path, overrides, default_path=DEFAULT_SPEC)
    spec_file = spec_path or (DEFAULT_SPEC if DEFAULT_SPEC.is_file() else None)
    ws = Workspace(clusters_dir(clusters_root) / spec.name)
    options = {name: value for name, value in flags.items() if value}
    _, topology = lifecycle.up(
        spec,
        ws,
        echo,
        options=options,
        spec_file=spec_file,
        adopt=adopt,
        confirm=_confirmer(yes),
    )
    echo(
        f"[skyinfra] cluster {spec.name!r} is up: {len(topology.nodes)} node(s), "
        f"head {topology.head_addr}:{topology.head_port}"
    )
    echo(f"[skyinfra] topology: {ws.topology_file}")


@cli.command(context_settings={"ignore_unknown_options": True})
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
    help="End every node when the run takes longer (counted from the start of the nodes), "
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
@click.argument("entry")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(
    cluster_name: str | None,
    clusters_root: Path | None,
    all_logs: bool,
    wait_ready: int | None,
    timeout_s: float | None,
    keep_runs: int,
    entry: str,
    args: tuple[str, ...],
) -> None:
    """Run ENTRY on every node through skyinfra-runtime (ENTRY [-- ARGS...]).

    Nodes whose bootstrap has not finished are waited for (--wait-ready); a node whose
    bootstrap failed stops the run before anything starts. ENTRY is checked first (exit 2).
    The current directory is copied to each node's runs/<id>/work (minus secrets, build
    output and .skyinfraignore patterns), output of node 0 is streamed (--all-logs: all
    nodes), the first failure ends the other nodes. Keep outputs in $SKYINFRA_SHARED_DIR.
    Results and logs go to the workspace's runs/<id>/.
    """
    ws = _workspace(clusters_root, cluster_name, changes_something=True)
    if not ws.topology_file.is_file():
        raise ClusterDownError(ws.name)
    topology = read_topology(ws.topology_file)
    spec = ws.spec()
    src = Path.cwd()
    wait_s = lifecycle.default_wait_ready_s(spec) if wait_ready is None else wait_ready
    # One operation at a time: an `up` that would replace the nodes waits for the run.
    with ws.lock(f"run {entry}"):
        report = run_on_cluster(
            transport=lifecycle.transport_for(ws, topology, spec=spec),
            topology=topology,
            topology_file=ws.topology_file,
            runs_dir=ws.runs_dir,
            src=src,
            entry=entry,
            args=list(args),
            all_logs=all_logs,
            extra_ignores=topology_path_inside(src, ws.path),
            echo=echo,
            wait_ready_s=wait_s,
            timeout_s=timeout_s if timeout_s is not None else spec.run_timeout,
            keep_runs=keep_runs,
        )
    print_report(report, echo)
    raise_for_failure(report)


@cli.command()
@cluster_option
@dir_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(cluster_name: str | None, clusters_root: Path | None, as_json: bool) -> None:
    """Show whether a cluster is up, its Terraform resources and its nodes."""
    info = lifecycle.status(_workspace(clusters_root, cluster_name, changes_something=False))
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    echo(
        f"cluster {info['cluster']} ({info['provider']}): {info['state']}, "
        f"{len(info['resources'])} resource(s)"
    )
    echo(f"  workspace: {info['workspace']}")
    if info.get("zone"):
        why = f" (not the first choice: {info['zone_reason']})" if info.get("zone_reason") else ""
        echo(f"  zone: {info['zone']}{why}")
    elif info.get("zone_reason"):
        echo(f"  zone: none ({info['zone_reason']})")
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
            f"{words.get(state, state)}"
        )
        if state != "ready" and node.get("readiness_detail"):
            echo(f"    {node['readiness_detail']}")


@cli.command()
@cluster_option
@dir_option
def topology(cluster_name: str | None, clusters_root: Path | None) -> None:
    """Print the cluster's topology.json (schema 1)."""
    ws = _workspace(clusters_root, cluster_name, changes_something=False)
    if not ws.topology_file.is_file():
        raise ClusterDownError(ws.name)
    click.echo(json.dumps(read_topology(ws.topology_file).to_dict(), indent=2))


@cli.command()
@cluster_option
@dir_option
@yes_option
def down(cluster_name: str | None, clusters_root: Path | None, yes: bool) -> None:
    """Destroy the cluster (terraform destroy): no node directory or process is left.

    Acts only on the cluster named by --cluster or by ./skyinfra.toml, shows what it destroys
    and asks first (--yes off a terminal)."""
    ws = _workspace(clusters_root, cluster_name, changes_something=True)
    lifecycle.down(ws, echo, confirm=_confirmer(yes))
    echo(f"[skyinfra] cluster {ws.name!r} is down; state kept in {ws.path}")


@cli.command()
@dir_option
@click.option(
    "--spec",
    "spec_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also look where this spec runs (default ./skyinfra.toml when present).",
)
def gc(clusters_root: Path | None, spec_path: Path | None) -> None:
    """List resources skyinfra tagged that no workspace's state knows about (lists only).

    Looks where the workspaces in --dir (and the spec) run: on AWS, their regions, for
    anything tagged skyinfra:cluster that no terraform.tfstate holds. Delete what it lists
    with the provider's own tools once you are sure; nothing is deleted here.
    """
    path = spec_path or (DEFAULT_SPEC if DEFAULT_SPEC.is_file() else None)
    extra = [load_spec(path, {})] if path is not None else []
    lines = lifecycle.gc(clusters_dir(clusters_root), echo, extra_specs=extra)
    for line in lines:
        echo(line)
    echo(
        f"[skyinfra] {len(lines)} resource(s) tagged by skyinfra that no workspace knows about"
        + ("" if not lines else " (listed above; nothing was deleted)")
    )


@cli.command(context_settings={"ignore_unknown_options": True})
@cluster_option
@dir_option
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def tf(
    ctx: click.Context, cluster_name: str | None, clusters_root: Path | None, args: tuple[str, ...]
) -> None:
    """Run the embedded Terraform in the cluster's workspace: skyinfra tf -- state list."""
    if not args:
        raise click.UsageError(
            "give Terraform arguments after --, e.g. `skyinfra tf -- state list`"
        )
    from skyinfra.terraform import EmbeddedTerraform

    ws = _workspace(clusters_root, cluster_name, changes_something=True)
    with ws.lock("tf " + " ".join(args)):
        code = EmbeddedTerraform(ws.path).raw(list(args))
    ctx.exit(code)


def main(argv: list[str] | None = None) -> None:
    try:
        result = cli.main(args=argv, prog_name="skyinfra", standalone_mode=False)
    except click.exceptions.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("interrupted", err=True)
        sys.exit(exitcodes.INTERRUPTED)
    except SkyinfraError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(err.exit_code)
    sys.exit(result if isinstance(result, int) else exitcodes.OK)


if __name__ == "__main__":
    main()
