"""What a command resolves before it acts: the workspace it names, the Terraform engine, the
spec's overrides and whether destroying is confirmed.

The library behind the commands is imported inside these functions, when a command runs:
`skyinfra --help` and the commands that do not need it never load it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from skyinfra.cli.options import DEFAULT_SPEC

if TYPE_CHECKING:
    from skyinfra_runtime.topology import Topology

    from skyinfra.lifecycle import Confirm
    from skyinfra.spec import ClusterSpec
    from skyinfra.terraform import EngineFactory
    from skyinfra.terraform.plan import ResourceChange
    from skyinfra.transport.base import NodeTransport
    from skyinfra.workspace import Workspace, WorkspaceHold


def echo(line: str) -> None:
    click.echo(line)


def default_cluster_name() -> str | None:
    from skyinfra.errors import SpecError
    from skyinfra.spec import load_spec

    if DEFAULT_SPEC.is_file():
        try:
            return load_spec(DEFAULT_SPEC, {}).name
        except SpecError:
            return None
    return None


def workspace(
    clusters_root: Path | None, name: str | None, *, changes_something: bool
) -> Workspace:
    """The cluster named by --cluster or by skyinfra.toml; a read-only command may fall back
    to the only cluster (said on stderr, so --json output stays clean)."""
    from skyinfra.workspace import clusters_dir, select_workspace

    return select_workspace(
        clusters_dir(clusters_root),
        name,
        spec_name=default_cluster_name(),
        changes_something=changes_something,
        say=lambda line: click.echo(line, err=True),
    )


def new_workspace(clusters_root: Path | None, name: str) -> Workspace:
    """The workspace of cluster ``name`` under --dir, made or not."""
    from skyinfra.workspace import Workspace, clusters_dir

    return Workspace(clusters_dir(clusters_root) / name)


def spec_keeping_applied(
    spec_path: Path | None,
    overrides: dict[str, Any],
    clusters_root: Path | None,
    *,
    flags: dict[str, str],
    say: Callable[[str], None] = echo,
) -> ClusterSpec:
    """The spec of `up`, `plan` and `render`: the spec file and the flags, and where the
    cluster exists, the applied value of each field that neither gives (each kept value that
    is not the default said in a line through ``say``, with the flag among ``flags``)."""
    from skyinfra.spec import load_spec_keeping_applied
    from skyinfra.workspace import applied_spec

    spec, kept = load_spec_keeping_applied(
        spec_path,
        overrides,
        default_path=DEFAULT_SPEC,
        applied=functools.partial(applied_spec, clusters_root),
        flags=flags,
    )
    shown_file = str(spec_path) if spec_path is not None else str(DEFAULT_SPEC)
    for value in kept:
        say(value.line(shown_file))
    return spec


def checked(spec: ClusterSpec, *, guardrails: bool = True) -> ClusterSpec:
    """``spec`` once `skyinfra validate`'s offline checks pass (the files it names; with
    ``guardrails``, the guardrails it breaks by itself): run before any credential, preflight
    or network call, so a bad spec gets the same answer with or without credentials."""
    from skyinfra.validation import require_valid

    require_valid(spec, guardrails=guardrails)
    return spec


def confirmer(yes: bool) -> Confirm:
    """--yes, else a prompt on a terminal; without either nothing is destroyed. A "no" at the
    prompt is the user's answer, not a missing flag: Declined, not ConfirmationRequired."""
    from skyinfra.errors import Declined

    def confirm(changes: Sequence[ResourceChange]) -> bool:
        if yes:
            return True
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            return False
        if not click.confirm(f"Destroy or replace these {len(changes)} resource(s)?"):
            command = click.get_current_context(silent=True)
            name = command.info_name if command is not None else "skyinfra"
            raise Declined(f"{name} cancelled: you answered no; nothing was changed")
        return True

    return confirm


def engine_factory(terraform_bin: str | None, spec: ClusterSpec) -> EngineFactory:
    """The engine the command drives (an external binary's version is checked here,
    before anything runs)."""
    from skyinfra.terraform.external import engine_factory as external_engine_factory

    return external_engine_factory(terraform_bin, spec.engine, spec.provider)


def int_or_raw(value: str | None) -> int | str | None:
    if value is None:
        return None
    text = value.strip()
    return int(text) if text.lstrip("-").isdigit() else value


def spec_file_or_default(spec_path: Path | None) -> Path | None:
    """--spec, else ./skyinfra.toml when there is one."""
    return spec_path or (DEFAULT_SPEC if DEFAULT_SPEC.is_file() else None)


def refresh_shared_topology(ws: Workspace) -> None:
    """With state in a shared backend, topology.json is rebuilt from its outputs first:
    another operator may have changed or destroyed the cluster."""
    from skyinfra.terraform.backend import has_backend

    if not has_backend(ws.path):
        return
    from skyinfra import shared_state

    spec = ws.spec()
    engine = engine_factory(None, spec)(ws.path)
    shared_state.ensure_init(ws, engine)
    shared_state.refresh_topology(ws, spec, engine)


def replace_lost_nodes(ws: Workspace, lost: list[int]) -> tuple[NodeTransport, Topology]:
    """A job's lost nodes replaced as `up` replaces them (the workspace's spec; Terraform
    recreates what is missing, the topology keeps its shape and ranks; a plan that would
    destroy anything else is refused off a terminal), under the lock the caller holds; the
    transport and topology to start the job's next attempt with, once every node is ready."""
    from skyinfra import lifecycle
    from skyinfra.topology import read_topology
    from skyinfra.transport.readiness import wait_until_ready

    spec = ws.spec()
    if lifecycle.applies_as_is(ws, spec):  # node 0's copy: the root module as applied
        names = [f"node-{i}" for i in lost]
        topology = lifecycle.replace_from_root_module(
            spec, ws, echo, names, engine_factory=engine_factory(None, spec)
        )
    else:
        lifecycle.up(
            spec,
            ws,
            echo,
            engine_factory=engine_factory(None, spec),
            confirm=confirmer(False),
            lock_held=True,
        )
        topology = read_topology(ws.topology_file)
    transport = lifecycle.transport_for(ws, topology, spec=spec)
    wait_until_ready(transport, topology, timeout_s=lifecycle.default_wait_ready_s(spec), echo=echo)
    # The job's next attempt waits for the new nodes' standbys, so that it starts warm there.
    wait_s = lifecycle.REPLACED_WARM_WAIT_S
    lifecycle.warm_nodes(transport, spec, topology, lost, echo, wait_s=wait_s)
    return transport, topology


def replace_alone(hold: WorkspaceHold, lost: list[int]) -> tuple[NodeTransport, Topology]:
    """replace_lost_nodes with the workspace alone: a shared holder (an attached `run`) waits
    for the other commands that share it, as the unattended recovery waits (said once), so two
    never change the cluster at once; still busy after UNATTENDED_LOCK_WAIT_S: the error."""
    import contextlib
    import time

    from skyinfra.errors import WorkspaceBusyError
    from skyinfra.run.recovery import LOCK_RETRY_S, UNATTENDED_LOCK_WAIT_S

    give_up = time.monotonic() + UNATTENDED_LOCK_WAIT_S
    said = False
    with contextlib.ExitStack() as stack:
        while True:
            try:
                stack.enter_context(hold.exclusively())
                break
            except WorkspaceBusyError as err:
                if time.monotonic() >= give_up:
                    raise
                if not said:
                    echo(f"[skyinfra] replacing the job's nodes waits for the cluster alone: {err}")
                    said = True
                time.sleep(LOCK_RETRY_S)
        return replace_lost_nodes(hold.ws, lost)


def reload_cluster(ws: Workspace) -> tuple[NodeTransport, Topology]:
    """The cluster as its shared state says now (node 0 may have replaced nodes): its
    transport and topology."""
    from skyinfra import lifecycle
    from skyinfra.topology import read_topology

    refresh_shared_topology(ws)
    topology = read_topology(ws.topology_file)
    return lifecycle.transport_for(ws, topology, spec=ws.spec()), topology
