"""`up`: render, init, plan, review, confirm, apply, write topology.json; and node 0's
unattended replacement of lost nodes from the root module as applied
(:func:`replace_from_root_module`).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyinfra import shared_state
from skyinfra.errors import ConfirmationRequired, TerraformError, WorkspaceConflictError
from skyinfra.lifecycle.markers import mark_finished, mark_unfinished
from skyinfra.lifecycle.standbys import warm_ready_nodes
from skyinfra.lifecycle.verbs import Echo, check_target_options, spot_prices, target_of
from skyinfra.render import OWNED_DIRS, RETIRED_FILES
from skyinfra.review.markdown import terminal as terminal_warning
from skyinfra.review.report import (
    Review,
    build_review,
    facts_of,
    planned_place,
    refuse_failed_guardrails,
)
from skyinfra.spec import ClusterSpec
from skyinfra.targets.base import Apply, TargetOptions
from skyinfra.targets.identity import WORKSPACE_ID_FILE
from skyinfra.terraform import (
    EmbeddedTerraform,
    EngineFactory,
    PlanSummary,
    TerraformEngine,
    format_event,
    signals_as_interrupt,
)
from skyinfra.terraform.plan import ResourceChange, changes_beyond_nodes
from skyinfra.timeline import TIMELINE_FILE, Timeline, active
from skyinfra.topology import Topology, topology_from_outputs
from skyinfra.workspace import Workspace

# The saved plan `up` applies (deleted afterwards: it can hold variable values).
PLAN_FILE = "skyinfra.tfplan"


def progress_printer(echo: Echo) -> Callable[[dict[str, Any]], None]:
    def on_event(event: dict[str, Any]) -> None:
        line = format_event(event)
        if line:
            echo(f"  {line}")

    return on_event


# Asked before `up` or `down` destroys or replaces anything; True goes ahead. None: refuse.
Confirm = Callable[[Sequence[ResourceChange]], bool]


@dataclass(frozen=True)
class SpecOrigin:
    """Which spec file a cluster is made from (None: no file, as the Python API without one),
    and whether a cluster made from another file may be taken over (``--adopt``). `up` and
    `plan` check it against origin.json; `up` writes it there."""

    file: Path | None = None
    adopt: bool = False

    def recorded(self) -> str | None:
        """The file as origin.json keeps it (resolved), or None."""
        return str(self.file.resolve()) if self.file is not None else None


@dataclass(frozen=True)
class _UpRun:
    """One `up` in progress, as each of its applies needs it (a target may render and apply
    more than once: aws zone by zone)."""

    spec: ClusterSpec
    ws: Workspace
    echo: Echo
    engine_factory: EngineFactory
    origin: SpecOrigin
    confirm: Confirm | None
    timeline: Timeline
    on_keep: Callable[[], None]  # called once the workspace holds what is applied


def broken_nodes(ws: Workspace, spec: ClusterSpec, engine: TerraformEngine) -> list[str]:
    """Nodes Terraform thinks are fine but the target finds broken (a node folder deleted by
    hand): `up` replaces them, so that it repairs what `status` reports as failed. A state
    that cannot be listed now (an earlier, killed `up`'s Terraform still writing it) is left
    to the plan, which waits for Terraform's lock."""
    if not shared_state.has_state(ws):
        return []

    def in_state() -> list[str]:
        # Asked only by a target that looks (local): a state in S3 costs a Terraform command.
        try:
            return engine.state_list()
        except TerraformError:
            return []

    return target_of(spec).nodes_to_replace(ws, spec, in_state)


def up(
    spec: ClusterSpec,
    ws: Workspace,
    echo: Echo,
    *,
    options: TargetOptions | None = None,
    engine_factory: EngineFactory = EmbeddedTerraform,
    origin: SpecOrigin | None = None,
    confirm: Confirm | None = None,
    lock_held: bool = False,
) -> tuple[PlanSummary, Topology]:
    """Render, init, plan, apply when there are changes, write topology.json.

    ``options``: the target's own flags (such as aws's skip_preflight). ``origin``: the file
    the spec came from; a cluster made from another file is refused unless ``origin.adopt``.
    A plan that destroys or replaces resources is shown and applied only if ``confirm`` says
    yes. One operation at a time holds the workspace (``lock_held``: the caller holds it
    already: `run` replacing a lost node of its job).
    """
    options = dict(options or {})
    check_target_options(spec, options)
    target = target_of(spec)

    def launch(apply: Apply) -> tuple[PlanSummary, Topology]:
        # A target may render and apply more than once (aws: zone by zone until one has
        # capacity, targets/aws/failover.py); local renders once.
        return target.launch(
            spec, ws, echo=echo, options=options, apply=apply, engine_factory=engine_factory
        )

    settings = _UpSettings(engine_factory, origin or SpecOrigin(), confirm, lock_held)
    return _up(spec, ws, echo, settings, launch)


def up_with(
    spec: ClusterSpec,
    ws: Workspace,
    echo: Echo,
    launch: Callable[[Apply], tuple[PlanSummary, Topology]],
    *,
    engine_factory: EngineFactory = EmbeddedTerraform,
    origin: SpecOrigin | None = None,
    confirm: Confirm | None = None,
) -> tuple[PlanSummary, Topology]:
    """`up` with the target's render and apply given as ``launch`` (called with each apply),
    in a workspace the caller holds: `apply PLANFILE` going on to the next rung its plan
    approved when the planned one had no capacity (targets/aws: climb_reviewed)."""
    settings = _UpSettings(engine_factory, origin or SpecOrigin(), confirm, lock_held=True)
    return _up(spec, ws, echo, settings, launch)


@dataclass(frozen=True)
class _UpSettings:
    engine_factory: EngineFactory
    origin: SpecOrigin
    confirm: Confirm | None
    lock_held: bool


def _up(
    spec: ClusterSpec,
    ws: Workspace,
    echo: Echo,
    settings: _UpSettings,
    launch: Callable[[Apply], tuple[PlanSummary, Topology]],
) -> tuple[PlanSummary, Topology]:
    engine_factory, origin = settings.engine_factory, settings.origin
    created = _first_missing(ws.path)
    changed = False  # whether this `up` got past its checks and confirmation
    # Each stage is printed as it ends; timeline.json keeps them all (skyinfra/timeline.py).
    timeline = Timeline("up", echo)
    try:
        held = contextlib.nullcontext() if settings.lock_held else ws.lock("up")
        with held, active(timeline):
            _check_same_cluster(spec, ws, origin)
            shared_state.check_backend_kept(ws, spec)

            def kept() -> None:
                nonlocal created, changed
                created = None  # from here on the workspace is the cluster's, even on failure
                changed = True

            this_up = _UpRun(
                spec, ws, echo, engine_factory, origin, settings.confirm, timeline, kept
            )

            def apply(files: dict[str, str]) -> tuple[PlanSummary, Topology]:
                return _apply(this_up, {**files, **shared_state.backend_files(spec)})

            try:
                summary, topology = launch(apply)
                with timeline.stage("standby workers"):
                    warm_ready_nodes(ws, spec, topology, echo)
                return summary, topology
            finally:
                if changed:  # the workspace holds what was applied: keep how long it took
                    ws.write_json(ws.path / TIMELINE_FILE, timeline.to_dict())
                    echo(f"[skyinfra] up took {timeline.elapsed():.1f} s ({TIMELINE_FILE})")
    except BaseException:
        if created is not None:  # nothing of this cluster existed: leave nothing behind
            shutil.rmtree(created, ignore_errors=True)
        raise


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (None: it all exists)."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing = folder
    return missing


def _check_same_cluster(spec: ClusterSpec, ws: Workspace, origin: SpecOrigin) -> None:
    if not ws.exists():
        return
    previous = ws.spec()
    if previous.provider != spec.provider:  # a spec conflict: exit 2, like another spec file
        raise WorkspaceConflictError(
            f"cluster {spec.name!r} exists with provider {previous.provider!r}; "
            f"run `skyinfra down --cluster {spec.name}` before changing it to {spec.provider!r}"
            "; nothing was changed"
        )
    made_from = ws.read_json(ws.origin_file).get("spec_file") if ws.origin_file.is_file() else None
    now_from = origin.recorded()
    if made_from and now_from and made_from != now_from and not origin.adopt:
        raise WorkspaceConflictError(
            f"cluster {spec.name!r} in {ws.path.parent} was made from {made_from}, not from "
            f"{now_from}: another project may be using the name. Choose another --name or "
            "--dir, or pass --adopt to take the cluster over on purpose; nothing was changed"
        )


# `skyinfra plan` checks the same things `up` does before it plans.
check_same_cluster = _check_same_cluster
# `skyinfra apply` removes a workspace it made when it is refused, as `up` does.
first_missing = _first_missing


def _apply(this_up: _UpRun, files: dict[str, str]) -> tuple[PlanSummary, Topology]:
    spec, ws, echo, timeline = this_up.spec, this_up.ws, this_up.echo, this_up.timeline
    # Terraform plans from the workspace, so the render is written there first; until the
    # plan passed its guardrails and was confirmed, a refusal or a failure puts every file
    # back as it was (spec.json and origin.json are written only after).
    restore = ws.restored_unless_kept(
        # init may rewrite the provider lock file: put back too.
        [*files, ws.spec_file.name, ws.origin_file.name, ".terraform.lock.hcl"],
        owned_dirs=OWNED_DIRS,
        retired=RETIRED_FILES,
        keep_new=(WORKSPACE_ID_FILE,),
    )
    with restore as keep:
        ws.write_files(files, owned_dirs=OWNED_DIRS, retired=RETIRED_FILES)
        engine = this_up.engine_factory(ws.path)
        printer = progress_printer(echo)

        def on_event(event: dict[str, Any]) -> None:
            printer(event)
            timeline.on_event(event)

        echo(f"[skyinfra] terraform init in {ws.path}")
        with timeline.stage("terraform init"):
            engine.init()
        replace = broken_nodes(ws, spec, engine)
        if replace:
            echo(f"[skyinfra] replacing broken node(s): {', '.join(replace)}")
        # SIGTERM and SIGHUP unwind like Ctrl-C, so that the saved plan (it can hold variable
        # values) never outlives this `up`; while Terraform runs, the engine lets it finish.
        with signals_as_interrupt():
            try:
                echo("[skyinfra] terraform plan")
                with timeline.stage("terraform plan"):
                    summary = engine.plan(out=PLAN_FILE, replace=replace, on_event=on_event)
                if not summary.no_changes:
                    # Replacing a node that is already broken loses nothing: not asked about.
                    _check_plan(spec, engine, echo, this_up.confirm, repairs=set(replace))
                keep()
                this_up.on_keep()
                mark_unfinished(ws, "up")
                ws.write_json(ws.spec_file, spec.to_dict())
                ws.write_json(ws.origin_file, {"spec_file": this_up.origin.recorded()})
                if summary.no_changes:
                    echo("[skyinfra] no changes: the cluster already matches the spec")
                else:
                    echo(
                        f"[skyinfra] terraform apply ({summary.add} to add, {summary.change} "
                        f"to change, {summary.remove} to destroy)"
                    )
                    with timeline.stage("terraform apply"):
                        engine.apply(PLAN_FILE, on_event=on_event)
                    for line in timeline.resources_summary():
                        echo(f"[skyinfra]   {line}")
            finally:
                (ws.path / PLAN_FILE).unlink(missing_ok=True)
    with timeline.stage("topology"):
        topology = topology_from_outputs(engine.output(), spec)
        ws.write_json(ws.topology_file, topology.to_dict())
    mark_finished(ws)
    return summary, topology


def _check_plan(
    spec: ClusterSpec,
    engine: TerraformEngine,
    echo: Echo,
    confirm: Confirm | None,
    *,
    repairs: Collection[str] = (),
) -> None:
    """The saved plan's review: refuse it when a guardrail fails, then show what it destroys
    or replaces (the warning block plan.md shows) and go on only with the user's yes."""
    plan = engine.show_plan(PLAN_FILE)
    review = build_review(
        plan,
        facts_of(spec),
        planfile_sha256="",
        # A ladder's later rung is planned at its own type and region; spec names the first.
        spot_prices=spot_prices(spec, echo, planned_place(plan, spec.provider)),
    )
    refuse_failed_guardrails(review)
    confirm_review_losses(spec, review, echo, confirm, repairs=repairs)


def confirm_review_losses(
    spec: ClusterSpec,
    review: Review,
    echo: Echo,
    confirm: Confirm | None,
    *,
    repairs: Collection[str] = (),
) -> None:
    """Show the plan's destroys and replaces as plan.md's warning block does; go on only with
    ``confirm``'s yes. Replacing what is already broken (tainted, or in ``repairs``) loses
    nothing and is not asked about."""
    losses = []
    for loss in review.summary.losses:
        if loss.cause == "replace_because_tainted" or loss.address in repairs:
            echo(f"[skyinfra] repairing: {loss.action} {loss.address}: {loss.reason}")
        else:
            losses.append(loss)
    if not losses:
        return
    echo(f"[skyinfra] this would destroy or replace {len(losses)} resource(s) of {spec.name!r}:")
    for line in terminal_warning(losses, target=spec.provider):
        echo(f"  {line}")
    changes = [ResourceChange(x.address, x.action, x.reason, x.cause) for x in losses]
    if confirm is None or not confirm(changes):
        raise ConfirmationRequired(
            f"`up` would destroy or replace {len(losses)} resource(s) of cluster "
            f"{spec.name!r} (listed above); nothing was changed. Confirm at the prompt on a "
            "terminal, or pass --yes"
        )


def replace_from_root_module(
    spec: ClusterSpec,
    ws: Workspace,
    echo: Echo,
    nodes: Collection[str],
    *,
    engine_factory: EngineFactory = EmbeddedTerraform,
) -> Topology:
    """Re-create the lost ``nodes`` (by name) by applying the root module as the operator last
    applied it (Terraform's refresh sees their instances gone and plans them anew): node 0's
    unattended recovery, which cannot render (it has neither the operator's key nor its
    credentials). A plan that would do anything but create those nodes' resources is refused
    (ConfirmationRequired, listing it): that is the operator's to review. The caller holds the
    workspace; Terraform holds the state's lock while it plans and applies."""
    engine = engine_factory(ws.path)
    echo(f"[skyinfra] terraform init in {ws.path}")
    engine.init()
    with signals_as_interrupt():
        try:
            echo("[skyinfra] terraform plan")
            summary = engine.plan(out=PLAN_FILE, on_event=progress_printer(echo))
            beyond = changes_beyond_nodes(engine.show_plan(PLAN_FILE), nodes)
            if beyond:
                raise ConfirmationRequired(
                    f"replacing {', '.join(sorted(nodes))} of cluster {spec.name!r} would also "
                    f"change what the operator applied ({'; '.join(beyond)}): not applied "
                    "unattended. From the project's folder, `skyinfra up` shows the plan for "
                    "review, then `skyinfra jobs recover JOB` starts the job again"
                )
            if summary.no_changes:
                echo("[skyinfra] no changes: the lost nodes' instances are still there")
            else:
                echo(f"[skyinfra] terraform apply ({summary.add} to add)")
                engine.apply(PLAN_FILE, on_event=progress_printer(echo))
        finally:
            (ws.path / PLAN_FILE).unlink(missing_ok=True)
    topology = topology_from_outputs(engine.output(), spec)
    ws.write_json(ws.topology_file, topology.to_dict())
    return topology
