"""The ladder's shell: what `plan` and `up` look up for each rung (concurrently), and `up`
trying the approved rungs in order (ladder.py holds the decisions).

For each rung: the zones offering the type, the cluster's hourly price (the price table), the
vCPU quota and what runs under it, and the image in that region. ``up`` takes the rungs the
assessment approved, one after the other: a rung whose every zone refused the nodes was
already destroyed by the zone failover (failover.py, which asks AWS by tag in that region
whether anything is left) before the next rung starts. capacity.json records the rung taken.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from skyinfra_runtime.s3 import parse_url

from skyinfra.errors import CapacityError, PreflightError
from skyinfra.review.cost import price_table
from skyinfra.review.network import NetworkShape, shape_hourly
from skyinfra.spec import ClusterSpec
from skyinfra.targets.aws.capacity import LOG_FILE, Attempt, attempt_table, zone_order
from skyinfra.targets.aws.checkpoint_store import store_for
from skyinfra.targets.aws.endpoints import emulator_from_env
from skyinfra.targets.aws.ladder import (
    Assessed,
    CheckpointPlace,
    Policy,
    Quota,
    Rung,
    RungFacts,
    assess_all,
    base_gpus_per_node,
    best_score,
    checkpoint_crossing,
    rung_price,
    rungs,
)
from skyinfra.targets.aws.placement import spot_placement_scores
from skyinfra.targets.aws.preflight import (
    InstanceTypeFacts,
    aws_errors,
    describe_type,
    dlami_parameter,
    offering_zones,
    resolve_ami,
)
from skyinfra.targets.aws.quotas import (
    ON_DEMAND_VCPU_QUOTAS,
    SPOT_VCPU_QUOTAS,
    quota_class,
    quota_vcpus,
    running_vcpus,
)
from skyinfra.targets.aws.render import BASTION_INSTANCE_TYPE
from skyinfra.targets.aws.session import AwsClients, new_session
from skyinfra.targets.aws.spec import SPOT, AwsSpec, node_markets
from skyinfra.targets.aws.spot_prices import spot_price_history
from skyinfra.workspace import Workspace

Echo = Callable[[str], None]
T = TypeVar("T")
# Lookups of several rungs at once (each a handful of AWS calls).
MAX_LOOKUPS = 8


def ladder_of(spec: ClusterSpec) -> tuple[Rung, ...]:
    aws = spec.section_as(AwsSpec)
    return rungs(aws.ladder_types, aws.ladder_regions)


def policy_of(spec: ClusterSpec) -> Policy:
    aws = spec.section_as(AwsSpec)
    accelerators = aws.accelerators_parsed
    return Policy(
        nodes=spec.nodes,
        gpus_per_node=base_gpus_per_node(
            ladder_of(spec), accelerators.count if accelerators else None
        ),
        allow_reshape=aws.allow_reshape,
        min_gpu_memory_gib=aws.min_gpu_memory_gib,
        max_hourly_usd=spec.guardrails.max_hourly_usd,
        lifetime_hours=aws.max_lifetime_hours,
    )


def rung_spec(spec: ClusterSpec, rung: Rung) -> ClusterSpec:
    """``spec`` on one rung: its instance type and region (what the zone failover, the
    preflight and the render read)."""
    aws = spec.section_as(AwsSpec)
    section = dataclasses.replace(aws, instance_type=rung.instance_type, region=rung.region)
    return dataclasses.replace(spec, section=section)


def only_rung(spec: ClusterSpec, rung: Rung) -> ClusterSpec:
    """``spec`` on one rung and no other (its ladder lists dropped): what `plan` renders
    once the ladder was looked up, so that the render does not look it up again."""
    on = rung_spec(spec, rung)
    section = dataclasses.replace(
        on.section_as(AwsSpec),
        instance_types=(),
        regions=(),
        checkpoints_region=spec.section_as(AwsSpec).default_checkpoints_region,
    )
    return dataclasses.replace(on, section=section)


def rung_of(spec: ClusterSpec) -> Rung:
    aws = spec.section_as(AwsSpec)
    return Rung(aws.instance_type, aws.region)


def _quota(clients: AwsClients, rung: Rung, spot: bool) -> Quota | None:
    klass = quota_class(rung.instance_type)
    if klass is None:
        return None
    code, title = (SPOT_VCPU_QUOTAS if spot else ON_DEMAND_VCPU_QUOTAS)[klass]
    limit = quota_vcpus(clients.client("service-quotas"), code)
    if limit is None:
        return None
    ec2 = clients.client("ec2")
    in_use = running_vcpus(
        ec2, klass, lambda name: InstanceTypeFacts.of(describe_type(ec2, name)).vcpus, spot=spot
    )
    return Quota(code, title, limit, in_use)


def _zones(clients: AwsClients, aws: AwsSpec, rung: Rung) -> tuple[str, ...]:
    """The zones `up` would try for the rung, in its order (aws.zones limits them)."""
    offered = offering_zones(clients.client("ec2"), rung.instance_type)
    return tuple(zone_order(offered, wanted=aws.zones)[0])


def one_rung(spec: ClusterSpec, *, checks: bool = True) -> tuple[Assessed, ...]:
    """A spec of one type in one region as a ladder of that one rung, approved (the plan's own
    review judges it), with the zones `apply PLANFILE` may try for it (not looked up without
    ``checks``, or when AWS does not answer: then those `up` would try)."""
    rung = rung_of(spec)
    zones: tuple[str, ...] | None = None
    if checks:
        clients = AwsClients(new_session(), rung.region, emulator_from_env())
        try:
            with aws_errors(f"looking up the zones offering {rung.label}"):
                zones = _zones(clients, spec.section_as(AwsSpec), rung)
        except PreflightError:
            pass
    return (Assessed(rung, RungFacts(zones=zones), "approved"),)


def _image(clients: AwsClients, aws: AwsSpec, rung: Rung) -> str:
    if aws.ami is not None:
        found = clients.client("ec2").describe_images(ImageIds=[aws.ami]).get("Images") or []
        if not found:
            raise PreflightError(f"{aws.ami} is not an image in {rung.region}")
        return aws.ami
    # The Deep Learning AMI of the type's architecture (arm64 for Graviton GPU types).
    facts = InstanceTypeFacts.of(describe_type(clients.client("ec2"), rung.instance_type))
    return resolve_ami(clients.client("ssm"), dlami_parameter(facts.architectures))


def _spot_usd(clients: AwsClients, rung: Rung, zones: Sequence[str] | None) -> dict[str, float]:
    """The Spot price per zone of the rung's type in its region (the zones offering it, when
    known); empty when EC2 gave none."""
    try:
        with aws_errors(f"asking the Spot price history of {rung.label}"):
            prices = spot_price_history(clients.client("ec2"), rung.instance_type)
    except PreflightError:
        return {}
    return {zone: usd for zone, (usd, _) in prices.zones.items() if zones is None or zone in zones}


# The bastion's root volume before its image is looked up: the bastion module's floor (it
# takes the image's own size when larger), so that a rung's check never overstates it.
BASTION_ROOT_FLOOR_GB = 8
# The Session Manager interface endpoints aws.ssm adds (the root module's interface_endpoints).
SSM_ENDPOINTS = ("ssm", "ssmmessages", "ec2messages")


def network_shape(aws: AwsSpec) -> NetworkShape | None:
    """What the spec's private network holds (None: a public one, which costs nothing)."""
    fields = aws.network_fields
    if not fields.private:
        return None
    return NetworkShape(
        bastion_type=BASTION_INSTANCE_TYPE if fields.has_bastion else None,
        bastion_root_gb=BASTION_ROOT_FLOOR_GB,
        nat=fields.nat,
        interface_endpoints=len(SSM_ENDPOINTS) if fields.ssm else 0,
    )


def with_network(
    aws: AwsSpec, rung: Rung, price: tuple[float | None, str]
) -> tuple[float | None, str]:
    """The rung's cluster price with its private network's per hour (the bastion, a NAT
    gateway, interface endpoints), as the plan's total counts them."""
    hourly, source = price
    shape = network_shape(aws)
    if shape is None or hourly is None:
        return hourly, source
    network = shape_hourly(shape, price_table(), rung.region)
    return hourly + network.after, f"{source}, and the private network: {', '.join(network.parts)}"


def rung_facts(spec: ClusterSpec, rung: Rung, *, checks: bool = True) -> RungFacts:
    """What AWS says of one rung (a lookup that fails leaves its fact unknown; an image that
    does not resolve is said, so that the rung is skipped). A Spot rung is priced from its
    region's Spot price history (looked up only with ``checks``)."""
    aws = spec.section_as(AwsSpec)
    markets = list(node_markets(aws, spec.nodes).values())
    spot_nodes = markets.count(SPOT)
    on_demand = price_table().hourly(rung.region, rung.instance_type)
    hourly, source = with_network(aws, rung, rung_price(markets, on_demand, None))
    facts = RungFacts(hourly_usd=hourly, market=aws.market, price_source=source)
    if not checks:
        return facts

    clients = AwsClients(new_session(), rung.region, emulator_from_env())
    zones: tuple[str, ...] | None = None
    quota: Quota | None = None
    image: str | None = None
    image_problem: str | None = None
    try:
        with aws_errors(f"looking up {rung.label}"):
            zones = _zones(clients, aws, rung)
            quota = _quota(clients, rung, aws.market == SPOT)
    except PreflightError:
        pass
    try:
        with aws_errors(f"resolving the image in {rung.region}"):
            image = _image(clients, aws, rung)
    except PreflightError as err:
        image_problem = str(err)
    score = None
    if spot_nodes:
        spot_usd = _spot_usd(clients, rung, zones)
        hourly, source = with_network(aws, rung, rung_price(markets, on_demand, spot_usd))
        score = best_score(spot_placement_scores(clients, rung.instance_type, spot_nodes))
    return dataclasses.replace(
        facts,
        hourly_usd=hourly,
        price_source=source,
        zones=zones,
        quota=quota,
        image=image,
        image_problem=image_problem,
        placement_score=score,
    )


def _stored_bytes(s3: Any, bucket: str, prefix: str) -> int:
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=prefix.rstrip("/") + "/"
    )
    return sum(o.get("Size", 0) for page in pages for o in page.get("Contents", []))


def checkpoint_place(spec: ClusterSpec) -> CheckpointPlace | None:
    """Where the checkpoints are: ``aws.checkpoints_url``'s bucket's region and the bytes
    under its prefix, else the default bucket in the ladder's first region (None: one region,
    where nothing crosses; or S3 did not say where the named bucket is)."""
    aws = spec.section_as(AwsSpec)
    if aws.checkpoints_url is None and len(aws.ladder_regions) < 2:
        return None

    home = aws.default_checkpoints_region
    clients = AwsClients(new_session(), home, emulator_from_env())
    s3 = clients.client("s3")
    if aws.checkpoints_url is None:
        try:
            with aws_errors("asking AWS for the account id"):
                account = str(clients.client("sts").get_caller_identity()["Account"])
        except PreflightError:
            account = "<account>"
        store = store_for(spec.name, None, account, home)
        try:
            with aws_errors(f"listing {store.url}"):
                size: int | None = _stored_bytes(s3, store.bucket, store.prefix)
        except PreflightError:
            size = None  # not made yet (no `up` so far): nothing stored
        return CheckpointPlace(store.url, home, size)
    bucket, prefix = parse_url(aws.checkpoints_url)
    try:
        with aws_errors(f"looking up the region of {aws.checkpoints_url}"):
            where = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint")
            size = _stored_bytes(s3, bucket, prefix)
    except PreflightError:
        return None
    # GetBucketLocation says nothing for us-east-1 and "EU" for the oldest eu-west-1 buckets.
    region = {None: "us-east-1", "": "us-east-1", "EU": "eu-west-1"}.get(where, where)
    return CheckpointPlace(aws.checkpoints_url, str(region), size)


def assess_ladder(spec: ClusterSpec, *, checks: bool = True) -> tuple[Assessed, ...]:
    """Every rung with its facts (looked up concurrently) and verdict, in order."""
    ladder = ladder_of(spec)
    with ThreadPoolExecutor(max_workers=min(MAX_LOOKUPS, len(ladder)) + 1) as pool:
        place = pool.submit(checkpoint_place, spec) if checks else None
        found = list(pool.map(lambda rung: rung_facts(spec, rung, checks=checks), ladder))
        where = None if place is None else place.result()
    # A private network without NAT reaches S3 through its gateway endpoint only.
    aws = spec.section_as(AwsSpec)
    endpoint_only = aws.network_fields.private and not aws.nat
    found = [
        dataclasses.replace(
            facts, checkpoint_note=checkpoint_crossing(rung, where, endpoint_only=endpoint_only)
        )
        for rung, facts in zip(ladder, found, strict=True)
    ]
    return assess_all(ladder, dict(zip(ladder, found, strict=True)), policy_of(spec))


def refusal_lines(assessed: Sequence[Assessed]) -> list[str]:
    return [
        f"rung {i} ({a.rung.label}) {a.verdict}: {a.reason}"
        for i, a in enumerate(assessed, 1)
        if not a.approved
    ]


def first_approved(spec: ClusterSpec, assessed: Sequence[Assessed]) -> Rung:
    """The rung a plan renders: the first the ladder approved. PreflightError when none is."""
    for a in assessed:
        if a.approved:
            return a.rung
    raise PreflightError(
        f"no rung of the ladder of cluster {spec.name!r} may be tried:\n  "
        + "\n  ".join(refusal_lines(assessed))
    )


def landed_rung(ws: Workspace) -> Rung | None:
    """The rung capacity.json says the cluster is on (None: none recorded)."""
    path = ws.path / LOG_FILE
    if not path.is_file():
        return None
    rung = ws.read_json(path).get("rung")
    if not isinstance(rung, dict):
        return None
    return Rung(str(rung["instance_type"]), str(rung["region"]))


def landed_spec(spec: ClusterSpec, ws: Workspace) -> ClusterSpec:
    """``spec`` on the rung the cluster's `up` took (capacity.json), else as it is."""
    rung = landed_rung(ws)
    return spec if rung is None else rung_spec(spec, rung)


def record_rung(ws: Workspace, rung: Rung, index: int) -> None:
    path = ws.path / LOG_FILE
    doc: dict[str, Any] = ws.read_json(path) if path.is_file() else {}
    doc["rung"] = {"index": index, "instance_type": rung.instance_type, "region": rung.region}
    ws.write_json(path, doc)


def _refusal_summary(err: CapacityError) -> str:
    """One line of the zone failover's message: what had no room, and what AWS still shows."""
    lines = str(err).splitlines()
    head = lines[0].removesuffix("; attempts:")
    left = next((line for line in lines if ". What to do:" in line), "")
    return head + (f"; {left.split('. What to do:')[0]}" if left else "")


def climb(
    spec: ClusterSpec,
    ws: Workspace,
    assessed: Sequence[Assessed],
    *,
    echo: Echo,
    launch_rung: Callable[[ClusterSpec], T],
) -> T:
    """Launch on the approved rungs in order until one has room (see the module docstring)."""
    first_approved(spec, assessed)  # none: PreflightError, before anything is launched
    approved = [(i, a.rung) for i, a in enumerate(assessed, 1) if a.approved]
    for line in refusal_lines(assessed):
        echo(f"[skyinfra] {line}")
    attempts: list[Attempt] = []
    refused: list[str] = []
    for number, (index, rung) in enumerate(approved, 1):
        try:
            if len(assessed) > 1:
                echo(f"[skyinfra] rung {index} of {len(assessed)}: {spec.nodes} x {rung.label}")
            result = launch_rung(rung_spec(spec, rung))
        except CapacityError as err:
            if len(assessed) == 1:
                raise
            attempts += [a for a in err.attempts if isinstance(a, Attempt)]
            refused.append(f"  rung {index} ({rung.label}): {_refusal_summary(err)}")
            if number < len(approved):
                echo(f"[skyinfra] rung {index} ({rung.label}) had no room: next rung")
            continue
        if len(assessed) > 1:
            record_rung(ws, rung, index)
            echo(f"[skyinfra] took rung {index} of {len(assessed)}: {rung.label}")
        return result
    raise CapacityError(
        f"no rung of the ladder of cluster {spec.name!r} had capacity; every rung was destroyed "
        "and AWS asked by tag in its region whether anything is left:\n"
        + "\n".join(refused)
        + f"\nattempts:\n{attempt_table(attempts)}",
        attempts=attempts,
    )
