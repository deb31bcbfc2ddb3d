"""Capacity failover's pure core (skyinfra/targets/aws/capacity.py, reservation.py): reading
Terraform's error text, zone order, durations and back-off, the attempt table and log, the
reservation check; and the render of a reservation into the root module."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyinfra.errors import PreflightError, SpecError
from skyinfra.spec import ClusterSpec, validate_spec
from skyinfra.targets.aws.capacity import (
    Attempt,
    CapacityLog,
    SpotFallback,
    asked_text,
    attempt_table,
    backoff_s,
    classify,
    failover_reason,
    parse_duration,
    parse_zones,
    spot_fallback_reason,
    zone_order,
)
from skyinfra.targets.aws.render import EMULATOR_MAX_RETRIES, PROVIDER_MAX_RETRIES
from skyinfra.targets.aws.reservation import Reservation, check_reservation
from skyinfra.targets.aws.spec import AwsSpec
from tests.unit.aws.test_render import params, render

# Golden: the diagnostics as TerraformError carries them. The first is what AWS provider
# 5.100.0 printed in tests/e2e/aws/test_capacity.py against EC2's XML error body; the SDK v1
# form is from hashicorp/terraform-provider-aws#15183.
PROVIDER_ICE = (
    "terraform apply failed in /ws/c:\n"
    "  creating EC2 Instance: operation error EC2: RunInstances, exceeded maximum number of "
    "attempts, 3, https response error StatusCode: 500, RequestID: 51f3353e-bf70-403f-8a56-"
    "3c2208335bb9, api error InsufficientInstanceCapacity: We currently do not have sufficient "
    "p4d.24xlarge capacity in the Availability Zone you requested (us-east-1a). Our system will "
    "be working on provisioning additional capacity. You can currently get p4d.24xlarge "
    "capacity by not specifying an Availability Zone in your request or choosing us-east-1b, "
    "us-east-1c.\n"
    "  creating EC2 Instance: operation error EC2: RunInstances, https response error "
    "StatusCode: 500, RequestID: 1, api error InsufficientInstanceCapacity: We currently do not "
    "have sufficient p4d.24xlarge capacity in the Availability Zone you requested (us-east-1a)."
)
SDK_V1_ICE = (
    "Error: Error launching source instance: InsufficientInstanceCapacity: We currently do not "
    "have sufficient t3.large capacity in the Availability Zone you requested (us-west-2a). "
    "Our system will be working on provisioning additional capacity.\n"
    "\tstatus code: 500, request id: 4b1b1c4e-0a5e-4b7a-9c57-2c7d7b5e5f40"
)
UNSUPPORTED = (
    "  creating EC2 Instance: operation error EC2: RunInstances, https response error "
    "StatusCode: 400, RequestID: 2, api error Unsupported: Your requested instance type "
    "(p5.48xlarge) is not supported in your requested Availability Zone (us-east-1e). Please "
    "retry your request by not specifying an Availability Zone or choosing us-east-1a, "
    "us-east-1b."
)
ON_HOST = (
    "  creating EC2 Instance: operation error EC2: RunInstances, https response error "
    "StatusCode: 500, RequestID: 3, api error InsufficientCapacityOnHost: There is not enough "
    "capacity on the Dedicated Host to launch or start the instance."
)
VCPU = (
    "  creating EC2 Instance: operation error EC2: RunInstances, https response error "
    "StatusCode: 400, RequestID: 4, api error VcpuLimitExceeded: You have requested more vCPU "
    "capacity than your current vCPU limit of 0 allows for the instance bucket that the "
    "specified instance type belongs to."
)
INSTANCE_LIMIT = (
    "  creating EC2 Instance: operation error EC2: RunInstances, https response error "
    "StatusCode: 400, RequestID: 5, api error InstanceLimitExceeded: Your quota allows for 0 "
    "more running instance(s). You requested at least 1."
)
BAD_AMI = (
    "  creating EC2 Instance: operation error EC2: RunInstances, https response error "
    "StatusCode: 400, RequestID: 6, api error InvalidAMIID.NotFound: The image id "
    "'[ami-0123456789abcdef0]' does not exist"
)
AUTH = (
    "  creating EC2 Instance: operation error EC2: RunInstances, https response error "
    "StatusCode: 403, RequestID: 7, api error UnauthorizedOperation: You are not authorized to "
    "perform this operation. Encoded authorization failure message: abc"
)
# Spot (issue 26): the messages EC2 gives a RunInstances with Spot market options, in the
# provider's wording (no Spot capacity in the zone; a price cap below the zone's Spot price;
# the region's Spot vCPU quota).
SPOT_ICE = (
    "  creating EC2 Instance: operation error EC2: RunInstances, https response error "
    "StatusCode: 500, RequestID: 9, api error InsufficientInstanceCapacity: There is no Spot "
    "capacity available that matches your request."
)
SPOT_PRICE = (
    "  creating EC2 Instance: operation error EC2: RunInstances, https response error "
    "StatusCode: 400, RequestID: 10, api error SpotMaxPriceTooLow: Your Spot request price of "
    "0.1 is lower than the minimum required Spot request fulfillment price of 0.3012."
)
SPOT_COUNT = (
    "  creating EC2 Instance: operation error EC2: RunInstances, https response error "
    "StatusCode: 400, RequestID: 11, api error MaxSpotInstanceCountExceeded: Max spot instance "
    "count exceeded"
)
OTHER = (
    "  creating EC2 Subnet: operation error EC2: CreateSubnet, https response error StatusCode: "
    "400, RequestID: 8, api error InvalidSubnet.Conflict: The CIDR '10.42.0.0/24' conflicts "
    "with another subnet"
)


@pytest.mark.parametrize(
    ("text", "outcome", "code", "starts"),
    [
        (PROVIDER_ICE, "capacity", "InsufficientInstanceCapacity", "We currently do not have"),
        (SDK_V1_ICE, "capacity", "InsufficientInstanceCapacity", "We currently do not have"),
        (UNSUPPORTED, "capacity", "Unsupported", "Your requested instance type (p5.48xlarge)"),
        (ON_HOST, "capacity", "InsufficientCapacityOnHost", "There is not enough capacity"),
        (VCPU, "fatal", "VcpuLimitExceeded", "You have requested more vCPU capacity"),
        (INSTANCE_LIMIT, "fatal", "InstanceLimitExceeded", "Your quota allows for 0"),
        (BAD_AMI, "fatal", "InvalidAMIID.NotFound", "The image id"),
        (AUTH, "fatal", "UnauthorizedOperation", "You are not authorized"),
        (SPOT_ICE, "capacity", "InsufficientInstanceCapacity", "There is no Spot capacity"),
        (SPOT_PRICE, "fatal", "SpotMaxPriceTooLow", "Your Spot request price of 0.1"),
        (SPOT_COUNT, "fatal", "MaxSpotInstanceCountExceeded", "Max spot instance count"),
        (OTHER, "error", "InvalidSubnet.Conflict", "The CIDR"),
        ("terraform apply failed: context deadline exceeded", "error", "", "terraform apply"),
    ],
)
def test_classify_reads_the_providers_error_text(
    text: str, outcome: str, code: str, starts: str
) -> None:
    failure = classify(text)
    assert (failure.outcome, failure.code) == (outcome, code)
    assert failure.message.startswith(starts)
    assert "status code" not in failure.message and "\n" not in failure.message


def test_a_fatal_refusal_wins_over_a_capacity_one_in_the_same_apply() -> None:
    # Several nodes fail at once: the first known refusal decides.
    assert classify(PROVIDER_ICE + "\n" + VCPU).outcome == "capacity"
    assert classify(VCPU + "\n" + PROVIDER_ICE).code == "VcpuLimitExceeded"
    assert classify(OTHER + "\n" + PROVIDER_ICE).code == "InsufficientInstanceCapacity"


def test_zone_order() -> None:
    offered = ["us-east-1c", "us-east-1a", "us-east-1b"]
    assert zone_order(offered) == (["us-east-1a", "us-east-1b", "us-east-1c"], [])
    assert zone_order(offered, previous="us-east-1c")[0][0] == "us-east-1c"
    assert zone_order(offered, wanted=["us-east-1c", "us-east-1e", "us-east-1a"]) == (
        ["us-east-1c", "us-east-1a"],
        ["us-east-1e"],
    )


def test_parse_zones_accepts_letters_and_names_and_refuses_other_regions() -> None:
    assert parse_zones("a, us-east-1c,a", "--zones", "us-east-1") == ("us-east-1a", "us-east-1c")
    assert parse_zones(["b"], "aws.zones", "us-east-1") == ("us-east-1b",)
    with pytest.raises(SpecError, match=r"'aws.zones\[1\]': got 'eu-west-1a'"):
        parse_zones(["a", "eu-west-1a"], "aws.zones", "us-east-1")
    with pytest.raises(SpecError, match="invalid value for --zones: got"):
        parse_zones([], "--zones", "us-east-1")


def test_zones_and_reservation_in_the_spec() -> None:
    spec = validate_spec(
        {
            "name": "c",
            "provider": "aws",
            "aws": {
                "region": "us-east-1",
                "instance_type": "p4d.24xlarge",
                "ssh_cidrs": ["203.0.113.7/32"],
                "zones": ["c", "a"],
                "capacity_reservation_id": "cr-0123456789abcdef0",
            },
        }
    )
    aws = spec.section_as(AwsSpec)
    assert aws.zones == ("us-east-1c", "us-east-1a")
    assert aws.to_dict()["zones"] == ["us-east-1c", "us-east-1a"]
    with pytest.raises(SpecError, match=r"aws\.capacity_reservation_id"):
        validate_spec(
            {
                "name": "c",
                "provider": "aws",
                "aws": {
                    "region": "us-east-1",
                    "instance_type": "p4d.24xlarge",
                    "ssh_cidrs": ["203.0.113.7/32"],
                    "capacity_reservation_id": "odcr-1",
                },
            }
        )


def test_durations_and_back_off() -> None:
    assert parse_duration("30m", "--retry-for") == 1800
    assert parse_duration("90", "--retry-for") == 90
    assert parse_duration("1.5h", "--retry-for") == 5400
    for bad in ("", "0s", "soon", "2d", "25h"):
        with pytest.raises(SpecError, match="--retry-for"):
            parse_duration(bad, "--retry-for")
    assert [backoff_s(i, base_s=30, cap_s=300) for i in range(6)] == [30, 60, 120, 240, 300, 300]


def attempt(zone: str, outcome: str, code: str = "", round_: int = 1) -> Attempt:
    return Attempt(
        up="2026-11-23T20:00:00Z",
        round=round_,
        zone=zone,
        asked="2 x p4d.24xlarge",
        outcome=outcome,  # type: ignore[arg-type]
        code=code,
        message="We currently do not have sufficient capacity" if code else "up",
        started="2026-11-23T20:00:01Z",
        duration_s=12.34,
    )


def test_attempt_table_is_aligned() -> None:
    rows = [
        attempt("us-east-1a", "capacity", "InsufficientInstanceCapacity"),
        attempt("us-east-1b", "ok", round_=2),
    ]
    assert attempt_table(rows) == (
        "  #  round  zone        asked             AWS answered                  took\n"
        "  1  1      us-east-1a  2 x p4d.24xlarge  InsufficientInstanceCapacity  12.3 s\n"
        "  2  2      us-east-1b  2 x p4d.24xlarge  ok                            12.3 s"
    )


def test_failover_reason_and_log_round_trip() -> None:
    rows = [attempt("us-east-1a", "capacity", "InsufficientInstanceCapacity")]
    reason = failover_reason(rows, "us-east-1a", "us-east-1b")
    assert reason == (
        "us-east-1a refused 2 x p4d.24xlarge: InsufficientInstanceCapacity (We currently do not "
        "have sufficient capacity)"
    )
    assert failover_reason(rows, "us-east-1a", "us-east-1a") is None
    log = CapacityLog("us-east-1b", "us-east-1a", reason, None, rows)
    doc = json.loads(json.dumps(log.to_dict()))
    assert doc["schema"] == 1 and doc["attempts"][0]["zone"] == "us-east-1a"
    assert CapacityLog.from_dict(doc) == log


RESERVATION = Reservation(
    id="cr-0123456789abcdef0",
    instance_type="p5.48xlarge",
    zone="us-east-1b",
    available=1,
    total=4,
    state="active",
    capacity_block=False,
)


@pytest.mark.parametrize(
    ("changes", "kwargs", "message"),
    [
        ({}, {"needed": 2}, "has 1 free of 4 p5.48xlarge in us-east-1b; 2 node(s) would launch"),
        ({}, {"instance_type": "p4d.24xlarge"}, "is for p5.48xlarge, not p4d.24xlarge"),
        ({}, {"zones": ("us-east-1a",)}, "is in us-east-1b, which aws.zones / --zones leaves"),
        ({}, {"subnet_zone": "us-east-1c"}, "but aws.subnet_id is in us-east-1c"),
        ({"state": "scheduled", "capacity_block": True}, {}, "Capacity Block cr-0123456789abc"),
    ],
)
def test_reservation_check_refuses_what_cannot_launch(
    changes: dict[str, object], kwargs: dict[str, object], message: str
) -> None:
    found = Reservation(**{**RESERVATION.__dict__, **changes})  # type: ignore[arg-type]
    args: dict[str, object] = {"instance_type": "p5.48xlarge", "needed": 1, **kwargs}
    with pytest.raises(PreflightError, match=r"aws\.capacity_reservation_id") as err:
        check_reservation(found, **args)  # type: ignore[arg-type]
    assert message in str(err.value)


def test_reservation_with_room_passes() -> None:
    check_reservation(RESERVATION, instance_type="p5.48xlarge", needed=1, zones=("us-east-1b",))


def test_reservation_and_retries_in_the_root_module() -> None:
    files = render(params(capacity_reservation=("cr-0123456789abcdef0", True)))
    tfvars = json.loads(files["terraform.tfvars.json"])
    assert tfvars["cluster"]["capacity_reservation"] == {
        "id": "cr-0123456789abcdef0",
        "capacity_block": True,
    }
    assert f"max_retries = {PROVIDER_MAX_RETRIES}" in files["main.tf"]
    assert (
        json.loads(render(params())["terraform.tfvars.json"])["cluster"]["capacity_reservation"]
        is None
    )
    from skyinfra.targets.aws.endpoints import Emulator

    emulated = render(params(), Emulator(url="http://127.0.0.1:4566"))["main.tf"]
    assert f"max_retries = {EMULATOR_MAX_RETRIES}" in emulated


def test_spot_refusals_say_what_to_do() -> None:
    """Issue 26: a price cap below the Spot price names aws.spot_max_price; the Spot quota
    names its Service Quotas console entry and the On-Demand way out."""
    assert "aws.spot_max_price" in classify(SPOT_PRICE).hint()
    assert "Spot vCPU quota" in classify(SPOT_COUNT).hint()
    assert 'aws.market = "on-demand"' in classify(SPOT_COUNT).hint()


def test_spot_markets_and_the_fallback_round_trip_in_the_log() -> None:
    rows = [
        attempt("us-east-1a", "capacity", "InsufficientInstanceCapacity"),
        attempt("us-east-1b", "capacity", "InsufficientInstanceCapacity"),
    ]
    why = spot_fallback_reason(rows, ["us-east-1a", "us-east-1b"])
    assert why == (
        "no Spot capacity in any zone tried (us-east-1a, us-east-1b); last: us-east-1b "
        "InsufficientInstanceCapacity (We currently do not have sufficient capacity)"
    )
    log = CapacityLog(
        "us-east-1a",
        "us-east-1a",
        None,
        None,
        rows,
        markets={"node-0": "on-demand", "node-1": "on-demand"},
        spot_fallback=SpotFallback(["node-1"], why),
    )
    doc = json.loads(json.dumps(log.to_dict()))
    assert doc["spot_fallback"] == {"nodes": ["node-1"], "reason": why}
    assert doc["markets"] == {"node-0": "on-demand", "node-1": "on-demand"}
    assert CapacityLog.from_dict(doc) == log
    # A log written before issue 26 reads as no markets and no fallback.
    old = {k: v for k, v in doc.items() if k not in ("markets", "spot_fallback")}
    assert (CapacityLog.from_dict(old).markets, CapacityLog.from_dict(old).spot_fallback) == (
        {},
        None,
    )
    assert asked_text(3, "g5.xlarge", {"node-0": "on-demand", "node-1": "spot"}) == (
        "3 x g5.xlarge (1 on Spot)"
    )
    assert asked_text(3, "g5.xlarge", {}) == "3 x g5.xlarge"


def test_a_running_clusters_nodes_keep_the_market_they_were_launched_with(tmp_path: Path) -> None:
    """Issue 26: after a Spot fallback, `up`, `plan` and `render` of the running cluster keep
    the fallback nodes On-Demand (no replacement); new nodes and a new cluster take the spec's."""
    from skyinfra.targets.aws.capacity import LOG_FILE
    from skyinfra.targets.aws.launch_plan import launched_markets
    from skyinfra.workspace import Workspace

    def spec(nodes: int) -> ClusterSpec:
        return validate_spec(
            {
                "name": "c",
                "provider": "aws",
                "nodes": nodes,
                "aws": {
                    "region": "us-east-1",
                    "instance_type": "g5.xlarge",
                    "ssh_cidrs": ["10.0.0.0/8"],
                    "market": "spot",
                    "spot_fallback": "on-demand",
                },
            }
        )

    ws = Workspace(tmp_path / "c")
    ws.ensure()
    launched = {"node-0": "on-demand", "node-1": "on-demand", "node-2": "spot"}
    log = CapacityLog(
        "us-east-1a", "us-east-1a", None, None, [], launched, SpotFallback(["node-1"], "x")
    )
    ws.write_json(ws.path / LOG_FILE, log.to_dict())
    assert launched_markets(spec(3), ws, 0) == {
        "node-0": "on-demand",
        "node-1": "spot",
        "node-2": "spot",
    }
    assert launched_markets(spec(3), ws, 3) == launched
    assert launched_markets(spec(4), ws, 3) == {**launched, "node-3": "spot"}
    # Without a fallback the spec decides, also for running nodes (a change the plan shows).
    log = CapacityLog(
        "us-east-1a", "us-east-1a", None, None, [], dict.fromkeys(launched, "on-demand")
    )
    ws.write_json(ws.path / LOG_FILE, log.to_dict())
    assert launched_markets(spec(3), ws, 3) == {
        "node-0": "on-demand",
        "node-1": "spot",
        "node-2": "spot",
    }
