"""A cluster's Terraform state, shared and raw: `attach`, `unlock`, `state push`, `tf`, and
`gc` (what no workspace's state knows about)."""

from __future__ import annotations

from pathlib import Path

import click

from skyinfra.cli.options import (
    DEFAULT_SPEC,
    backend_option,
    cluster_option,
    dir_option,
    terraform_bin_option,
)
from skyinfra.cli.resolve import (
    checked,
    echo,
    engine_factory,
    new_workspace,
    spec_file_or_default,
    workspace,
)


@click.command()
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
    from skyinfra import lifecycle, shared_state
    from skyinfra.spec import load_spec

    overrides = {"name": name, "backend": backend, "engine": terraform_bin}
    spec = checked(load_spec(spec_path, overrides, default_path=DEFAULT_SPEC), guardrails=False)
    engine = engine_factory(terraform_bin, spec)
    ws = new_workspace(clusters_root, spec.name)
    files = lifecycle.target_of(spec).render(spec, ws, echo=echo, options={})
    topology = shared_state.attach(spec, ws, files, echo, engine_factory=engine)
    if topology is None:
        echo(f"[skyinfra] cluster {spec.name!r} is down in {spec.backend}; workspace {ws.path}")
        return
    echo(
        f"[skyinfra] attached to cluster {spec.name!r} ({spec.backend}): "
        f"{len(topology.nodes)} node(s); topology: {ws.topology_file}"
    )


@click.command()
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

    ws = workspace(clusters_root, cluster_name, changes_something=True)
    shared_state.unlock(ws, lock_id, engine_factory=engine_factory(terraform_bin, ws.spec()))
    echo(f"[skyinfra] released lock {lock_id} of cluster {ws.name!r}")


@click.group()
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

    ws = workspace(clusters_root, cluster_name, changes_something=True)
    url = shared_state.push(
        ws, backend, echo, engine_factory=engine_factory(terraform_bin, ws.spec())
    )
    echo(
        f"[skyinfra] the state of {ws.name!r} is in {url}; the local copy: "
        f"{ws.path / shared_state.LOCAL_BACKUP}"
    )


@click.command(context_settings={"ignore_unknown_options": True})
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
    ws = workspace(clusters_root, cluster_name, changes_something=True)
    engine = engine_factory(terraform_bin, ws.spec())
    with ws.lock("tf " + " ".join(args)):
        code = engine(ws.path).raw(list(args))
    ctx.exit(code)


@click.command()
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
    from skyinfra import lifecycle
    from skyinfra.spec import load_spec
    from skyinfra.workspace import clusters_dir

    path = spec_file_or_default(spec_path)
    extra = [load_spec(path, {})] if path is not None else []
    lines = lifecycle.gc(clusters_dir(clusters_root), echo, extra_specs=extra)
    for line in lines:
        echo(line)
    echo(
        f"[skyinfra] {len(lines)} resource(s) tagged by skyinfra that no workspace knows about"
        + ("" if not lines else " (listed above; nothing was deleted)")
    )
