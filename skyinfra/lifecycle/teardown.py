"""`down` (destroy after confirmation, ending the cluster's running jobs, then ask the target
what is left) and `gc` (what the targets made that no workspace holds).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from skyinfra import shared_state
from skyinfra.errors import ConfirmationRequired, TerraformError, WorkspaceError
from skyinfra.lifecycle.changes import Confirm, progress_printer
from skyinfra.lifecycle.cluster_status import STATUS_CONNECT_TIMEOUT_S
from skyinfra.lifecycle.markers import mark_finished
from skyinfra.lifecycle.verbs import Echo, target_of, transport_for
from skyinfra.spec import ClusterSpec
from skyinfra.targets import all_targets
from skyinfra.terraform import EmbeddedTerraform, EngineFactory
from skyinfra.terraform.plan import ResourceChange
from skyinfra.topology import read_topology
from skyinfra.workspace import Workspace, clusters_in


def down(
    ws: Workspace,
    echo: Echo,
    *,
    engine_factory: EngineFactory = EmbeddedTerraform,
    confirm: Confirm | None = None,
) -> None:
    """Destroy the cluster after showing what goes and getting ``confirm``'s yes."""
    spec = ws.spec()
    with ws.lock("down"):
        engine = engine_factory(ws.path)
        if not (ws.path / ".terraform").is_dir():
            engine.init()
        resources = engine.state_list() if shared_state.has_state(ws) else []
        echo(
            f"[skyinfra] destroying cluster {spec.name!r} ({spec.provider}, {len(resources)} "
            f"resource(s)) in {ws.path}"
        )
        losses = [ResourceChange(address, "destroy", "down") for address in resources]
        jobs = _jobs_that_end(ws, spec, echo) if losses else []
        if losses and (confirm is None or not confirm(losses)):
            raise ConfirmationRequired(
                f"`down` would destroy {len(losses)} resource(s) of cluster {spec.name!r}"
                + (f" and end its running job(s) {', '.join(jobs)}" if jobs else "")
                + "; nothing was changed. Confirm at the prompt on a terminal, or pass --yes"
            )
        if jobs:
            from skyinfra.run.jobcopies import mark_ended_by_down

            echo(f"[skyinfra] ending the running job(s) {', '.join(jobs)} with the cluster")
            mark_ended_by_down(ws.runs_dir, jobs)
        echo(f"[skyinfra] terraform destroy in {ws.path}")
        try:
            engine.destroy(on_event=progress_printer(echo))
        except TerraformError as err:
            # Part of it may be gone (the ssh target: a host that stopped answering keeps its
            # node): the target says what is left where; the state keeps the rest for a later
            # `down`.
            left = target_of(spec).leftovers(ws, spec, echo=echo)
            if not left:
                raise
            raise TerraformError(
                f"cluster {ws.name!r}: destroy did not finish; left: "
                + "; ".join(left)
                + f". Terraform's state keeps what it could not destroy: run `skyinfra down "
                f"--cluster {ws.name}` again to finish it ({err})"
            ) from err
        ws.topology_file.unlink(missing_ok=True)
        mark_finished(ws)
        remaining = engine.state_list()
        if remaining:
            raise WorkspaceError(
                f"cluster {ws.name!r}: resources left in state after destroy: {remaining}"
            )
        target = target_of(spec)
        target.after_down(ws, spec, echo=echo)
        left = target.leftovers(ws, spec, echo=echo)
        if left:
            raise WorkspaceError(
                f"cluster {ws.name!r}: destroyed in Terraform's state, but {spec.provider} still "
                f"shows {len(left)} of its resource(s): " + "; ".join(left)
            )
        echo(f"[skyinfra] checked with {spec.provider}: nothing of cluster {spec.name!r} is left")


def _jobs_that_end(ws: Workspace, spec: ClusterSpec, echo: Echo) -> list[str]:
    """The ids of the cluster's running jobs, each listed for `down`'s confirmation."""
    from skyinfra.run.job import announce_running, cluster_jobs, is_running
    from skyinfra.run.jobcopies import keep_job_copies

    if not ws.topology_file.is_file():
        return []
    topology = read_topology(ws.topology_file)
    timeout = STATUS_CONNECT_TIMEOUT_S
    found, why = cluster_jobs(
        lambda: transport_for(ws, topology, spec=spec, connect_timeout_s=timeout)
    )
    # The head's records go with the cluster: `jobs` lists these copies once it is down.
    keep_job_copies(ws.runs_dir, found)
    return announce_running(([j for j in found if is_running(j)], why), echo)


def gc(base: Path, echo: Echo, *, extra_specs: Sequence[ClusterSpec] = ()) -> list[str]:
    """What every target made (by its tags) that no workspace in ``base`` has in its state,
    looked for where those workspaces (and ``extra_specs``) run. Lists; deletes nothing."""
    workspaces = [Workspace(base / name) for name in clusters_in(base)]
    specs = [ws.spec() for ws in workspaces] + list(extra_specs)
    lines: list[str] = []
    # Workspaces with a shared backend are read through their pulled state (shared_state).
    with shared_state.pulled_states(workspaces, EmbeddedTerraform) as readable:
        for target in all_targets():
            if any(spec.provider == target.name for spec in specs):
                lines += target.orphans(readable, specs, echo=echo)
    return lines
