"""All-or-nothing `up` on AWS with availability-zone failover (the shell around capacity.py).

A new cluster is applied into the first candidate zone. When EC2 refuses the nodes for want
of capacity there (InsufficientInstanceCapacity, InsufficientCapacityOnHost, Unsupported),
what that attempt started in the zone (nodes, their subnet, the placement group) is destroyed
and the next zone is tried; with ``--retry-for`` the zones are cycled, with back-off, until
the time is up. A refusal no zone can change (quota, image, rights) stops at once. When
nothing worked, everything the attempts made is destroyed and the API is asked (by tag)
whether anything is left. Every attempt is printed and kept in the workspace (capacity.json,
capacity.py's CapacityLog). Which zones, in which order, and each node's market are
launch_plan.py's.

A cluster that already has nodes stays in its zone: growing it where there is no capacity is
reported, and nothing running is moved or destroyed.

Spot (issue 26): a Spot node's refusals are classified the same way (no Spot capacity in the
zone is InsufficientInstanceCapacity: the next zone). When every zone and round refused the
cluster and ``aws.spot_fallback = "on-demand"``, its Spot nodes are launched On-Demand
instead (the zones tried again in the same order); `up` says so, and capacity.json and
`status` keep which nodes and why. A running cluster keeps each node's market.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from skyinfra.errors import CapacityError, ConfigError, LaunchRefusedError, TerraformError
from skyinfra.spec import ClusterSpec
from skyinfra.targets.aws.capacity import (
    LOG_FILE,
    Attempt,
    CapacityLog,
    Failure,
    SpotFallback,
    asked_text,
    attempt_table,
    backoff_s,
    classify,
    failover_reason,
    parse_duration,
    parse_zones,
    spot_fallback_reason,
)
from skyinfra.targets.aws.launch_plan import Plan, launched_markets, plan_zones
from skyinfra.targets.aws.session import AwsClients
from skyinfra.targets.aws.spec import ON_DEMAND, SPOT, AwsSpec
from skyinfra.targets.aws.tagged import count_tagged
from skyinfra.targets.identity import CLUSTER_TAG, WORKSPACE_TAG, read_workspace_id
from skyinfra.terraform import EngineFactory
from skyinfra.workspace import Workspace

Echo = Callable[[str], None]
T = TypeVar("T")


@dataclass(frozen=True)
class ZoneLauncher(Generic[T]):
    """How `up` puts the cluster in one zone: ``render(zone, reservation, markets)`` runs the
    preflight and returns the root module's files (``markets``: each node's market, "on-demand"
    or "spot", by name), ``apply(files)`` applies them; ``engine_factory`` makes the Terraform
    that destroys a refused zone's part, ``clients`` ask AWS, ``sleep`` waits between rounds."""

    clients: AwsClients
    render: Callable[[str, tuple[str, bool] | None, dict[str, str]], dict[str, str]]
    apply: Callable[[dict[str, str]], T]
    engine_factory: EngineFactory
    echo: Echo
    sleep: Callable[[float], None] = time.sleep


@dataclass(frozen=True)
class _Rounds:
    """This `up`'s rounds of zones: when it started, how long it may go on retrying
    (``window_s``, from ``retry_for`` as the user wrote it) and the back-off's base;
    ``last_pass``: no pass (the Spot fallback's) comes after these rounds."""

    up_started: str
    window_s: float
    base_s: float
    retry_for: str | None
    last_pass: bool = True
    # A zone already refused before round 1 (`apply PLANFILE`'s planned zone): not applied
    # again in round 1.
    refused: str | None = None


@dataclass(frozen=True)
class ReviewedRung:
    """`apply PLANFILE` on a rung its reviewed plan approved: the zones the plan listed for the
    rung (empty: none listed; then those `up` would try) and, on the planned rung, the
    planfile's own apply that its zone refused for want of capacity (the rung's first
    attempt)."""

    zones: tuple[str, ...] = ()
    refused: Attempt | None = None


def planned_attempt(spec: ClusterSpec, zone: str, failure: Failure) -> Attempt:
    """The planfile's apply in ``zone`` that ``failure`` refused, as an attempt of the log."""
    asked = f"{spec.nodes} x {spec.section_as(AwsSpec).instance_type}"
    now = _now()
    return Attempt(now, 1, zone, asked, failure.outcome, failure.code, failure.message, now, 0.0)


# Seconds between rounds of --retry-for: doubling from the base, at most the cap. The base
# can be changed (tests use a fraction of a second).
BACKOFF_ENV_VAR = "SKYINFRA_CAPACITY_BACKOFF_S"
BACKOFF_BASE_S = 30.0
BACKOFF_CAP_S = 300.0
# What is bound to a zone and goes when an attempt there failed: the nodes (and their
# interfaces, which depend on them or on the subnet), skyinfra's subnet and the placement
# group (a cluster placement group lives in one zone). The VPC, security group, key pair and
# role stay for the next attempt.
ZONE_BOUND = (
    "module.nodes.aws_instance.this",
    "module.nodes.aws_placement_group.this",
    "module.network.aws_subnet.this",
)
INSTANCE_ADDRESS = "module.nodes.aws_instance.this"


def _backoff_base(environ: dict[str, str] | None = None) -> float:
    env = os.environ if environ is None else environ
    text = env.get(BACKOFF_ENV_VAR, "").strip()
    if not text:
        return BACKOFF_BASE_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= BACKOFF_CAP_S:
        raise ConfigError(
            BACKOFF_ENV_VAR, text, f"seconds, more than 0 and at most {BACKOFF_CAP_S:g}"
        )
    return value


def _nodes_in_state(ws: Workspace, engine_factory: EngineFactory) -> int:
    """How many nodes the cluster's Terraform state holds (0: a new or destroyed cluster)."""
    if not (ws.path / ".terraform").is_dir() and not ws.state_file.is_file():
        return 0
    try:
        resources = engine_factory(ws.path).state_list()
    except TerraformError:
        return 0
    return sum(1 for r in resources if r.startswith(INSTANCE_ADDRESS))


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Log:
    """The workspace's capacity.json, written after every attempt."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        path = ws.path / LOG_FILE
        self.doc = CapacityLog.from_dict(ws.read_json(path)) if path.is_file() else CapacityLog()
        self.this_up: list[Attempt] = []

    def add(self, attempt: Attempt) -> None:
        self.this_up.append(attempt)
        self.doc.attempts.append(attempt)
        self.save()

    def save(self) -> None:
        self.ws.write_json(self.ws.path / LOG_FILE, self.doc.to_dict())


def _destroy(ws: Workspace, engine_factory: EngineFactory, targets: Sequence[str]) -> None:
    """Terraform destroy, of ``targets`` (and what depends on them) or of everything."""
    engine = engine_factory(ws.path)
    if not targets:
        engine.destroy()
        return
    args = ["apply", "-destroy", "-input=false", "-no-color", "-auto-approve"]
    args += ["-lock-timeout=30s", *[f"-target={t}" for t in targets]]
    code, out, err = engine.command(args)
    if code != 0:
        raise TerraformError(
            f"terraform destroy of the failed attempt's nodes failed in {ws.path}",
            argv=["terraform", *args],
            returncode=code,
            stderr=err or out,
        )


def _left_over(spec: ClusterSpec, ws: Workspace, clients: AwsClients, echo: Echo) -> list[str]:
    """What AWS still shows tagged with this workspace's id (after the full destroy)."""
    tags = {CLUSTER_TAG: spec.name}
    ws_id = read_workspace_id(ws.path)
    if ws_id is not None:
        tags[WORKSPACE_TAG] = ws_id
    left, unchecked = count_tagged(clients, tags, iam_role=f"{spec.name}-node")
    for kind in unchecked:
        echo(f"[skyinfra] warning: could not list {kind}; not checked")
    return left


def _give_up(
    spec: ClusterSpec,
    ws: Workspace,
    clients: AwsClients,
    engine_factory: EngineFactory,
    echo: Echo,
) -> str:
    """Destroy everything the attempts made and say what AWS still shows (a sentence)."""
    echo(f"[skyinfra] destroying what the attempts made for {spec.name!r}")
    _destroy(ws, engine_factory, [])
    (ws.path / "topology.json").unlink(missing_ok=True)
    left = _left_over(spec, ws, clients, echo)
    if left:
        return f"AWS still shows {len(left)} resource(s) of it: " + "; ".join(left)
    return "nothing of it is left (checked with AWS by tag)"


def launch(
    spec: ClusterSpec,
    ws: Workspace,
    launcher: ZoneLauncher[T],
    *,
    zones_flag: str | None = None,
    retry_for: str | None = None,
    checks: bool = True,
    reviewed: ReviewedRung | None = None,
) -> T:
    """Render and apply the cluster zone by zone until one has room (see the module
    docstring), through ``launcher``. ``reviewed``: `apply PLANFILE`'s rung, tried in the
    zones its plan listed only; its refused planfile is the rung's first attempt, whose zone
    goes first and is not applied again."""
    echo, clients, engine_factory = launcher.echo, launcher.clients, launcher.engine_factory
    spec_aws = spec.section_as(AwsSpec)
    wanted = parse_zones(zones_flag, "--zones", spec_aws.region) if zones_flag else spec_aws.zones
    if reviewed is not None and reviewed.zones:
        wanted = reviewed.zones
    planned = reviewed.refused if reviewed is not None else None
    window_s = parse_duration(retry_for, "--retry-for") if retry_for else 0.0
    # A refused planfile is a new cluster's (a running one's is never climbed from).
    existing = 0 if planned is not None else _nodes_in_state(ws, engine_factory)
    plan = plan_zones(
        spec, ws, clients, echo=echo, wanted=wanted, existing_nodes=existing, checks=checks
    )
    log: _Log | None = None
    rounds = _Rounds(
        up_started=_now(), window_s=window_s, base_s=_backoff_base(), retry_for=retry_for
    )
    if planned is not None:
        plan = replace(plan, zones=[planned.zone, *(z for z in plan.zones if z != planned.zone)])
        rounds = replace(rounds, up_started=planned.up, refused=planned.zone)
        log = _Log(ws)
        log.add(planned)
    markets = launched_markets(spec, ws, existing)
    spot = [name for name, market in markets.items() if market == SPOT]
    # The second pass (aws.spot_fallback = "on-demand"): the same zones with every node
    # On-Demand, after every zone refused the Spot nodes.
    passes = [markets]
    if spot and spec_aws.spot_fallback == ON_DEMAND:
        passes.append(dict.fromkeys(markets, ON_DEMAND))
    if planned is not None and (len(plan.zones) > 1 or len(passes) > 1 or window_s):
        # Another attempt follows: the planfile's part in its zone goes first, as a refused
        # attempt's does (with none, giving up destroys everything).
        echo(f"[skyinfra] removing what the planfile's apply started in {plan.zones[0]}")
        _destroy(ws, engine_factory, ZONE_BOUND)
    for pass_index, pass_markets in enumerate(passes):
        if pass_index:
            assert log is not None
            why = spot_fallback_reason(log.this_up, plan.zones)
            echo(
                f"[skyinfra] Spot could not place {', '.join(spot)}: {why}. "
                f'aws.spot_fallback = "on-demand": launching {"them" if len(spot) > 1 else "it"} '
                "On-Demand"
            )
            log.doc.spot_fallback = SpotFallback(nodes=spot, reason=why)
        last = pass_index == len(passes) - 1
        this_pass = replace(rounds, last_pass=last, refused=None if pass_index else rounds.refused)
        result, log = _zone_rounds(spec, ws, plan, pass_markets, log, launcher, this_pass)
        if result is not None:
            return result[0]
    assert log is not None  # every zone was attempted at least once
    log.doc.zone, log.doc.first_choice = None, plan.zones[0]
    log.doc.reason = "every zone tried refused the nodes"
    log.doc.reservation = plan.reservation[0] if plan.reservation else None
    log.doc.markets = {}
    log.save()
    left = _give_up(spec, ws, clients, engine_factory, echo)
    hint = (
        "try again later, with --retry-for (e.g. --retry-for 30m), with more zones "
        "(aws.zones / --zones), another instance type or region, or a capacity reservation "
        "(aws.capacity_reservation_id)"
    )
    if plan.fixed is not None:
        hint = f"the zone is fixed ({plan.fixed}): try again later, e.g. with --retry-for 30m"
    if spot and len(passes) == 1:
        hint += (
            f"; or let the Spot nodes ({', '.join(spot)}) go On-Demand when Spot has no room: "
            'aws.spot_fallback = "on-demand" (or aws.market = "on-demand")'
        )
    asked = asked_text(spec.nodes, spec_aws.instance_type, passes[-1])
    raise CapacityError(
        f"no zone had capacity for {asked} of cluster {spec.name!r}; attempts:\n"
        f"{attempt_table(log.this_up)}\n{left}. What to do: {hint}",
        attempts=log.this_up,
    )


def zones_to_try(
    zones: Sequence[str], *, refused: str | None = None, retry_for: str | None = None
) -> str:
    """The zones `up` applies in, as it says them (``retry_for``: rounds go on that long). A
    zone the planfile's apply already refused (``refused``) is not applied in round 1: it is
    said apart."""
    more = f", for up to {retry_for}" if retry_for else ""
    if refused is None:
        return ", ".join(zones) + more
    again = ", again in later rounds" if retry_for else ""
    others = ", ".join(z for z in zones if z != refused) or "no other"
    return f"{others} ({refused} refused the planfile's apply already{again}){more}"


def _zone_rounds(
    spec: ClusterSpec,
    ws: Workspace,
    plan: Plan,
    markets: dict[str, str],
    log: _Log | None,
    launcher: ZoneLauncher[T],
    rounds: _Rounds,
) -> tuple[tuple[T] | None, _Log | None]:
    """The zones in order, in rounds until one has room or ``window_s`` has passed: ((the
    apply's result,), log), or (None, log) when every zone refused every round."""
    echo, clients, engine_factory = launcher.echo, launcher.clients, launcher.engine_factory
    up_started, window_s, retry_for = rounds.up_started, rounds.window_s, rounds.retry_for
    spec_aws = spec.section_as(AwsSpec)
    asked = asked_text(spec.nodes, spec_aws.instance_type, markets)
    if plan.fixed is None:
        said = zones_to_try(
            plan.zones, refused=rounds.refused, retry_for=retry_for if window_s else None
        )
        echo(f"[skyinfra] zones to try for {asked}: {said}")
    deadline = time.monotonic() + window_s
    files: dict[str, dict[str, str]] = {}
    round_index = 0
    while True:
        for zone in plan.zones:
            if round_index == 0 and zone == rounds.refused:
                continue
            if zone not in files:
                files[zone] = launcher.render(zone, plan.reservation, markets)
            number = len(log.this_up) + 1 if log else 1
            echo(f"[skyinfra] attempt {number} (round {round_index + 1}): {asked} in {zone}")
            started_at, started = _now(), time.monotonic()
            try:
                result = launcher.apply(files[zone])
            except TerraformError as err:
                failure = classify(str(err))
                log = log or _Log(ws)
                attempt = Attempt(
                    up_started,
                    round_index + 1,
                    zone,
                    asked,
                    failure.outcome,
                    failure.code,
                    failure.message,
                    started_at,
                    round(time.monotonic() - started, 1),
                )
                log.add(attempt)
                if failure.outcome == "error":
                    raise
                echo(
                    f"[skyinfra] attempt {number}: {zone} refused {asked}: {failure.code}: "
                    f"{failure.message} ({attempt.duration_s:.1f} s)"
                )
                _after_refusal(spec, ws, clients, engine_factory, echo, plan, failure, log)
                # The very last attempt's leftovers go with everything else (_give_up): a
                # targeted destroy of them first was a Terraform command for nothing.
                last_attempt = (
                    rounds.last_pass and zone == plan.zones[-1] and time.monotonic() >= deadline
                )
                if failure.outcome == "capacity" and not last_attempt:
                    echo(f"[skyinfra] removing what attempt {number} started in {zone}")
                    _destroy(ws, engine_factory, ZONE_BOUND)
                continue
            log = log or _Log(ws)
            log.add(
                Attempt(
                    up_started,
                    round_index + 1,
                    zone,
                    asked,
                    "ok",
                    "",
                    "up",
                    started_at,
                    round(time.monotonic() - started, 1),
                )
            )
            _settled(log, plan, zone, markets)
            return (result,), log
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None, log
        wait = min(backoff_s(round_index, base_s=rounds.base_s, cap_s=BACKOFF_CAP_S), remaining)
        echo(
            f"[skyinfra] no zone had room in round {round_index + 1}; next round in "
            f"{wait:.1f} s ({remaining:.0f} s of --retry-for left)"
        )
        launcher.sleep(wait)
        round_index += 1


def _after_refusal(
    spec: ClusterSpec,
    ws: Workspace,
    clients: AwsClients,
    engine_factory: EngineFactory,
    echo: Echo,
    plan: Plan,
    failure: Failure,
    log: _Log,
) -> None:
    """Stop at once when no other zone or round can help: a fatal refusal, or a running
    cluster (never moved). Returns when the loop goes on."""
    asked = f"{spec.nodes} x {spec.section_as(AwsSpec).instance_type}"
    zone = plan.zones[0]
    if plan.existing_nodes:
        log.save()
        what = (
            f"{zone} has no capacity for more {spec.section_as(AwsSpec).instance_type} now"
            if failure.outcome == "capacity"
            else "AWS refused the new nodes"
        )
        message = (
            f"cannot grow cluster {spec.name!r} to {asked}: {what} ({failure.code}: "
            f"{failure.message}). Its {plan.existing_nodes} running node(s) stay where they are "
            f"({plan.fixed}); nothing was moved or destroyed. Options: wait and run `skyinfra up` "
            "again later, or bring up a new cluster (another --name) in another zone"
        )
        if failure.outcome == "capacity":
            raise CapacityError(message, attempts=log.this_up)
        raise LaunchRefusedError(message, code=failure.code)
    if failure.outcome == "fatal":
        log.doc.zone, log.doc.reason = None, f"{failure.code}: {failure.message}"
        log.save()
        left = _give_up(spec, ws, clients, engine_factory, echo)
        hint = failure.hint()
        raise LaunchRefusedError(
            f"AWS refused {asked} for cluster {spec.name!r}: {failure.code}: {failure.message}"
            f"{'; ' + hint if hint else ''}. Another zone cannot change this, so no other zone is "
            f"tried; {left}",
            code=failure.code,
        )


def _settled(log: _Log, plan: Plan, zone: str, markets: dict[str, str]) -> None:
    """Record where the cluster is and, after a failover, why it is not in the first zone;
    and each node's market (a Spot fallback of an earlier `up` stays recorded while its
    nodes run On-Demand)."""
    doc = log.doc
    if doc.zone != zone or doc.first_choice is None:
        doc.first_choice = plan.zones[0]
        doc.reason = failover_reason(log.this_up, plan.zones[0], zone)
    doc.zone = zone
    doc.reservation = plan.reservation[0] if plan.reservation else None
    doc.markets = dict(markets)
    if doc.spot_fallback is not None:
        still = [n for n in doc.spot_fallback.nodes if markets.get(n) == ON_DEMAND]
        doc.spot_fallback = SpotFallback(still, doc.spot_fallback.reason) if still else None
    log.save()
