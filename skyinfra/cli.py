"""The `skyinfra` command line (click). `main` is the console script entry point.

Every user-caused error is a SkyinfraError: printed as one message, exit with its exit_code
(the table in skyinfra.exitcodes, documented in README.md). Anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from skyinfra import __version__, exitcodes, lifecycle, planning
from skyinfra.errors import ClusterDownError, SkyinfraError, SpecError, UsageError
from skyinfra.review.markdown import terminal as terminal_warning
from skyinfra.run.ignore import topology_path_inside
from skyinfra.run.report import print_report, raise_for_failure
from skyinfra.run.session import DEFAULT_KEEP_RUNS, run_on_cluster
from skyinfra.spec import ClusterSpec, load_spec, parse_plugin_flag
from skyinfra.targets import all_targets, target_names
from skyinfra.terraform import EngineFactory
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


terraform_bin_option = click.option(
    "--terraform-bin",
    "terraform_bin",
    default=None,
    metavar="PATH",
    help="Drive this terraform or tofu binary (or 'embedded'); default $SKYINFRA_TERRAFORM_BIN, "
    "else the spec's engine, else the embedded Terraform.",
)
backend_option = click.option(
    "--backend",
    default=None,
    metavar="S3_URL",
    help="Keep the state in S3 with Terraform's lock: s3://bucket/prefix[?region=R] "
    "(the spec's backend).",
)


def _engine_factory(terraform_bin: str | None, spec: ClusterSpec) -> EngineFactory:
    """The engine the command drives (an external binary's version is checked here,
    before anything runs)."""
    from skyinfra.terraform.external import engine_factory

    return engine_factory(terraform_bin, spec.engine, spec.provider)


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
        _apply_planfile(planfile, clusters_root, yes=yes, expect_sha256=None)
        return
    overrides: dict[str, Any] = {
        "name": name,
        "provider": provider,
        "nodes": _int_or_raw(nodes),
        "procs_per_node": _int_or_raw(procs_per_node),
        "plugins": [parse_plugin_flag(p, f"--plugin {p}") for p in plugins] if plugins else None,
        "python_packages": list(packages) if packages else None,
        "backend": backend,
        "engine": terraform_bin,
    }
    spec = load_spec(spec_path, overrides, default_path=DEFAULT_SPEC)
    spec_file = spec_path or (DEFAULT_SPEC if DEFAULT_SPEC.is_file() else None)
    ws = Workspace(clusters_dir(clusters_root) / spec.name)
    if spec.engine is None and ws.exists():  # the engine the cluster was made with
        spec = dataclasses.replace(spec, engine=ws.spec().engine)
    engine_factory = _engine_factory(terraform_bin, spec)
    options = {name: value for name, value in flags.items() if value}
    _, topology = lifecycle.up(
        spec,
        ws,
        echo,
        options=options,
        spec_file=spec_file,
        adopt=adopt,
        confirm=_confirmer(yes),
        engine_factory=engine_factory,
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
@click.option(
    "--verify",
    "verify_first",
    is_flag=True,
    help="Run `skyinfra verify`'s checks first; start nothing when one fails "
    f"(exit {exitcodes.VERIFY_FAILED}). `verify = true` in the spec does the same.",
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
    as_module: bool,
    entry: str,
    args: tuple[str, ...],
) -> None:
    """Run ENTRY on every node through skyinfra-runtime (ENTRY [-- ARGS...]).

    ENTRY is script.py (run as __main__, as `python script.py` or torchrun: it gets
    torchrun's environment with the torch plugin), -m package.module, package.module:function
    or script.py:function (a function: the plugins initialise the frameworks around it).

    Nodes whose bootstrap has not finished are waited for (--wait-ready); a node whose
    bootstrap failed stops the run before anything starts. ENTRY is checked first (exit 2).
    The current directory is copied to each node's runs/<id>/work (minus secrets, build
    output and .skyinfraignore patterns), output of node 0 is streamed (--all-logs: all
    nodes), the first failure ends the other nodes. Keep outputs in $SKYINFRA_SHARED_DIR.
    Results and logs go to the workspace's runs/<id>/.
    """
    if as_module:
        entry = f"-m {entry}"  # the runtime's text for a `python -m` entry
    ws = _workspace(clusters_root, cluster_name, changes_something=True)
    _refresh_shared_topology(ws)
    if not ws.topology_file.is_file():
        raise ClusterDownError(ws.name)
    topology = read_topology(ws.topology_file)
    spec = ws.spec()
    src = Path.cwd()
    wait_s = lifecycle.default_wait_ready_s(spec) if wait_ready is None else wait_ready
    # One operation at a time: an `up` that would replace the nodes waits for the run.
    with ws.lock(f"run {entry}"):
        transport = lifecycle.transport_for(ws, topology, spec=spec)
        if verify_first or spec.verify:
            from skyinfra.verify import gate

            gate(ws, spec, topology, transport, wait_ready_s=wait_s, echo=echo)
        report = run_on_cluster(
            transport=transport,
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
            terminal=sys.stdout if sys.stdout.isatty() else None,
        )
    print_report(report, echo)
    raise_for_failure(report)


@cli.command("verify")
@cluster_option
@dir_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
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

    ws = _workspace(clusters_root, cluster_name, changes_something=False)
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


def _refresh_shared_topology(ws: Workspace) -> None:
    """With state in a shared backend, topology.json is rebuilt from its outputs first:
    another operator may have changed or destroyed the cluster."""
    from skyinfra import shared_state
    from skyinfra.terraform.backend import has_backend

    if not has_backend(ws.path):
        return
    spec = ws.spec()
    engine = _engine_factory(None, spec)(ws.path)
    shared_state.ensure_init(ws, engine)
    shared_state.refresh_topology(ws, spec, engine)


@cli.command()
@cluster_option
@dir_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@terraform_bin_option
def status(
    cluster_name: str | None, clusters_root: Path | None, as_json: bool, terraform_bin: str | None
) -> None:
    """Show whether a cluster is up, its Terraform resources and its nodes."""
    ws = _workspace(clusters_root, cluster_name, changes_something=False)
    info = lifecycle.status(ws, engine_factory=_engine_factory(terraform_bin, ws.spec()))
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    echo(
        f"cluster {info['cluster']} ({info['provider']}): {info['state']}, "
        f"{len(info['resources'])} resource(s)"
    )
    echo(f"  workspace: {info['workspace']}")
    for name, requirement in info.get("node_installs", {}).items():
        echo(f"  nodes install {name}: {requirement}")
    echo(f"  state: {info['backend']}; engine: {info['engine']}")
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
            f"{words.get(state, state)}{phase_words(node)}"
        )
        if state != "ready" and node.get("readiness_detail"):
            echo(f"    {node['readiness_detail']}")


def phase_words(node: dict[str, Any]) -> str:
    """A node's bootstrap phase and times for `status` (targets that report phases)."""
    if node.get("phase") is None:
        return ""
    if node["phase"] == "ready":
        return f" (bootstrap took {node['bootstrap_s']:.0f} s)"
    phase, total = node["phase_s"], node["bootstrap_s"]
    return f" (phase {node['phase']} for {phase:.0f} s, {total:.0f} s in all)"


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
@terraform_bin_option
def down(
    cluster_name: str | None, clusters_root: Path | None, yes: bool, terraform_bin: str | None
) -> None:
    """Destroy the cluster (terraform destroy): no node directory or process is left.

    Acts only on the cluster named by --cluster or by ./skyinfra.toml, shows what it destroys
    and asks first (--yes off a terminal)."""
    ws = _workspace(clusters_root, cluster_name, changes_something=True)
    lifecycle.down(
        ws,
        echo,
        confirm=_confirmer(yes),
        engine_factory=_engine_factory(terraform_bin, ws.spec()),
    )
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
@terraform_bin_option
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def tf(
    ctx: click.Context,
    cluster_name: str | None,
    clusters_root: Path | None,
    terraform_bin: str | None,
    args: tuple[str, ...],
) -> None:
    """Run the cluster's Terraform in its workspace: skyinfra tf -- state list."""
    if not args:
        raise click.UsageError(
            "give Terraform arguments after --, e.g. `skyinfra tf -- state list`"
        )
    ws = _workspace(clusters_root, cluster_name, changes_something=True)
    engine_factory = _engine_factory(terraform_bin, ws.spec())
    with ws.lock("tf " + " ".join(args)):
        code = engine_factory(ws.path).raw(list(args))
    ctx.exit(code)


@cli.command()
@click.option(
    "--spec",
    "spec_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The cluster's spec TOML (default ./skyinfra.toml); it names the backend.",
)
@click.option("--name", default=None, help="Cluster name (default: the spec's).")
@backend_option
@terraform_bin_option
@dir_option
def attach(
    spec_path: Path | None,
    name: str | None,
    backend: str | None,
    terraform_bin: str | None,
    clusters_root: Path | None,
) -> None:
    """Join a cluster whose state is in a shared backend (a second operator): make a
    workspace for it here and read its topology from the backend. Changes no resource."""
    from skyinfra import shared_state

    overrides = {"name": name, "backend": backend, "engine": terraform_bin}
    spec = load_spec(spec_path, overrides, default_path=DEFAULT_SPEC)
    engine_factory = _engine_factory(terraform_bin, spec)
    ws = Workspace(clusters_dir(clusters_root) / spec.name)
    files = lifecycle.target_of(spec).render(spec, ws, echo=echo, options={})
    topology = shared_state.attach(spec, ws, files, echo, engine_factory=engine_factory)
    if topology is None:
        echo(f"[skyinfra] cluster {spec.name!r} is down in {spec.backend}; workspace {ws.path}")
        return
    echo(
        f"[skyinfra] attached to cluster {spec.name!r} ({spec.backend}): "
        f"{len(topology.nodes)} node(s); topology: {ws.topology_file}"
    )


@cli.command()
@cluster_option
@dir_option
@terraform_bin_option
@click.argument("lock_id")
def unlock(
    cluster_name: str | None, clusters_root: Path | None, terraform_bin: str | None, lock_id: str
) -> None:
    """Release the state lock LOCK_ID that a killed process left (Terraform's force-unlock).

    The lock's id and holder are in the error of the command that found it. Only when the
    holder is really gone: a running apply's lock protects the state."""
    from skyinfra import shared_state

    ws = _workspace(clusters_root, cluster_name, changes_something=True)
    shared_state.unlock(ws, lock_id, engine_factory=_engine_factory(terraform_bin, ws.spec()))
    echo(f"[skyinfra] released lock {lock_id} of cluster {ws.name!r}")


@cli.group()
def state() -> None:
    """Where a cluster's Terraform state lives."""


@state.command("push")
@cluster_option
@dir_option
@backend_option
@terraform_bin_option
def state_push(
    cluster_name: str | None,
    clusters_root: Path | None,
    backend: str | None,
    terraform_bin: str | None,
) -> None:
    """Move a cluster's state from its workspace to S3 (terraform init -migrate-state)."""
    from skyinfra import shared_state

    ws = _workspace(clusters_root, cluster_name, changes_something=True)
    url = shared_state.push(
        ws, backend, echo, engine_factory=_engine_factory(terraform_bin, ws.spec())
    )
    echo(
        f"[skyinfra] the state of {ws.name!r} is in {url}; the local copy: "
        f"{ws.path / shared_state.LOCAL_BACKUP}"
    )


# ---------------------------------------------------------------- review before apply


def _spec_and_overrides(
    spec_path: Path | None, name: str | None, provider: str | None, nodes: str | None
) -> tuple[ClusterSpec, Path | None]:
    overrides = {"name": name, "provider": provider, "nodes": _int_or_raw(nodes)}
    spec = load_spec(spec_path, overrides, default_path=DEFAULT_SPEC)
    return spec, spec_path or (DEFAULT_SPEC if DEFAULT_SPEC.is_file() else None)


spec_option = click.option(
    "--spec",
    "spec_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Cluster spec TOML (default ./skyinfra.toml when present).",
)


@cli.command()
@spec_option
@click.option("--name", default=None, help="Cluster name.")
@click.option("--nodes", default=None, help="Number of nodes.")
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
    spec, _ = _spec_and_overrides(spec_path, name, None, nodes)
    ws = Workspace(clusters_dir(clusters_root) / spec.name)
    target = out or Path("skyinfra-render") / spec.name
    options = {key: value for key, value in flags.items() if value}
    names = planning.render(spec, ws, target, echo, options=options)
    echo(f"[skyinfra] rendered {len(names)} file(s) of cluster {spec.name!r} into {target}")


@cli.command()
@spec_option
@click.option("--name", default=None, help="Cluster name.")
@click.option("--nodes", default=None, help="Number of nodes.")
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
    say = (lambda line: click.echo(line, err=True)) if as_json else echo
    try:
        spec, spec_file = _spec_and_overrides(spec_path, name, None, nodes)
        ws = Workspace(clusters_dir(clusters_root) / spec.name)
        options = {key: value for key, value in flags.items() if value}
        result = planning.plan(
            spec,
            ws,
            out,
            say,
            options=options,
            spec_file=spec_file,
            from_dir=from_dir,
            adopt=adopt,
            engine_factory=_engine_factory(None, spec),
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


def _apply_planfile(
    planfile: Path, clusters_root: Path | None, *, yes: bool, expect_sha256: str | None
) -> None:
    meta = planning.read_meta(planfile)
    ws = Workspace(clusters_dir(clusters_root) / str(meta.get("cluster")))
    spec_now = load_spec(DEFAULT_SPEC, {}) if DEFAULT_SPEC.is_file() else None
    if spec_now is not None and spec_now.name != ws.name:
        spec_now = None  # ./skyinfra.toml describes another cluster
    spec, topology = planning.apply_planfile(
        planfile,
        ws,
        echo,
        spec_now=spec_now,
        expect_sha256=expect_sha256,
        confirm=_confirmer(yes),
        # The engine the plan was made for (its spec's `engine`), whatever ./skyinfra.toml says.
        engine_factory=_engine_factory(None, ClusterSpec.from_dict(meta["spec"])),
    )
    echo(
        f"[skyinfra] cluster {spec.name!r} is up: {len(topology.nodes)} node(s), "
        f"head {topology.head_addr}:{topology.head_port}"
    )


@cli.command()
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
    _apply_planfile(planfile, clusters_root, yes=yes, expect_sha256=expect_sha256)


@cli.command()
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
