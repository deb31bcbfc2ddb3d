"""The cluster life cycle behind the CLI: up, down, status, and how `run` reaches the nodes.

Every verb works against the :class:`~skyinfra.targets.base.Target` the spec names (looked up
in the registry, skyinfra/targets/) and a :class:`~skyinfra.terraform.TerraformEngine` made by
an engine factory; nothing here knows which target or engine it drives.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from skyinfra import shared_state
from skyinfra.errors import (
    ClusterDownError,
    ConfirmationRequired,
    SkyinfraError,
    SpecError,
    TerraformError,
    WorkspaceConflictError,
    WorkspaceError,
    part_made,
)
from skyinfra.render import OWNED_DIRS, RETIRED_FILES
from skyinfra.review.cost import SpotPrices
from skyinfra.review.markdown import terminal as terminal_warning
from skyinfra.review.report import Review, build_review, facts_of, refuse_failed_guardrails
from skyinfra.run.head_recovery import HeadRecovery
from skyinfra.spec import ClusterSpec
from skyinfra.target_registry import declaration, declarations
from skyinfra.targets import all_targets, get_target
from skyinfra.targets.base import Target, TargetOptions
from skyinfra.targets.identity import WORKSPACE_ID_FILE
from skyinfra.terraform import (
    EmbeddedTerraform,
    EngineFactory,
    PlanSummary,
    TerraformEngine,
    format_event,
    signals_as_interrupt,
)
from skyinfra.terraform.backend import has_backend
from skyinfra.terraform.plan import ResourceChange, changes_beyond_nodes
from skyinfra.timeline import TIMELINE_FILE, Timeline, active
from skyinfra.topology import Topology, read_topology, topology_from_outputs
from skyinfra.transport import NodeTransport, Readiness
from skyinfra.transport.readiness import check_readiness
from skyinfra.workspace import Workspace, clusters_in

Echo = Callable[[str], None]
# The saved plan `up` applies (deleted afterwards: it can hold variable values).
PLAN_FILE = "skyinfra.tfplan"
# Written when `up` (or `apply`) starts to change the cluster, removed once topology.json is
# written: left behind, it tells `status` that an `up` was interrupted or failed halfway.
UNFINISHED_FILE = "unfinished.json"
# `status` asks every node whether it is ready; a node that does not answer within this many
# seconds shows as unreachable.
STATUS_CONNECT_TIMEOUT_S = 5.0


def target_of(spec: ClusterSpec) -> Target:
    return get_target(spec.provider)


def check_target_options(spec: ClusterSpec, options: TargetOptions) -> None:
    """Flags of another target are a usage error that says whose they are."""
    own = {option.name for option in declaration(spec.provider).options}
    for name, value in options.items():
        if name in own:
            continue
        owners = [(t.name, o.flag) for t in declarations() for o in t.options if o.name == name]
        flag, owner = (owners[0][1], owners[0][0]) if owners else (name, "no target")
        raise SpecError(
            flag,
            value,
            f"a flag of target {owner!r} only; cluster {spec.name!r} uses target {spec.provider!r}",
        )


def progress_printer(echo: Echo) -> Callable[[dict[str, Any]], None]:
    def on_event(event: dict[str, Any]) -> None:
        line = format_event(event)
        if line:
            echo(f"  {line}")

    return on_event


# Asked before `up` or `down` destroys or replaces anything; True goes ahead. None: refuse.
Confirm = Callable[[Sequence[ResourceChange]], bool]


def broken_nodes(ws: Workspace, spec: ClusterSpec, engine: TerraformEngine) -> list[str]:
    """Nodes Terraform thinks are fine but the target finds broken (a node folder deleted by
    hand): `up` replaces them, so that it repairs what `status` reports as failed. A state
    that cannot be listed now (an earlier, killed `up`'s Terraform still writing it) is left
    to the plan, which waits for Terraform's lock."""
    if not shared_state.has_state(ws):
        return []
    try:
        in_state = engine.state_list()
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
    spec_file: Path | None = None,
    adopt: bool = False,
    confirm: Confirm | None = None,
    lock_held: bool = False,
) -> tuple[PlanSummary, Topology]:
    """Render, init, plan, apply when there are changes, write topology.json.

    ``options``: the target's own flags (such as aws's skip_preflight). ``spec_file``: the
    file the spec came from; a cluster made from another file is refused unless ``adopt``.
    A plan that destroys or replaces resources is shown and applied only if ``confirm`` says
    yes. One operation at a time holds the workspace (``lock_held``: the caller holds it
    already: `run` replacing a lost node of its job).
    """
    options = dict(options or {})
    check_target_options(spec, options)
    created = _first_missing(ws.path)
    changed = False  # whether this `up` got past its checks and confirmation
    # Each stage is printed as it ends; timeline.json keeps them all (skyinfra/timeline.py).
    timeline = Timeline("up", echo)
    try:
        held = contextlib.nullcontext() if lock_held else ws.lock("up")
        with held, active(timeline):
            _check_same_cluster(spec, ws, spec_file, adopt=adopt)
            shared_state.check_backend_kept(ws, spec)
            target = target_of(spec)

            def apply(files: dict[str, str]) -> tuple[PlanSummary, Topology]:
                files = {**files, **shared_state.backend_files(spec)}
                return _apply(
                    spec, ws, echo, files, engine_factory, spec_file, confirm, timeline, kept
                )

            def kept() -> None:
                nonlocal created, changed
                created = None  # from here on the workspace is the cluster's, even on failure
                changed = True

            try:
                # A target may render and apply more than once (aws: zone by zone until one
                # has capacity, targets/aws/failover.py); local renders once.
                return target.launch(
                    spec, ws, echo=echo, options=options, apply=apply, engine_factory=engine_factory
                )
            finally:
                if changed:  # the workspace holds what was applied: keep how long it took
                    ws.write_json(ws.path / TIMELINE_FILE, timeline.to_dict())
                    echo(f"[skyinfra] up took {timeline.elapsed():.1f} s ({TIMELINE_FILE})")
    except BaseException:
        if created is not None:  # nothing of this cluster existed: leave nothing behind
            shutil.rmtree(created, ignore_errors=True)
        raise


def mark_unfinished(ws: Workspace, command: str) -> None:
    """From here until :func:`mark_finished`, the cluster is being changed by ``command``."""
    ws.write_json(ws.path / UNFINISHED_FILE, {"command": command, "since": time.time()})


def mark_finished(ws: Workspace) -> None:
    (ws.path / UNFINISHED_FILE).unlink(missing_ok=True)


def not_up_error(ws: Workspace) -> ClusterDownError:
    """What a command that needs the nodes raises when there is no topology.json: the cluster
    is down, or an `up` left it part-made (its marker), which takes another `up` or a `down`."""
    return ClusterDownError(ws.name, unfinished=unfinished_command(ws))


def unfinished_command(ws: Workspace) -> str | None:
    """The command whose marker says it began changing the cluster and did not finish
    (mark_unfinished), or None when none left one."""
    marker = ws.path / UNFINISHED_FILE
    if not marker.is_file():
        return None
    command = "up"
    with contextlib.suppress(WorkspaceError, OSError, ValueError, AttributeError):
        command = str(ws.read_json(marker).get("command") or "up")
    return command


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (None: it all exists)."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing = folder
    return missing


def _check_same_cluster(
    spec: ClusterSpec, ws: Workspace, spec_file: Path | None, *, adopt: bool
) -> None:
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
    now_from = str(spec_file.resolve()) if spec_file is not None else None
    if made_from and now_from and made_from != now_from and not adopt:
        raise WorkspaceConflictError(
            f"cluster {spec.name!r} in {ws.path.parent} was made from {made_from}, not from "
            f"{now_from}: another project may be using the name. Choose another --name or "
            "--dir, or pass --adopt to take the cluster over on purpose; nothing was changed"
        )


# `skyinfra plan` checks the same things `up` does before it plans.
check_same_cluster = _check_same_cluster
# `skyinfra apply` removes a workspace it made when it is refused, as `up` does.
first_missing = _first_missing


def _apply(
    spec: ClusterSpec,
    ws: Workspace,
    echo: Echo,
    files: dict[str, str],
    engine_factory: EngineFactory,
    spec_file: Path | None,
    confirm: Confirm | None,
    timeline: Timeline,
    on_keep: Callable[[], None],
) -> tuple[PlanSummary, Topology]:
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
        engine = engine_factory(ws.path)
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
                    _check_plan(spec, engine, echo, confirm, repairs=set(replace))
                keep()
                on_keep()
                mark_unfinished(ws, "up")
                ws.write_json(ws.spec_file, spec.to_dict())
                ws.write_json(
                    ws.origin_file,
                    {"spec_file": str(spec_file.resolve()) if spec_file is not None else None},
                )
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


def spot_prices(spec: ClusterSpec, echo: Echo) -> SpotPrices | None:
    """The Spot prices the review judges Spot nodes by (a target's ``spot_prices``, issue 26);
    None on a target without them or without Spot nodes."""
    return target_of(spec).spot_prices(spec, echo)


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
    review = build_review(
        engine.show_plan(PLAN_FILE),
        facts_of(spec),
        planfile_sha256="",
        spot_prices=spot_prices(spec, echo),
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
            from skyinfra.run.job import mark_ended_by_down

            echo(f"[skyinfra] ending the running job(s) {', '.join(jobs)} with the cluster")
            mark_ended_by_down(ws.runs_dir, jobs)
        echo(f"[skyinfra] terraform destroy in {ws.path}")
        engine.destroy(on_event=progress_printer(echo))
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
    from skyinfra.run.job import announce_running, cluster_jobs, is_running, keep_job_copies

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


def _interruptions(
    ws: Workspace, spec: ClusterSpec, topology: Topology, ready: Sequence[int]
) -> dict[int, dict[str, Any]]:
    """The Spot interruption notice of each ready node, job or no job: the node's runtime
    answers with the notice its job's agent recorded, else asks its metadata service now
    (skyinfra_runtime.spot.node_interruption); a node without one is left out."""
    from skyinfra.run.job import runtime_bin

    found: dict[int, dict[str, Any]] = {}
    try:
        transport = transport_for(
            ws, topology, spec=spec, connect_timeout_s=STATUS_CONNECT_TIMEOUT_S
        )
    except SkyinfraError:
        return found
    try:
        for i in ready:
            try:
                root = transport.node_root(i)
                argv = [runtime_bin(transport, i), "notice", "--node-dir", root]
                proc = transport.start(i, argv, env={}, cwd=root, tag=f"status-notice-{i}")
                lines = list(proc.lines())
                if proc.wait(30) != 0 or not lines:
                    continue
                notice = json.loads(lines[-1])
            except (SkyinfraError, OSError, ValueError):
                continue
            if isinstance(notice, dict) and notice:
                found[i] = notice
    finally:
        transport.close()
    return found


def _running_jobs(
    ws: Workspace, spec: ClusterSpec, topology: Topology
) -> tuple[list[dict[str, Any]], str]:
    """The running jobs' records as `status` reports them (JSON), and why they could not be
    read ("" when they could)."""
    from skyinfra.run.job import running_jobs

    timeout = STATUS_CONNECT_TIMEOUT_S
    found, why = running_jobs(
        lambda: transport_for(ws, topology, spec=spec, connect_timeout_s=timeout)
    )
    return [job.to_dict() for job in found], why


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


def transport_for(
    ws: Workspace,
    topology: Topology,
    *,
    spec: ClusterSpec | None = None,
    connect_timeout_s: float | None = None,
) -> NodeTransport:
    """How `run` and `status` reach the nodes (``connect_timeout_s``: SSH targets only)."""
    spec = spec or ws.spec()
    return target_of(spec).transport(ws, spec, topology, connect_timeout_s=connect_timeout_s)


def applies_as_is(ws: Workspace, spec: ClusterSpec) -> bool:
    """Whether this workspace's root module is applied as it is, never rendered again: node
    0's copy of the operator's workspace (the target's verb ``applies_as_is``)."""
    return target_of(spec).applies_as_is(ws)


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


def head_recovery_of(ws: Workspace, spec: ClusterSpec) -> HeadRecovery | None:
    """The command node 0's supervisor runs to recover a job that lost nodes, when the
    cluster's target has one (verb ``head_recovery``) and its spec turns it on."""
    return target_of(spec).head_recovery(ws, spec)


def default_wait_ready_s(spec: ClusterSpec) -> float:
    """How long `run` waits for nodes still bootstrapping, unless --wait-ready says."""
    return target_of(spec).wait_ready_s


def node_readiness(
    ws: Workspace,
    spec: ClusterSpec,
    topology: Topology,
    *,
    connect_timeout_s: float | None = None,
) -> dict[int, Readiness]:
    """Every node's readiness through its transport; a node that cannot be reached (or a
    transport that cannot be set up, such as a missing SSH key) reads as unreachable."""
    try:
        transport = transport_for(ws, topology, spec=spec, connect_timeout_s=connect_timeout_s)
    except SkyinfraError as err:
        return {n.index: Readiness("unreachable", str(err)) for n in topology.nodes}
    try:
        return check_readiness(transport, topology)
    finally:
        transport.close()


def _state(ws: Workspace, resources: Sequence[str], topology: Topology | None) -> tuple[str, str]:
    """The cluster's state for `status` (up, down or incomplete), and for an incomplete one
    what happened and what to run."""
    if not resources:
        return "down", ""
    command = unfinished_command(ws)
    if topology is not None and command is None:
        return "up", ""
    holder = ws.lock_holder()
    if holder is not None:
        return "incomplete", (
            f"`skyinfra {holder.get('command')}` (pid {holder.get('pid')}) is changing the "
            "cluster now: wait for it to end"
        )
    return "incomplete", part_made(ws.name, command or "up")


def status(ws: Workspace, *, engine_factory: EngineFactory = EmbeddedTerraform) -> dict[str, Any]:
    """The cluster's state, resources and nodes; each node says whether it is ready
    (``readiness``: ready, pending, failed or unreachable, with ``readiness_detail``)."""
    spec = ws.spec()
    engine = engine_factory(ws.path)
    if has_backend(ws.path):  # shared state: another operator may have changed the cluster
        shared_state.ensure_init(ws, engine)
        shared_state.refresh_topology(ws, spec, engine)
    resources = engine.state_list() if shared_state.has_state(ws) else []
    topology = read_topology(ws.topology_file) if ws.topology_file.is_file() else None
    nodes: list[dict[str, Any]] = []
    if topology is not None:
        readiness = node_readiness(ws, spec, topology, connect_timeout_s=STATUS_CONNECT_TIMEOUT_S)
        for node in topology.nodes:
            ready = readiness[node.index]
            nodes.append(
                {
                    "index": node.index,
                    "name": node.name,
                    "private_ip": node.private_ip,
                    "public_ip": node.public_ip,
                    "instance_id": node.instance_id,
                    "ready": ready.ready,
                    "readiness": ready.state,
                    "readiness_detail": ready.detail,
                    "phase": ready.phase,
                    "phase_s": ready.phase_s,
                    "bootstrap_s": ready.bootstrap_s,
                }
            )
    answering = [int(n["index"]) for n in nodes if n["ready"]]
    if topology is not None and answering:
        noticed = _interruptions(ws, spec, topology, answering)
        for n in nodes:
            n["interrupted"] = noticed.get(int(n["index"]))
    jobs: list[dict[str, Any]] = []
    jobs_error = ""
    if topology is not None and nodes and nodes[0]["readiness"] == "ready":
        jobs, jobs_error = _running_jobs(ws, spec, topology)
    state, unfinished = _state(ws, resources, topology)
    problems = [unfinished] if unfinished else []
    for n in nodes:
        if n["readiness"] == "failed":
            problems.append(f"{n['name']} failed: {n['readiness_detail'] or 'no detail'}")
    target = target_of(spec)
    info = {
        "cluster": spec.name,
        "provider": spec.provider,
        "workspace": str(ws.path),
        # up, down, or incomplete: an `up` (or `apply`) did not finish ("problems" says what
        # to run).
        "state": state,
        # Nothing incomplete, no node failed: `status` exits 0 (else CLUSTER_UNHEALTHY).
        "healthy": not problems,
        "problems": problems,
        "engine": engine.describe(),
        "backend": spec.backend or "local (the workspace)",
        "resources": resources,
        "nodes": nodes,
        "jobs": jobs,  # the running ones (the head's records)
        "jobs_error": jobs_error,
        # What the nodes install, where the target says (aws: the pinned jax).
        "node_installs": target.node_installs(ws, spec),
    }
    # A target's own facts (aws: the zone, and why it is not the first choice).
    info.update(target.status_details(ws, spec))
    return info
