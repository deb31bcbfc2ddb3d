"""The failover loop's order of events (skyinfra/targets/aws/failover.py), in process and fast:
zones and reservations looked up in moto's server over HTTP, the applies answered with the
provider's own error text (the golden examples of tests/unit/aws/test_capacity_core.py, which
tests/e2e/aws/test_zone_failover.py meets from real Terraform). What each Terraform step would
do is recorded, not run: the end-to-end tests run it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from skyinfra.errors import (
    CapacityError,
    LaunchRefusedError,
    PreflightError,
    SpecError,
    TerraformError,
)
from skyinfra.spec import ClusterSpec, validate_spec
from skyinfra.targets.aws import failover
from skyinfra.targets.aws.capacity import LOG_FILE, Attempt, classify
from skyinfra.targets.aws.declaration import SKIP_PREFLIGHT
from skyinfra.targets.aws.endpoints import ENDPOINT_ENV_VAR, Emulator
from skyinfra.targets.aws.session import AwsClients
from skyinfra.targets.aws.target import AwsTarget
from skyinfra.workspace import Workspace
from tests.support.aws import REGION
from tests.support.fault_proxy import fault_proxy, spot_placement_scores_body
from tests.unit.aws.test_capacity_core import PROVIDER_ICE, SPOT_ICE, SPOT_PRICE, VCPU

A, B, C = f"{REGION}a", f"{REGION}b", f"{REGION}c"


class RecordingEngine:
    """Stands in for Terraform's destroys: records them; the state holds ``nodes`` nodes."""

    def __init__(self, calls: list[str], nodes: int = 0) -> None:
        self.calls = calls
        self.nodes = nodes

    def state_list(self) -> list[str]:
        return [f'module.nodes.aws_instance.this["node-{i}"]' for i in range(self.nodes)]

    def destroy(self, on_event: Any = None) -> None:
        self.calls.append("destroy all")

    def command(self, args: list[str]) -> tuple[int, str, str]:
        self.calls.append("destroy " + " ".join(a for a in args if a.startswith("-target")))
        return 0, "", ""


def cluster(nodes: int = 2, **aws: object) -> ClusterSpec:
    return validate_spec(
        {
            "name": "loop",
            "provider": "aws",
            "nodes": nodes,
            "aws": {
                "region": REGION,
                "instance_type": "t3.micro",
                "ssh_cidrs": ["203.0.113.7/32"],
                **aws,
            },
        }
    )


def run(
    spec: ClusterSpec,
    ws: Workspace,
    answers: list[str | None],
    calls: list[str],
    running: int = 0,
    **kwargs: Any,
) -> tuple[str, list[str], list[float]]:
    """failover.launch with applies answering ``answers`` in turn (None: the cluster is up)."""
    lines: list[str] = []
    waits: list[float] = []

    def render(
        zone: str, reservation: tuple[str, bool] | None, markets: dict[str, str]
    ) -> dict[str, str]:
        spot = ",".join(name for name, market in markets.items() if market == "spot")
        return {"zone": zone, "spot": spot}

    def apply(files: dict[str, str]) -> str:
        ws.ensure()
        calls.append(f"apply {files['zone']}" + (f" spot={files['spot']}" if files["spot"] else ""))
        answer = answers.pop(0)
        if answer is not None:
            raise TerraformError(f"terraform apply failed in {ws.path}:\n{answer}")
        return files["zone"]

    clients = AwsClients(boto3.session.Session(), REGION, Emulator(kwargs.pop("url")))
    launcher = failover.ZoneLauncher(
        clients=clients,
        render=render,
        apply=apply,
        engine_factory=lambda path: RecordingEngine(calls, running),  # type: ignore[arg-type,return-value]
        echo=lines.append,
        sleep=waits.append,
    )
    result = failover.launch(spec, ws, launcher, **kwargs)
    return result, lines, waits


def test_a_full_zone_moves_the_cluster_to_the_next_one_in_the_order_given(
    aws_env: str, tmp_path: Path
) -> None:
    ws = Workspace(tmp_path / "loop")
    calls: list[str] = []
    zone, lines, waits = run(
        cluster(), ws, [PROVIDER_ICE, None], calls, url=aws_env, zones_flag="c,a", retry_for="10m"
    )
    assert zone == A
    zone_bound = "destroy " + " ".join(f"-target={t}" for t in failover.ZONE_BOUND)
    assert calls == [f"apply {C}", zone_bound, f"apply {A}"]
    assert waits == []
    assert f"[skyinfra] zones to try for 2 x t3.micro: {C}, {A}, for up to 10m" in lines
    log = ws.read_json(ws.path / LOG_FILE)
    assert (log["zone"], log["first_choice"]) == (A, C)
    assert log["reason"].startswith(f"{C} refused 2 x t3.micro: InsufficientInstanceCapacity")


def test_capacity_on_the_third_round(
    aws_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(failover.BACKOFF_ENV_VAR, "2")
    ws = Workspace(tmp_path / "loop")
    calls: list[str] = []
    zone, lines, waits = run(
        cluster(zones=["b"]),
        ws,
        [PROVIDER_ICE, PROVIDER_ICE, None],
        calls,
        url=aws_env,
        retry_for="1h",
    )
    assert zone == B
    assert [c for c in calls if c.startswith("apply")] == [f"apply {B}"] * 3
    assert waits == [2.0, 4.0]  # doubling
    assert "[skyinfra] attempt 3 (round 3): 2 x t3.micro in us-east-1b" in lines
    log = ws.read_json(ws.path / LOG_FILE)
    assert [(a["round"], a["outcome"]) for a in log["attempts"]] == [
        (1, "capacity"),
        (2, "capacity"),
        (3, "ok"),
    ]


def test_a_quota_refusal_is_not_retried(aws_env: str, tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "loop")
    calls: list[str] = []
    with pytest.raises(LaunchRefusedError, match="VcpuLimitExceeded") as err:
        run(cluster(), ws, [VCPU], calls, url=aws_env, retry_for="1h")
    assert calls == [f"apply {A}", "destroy all"]
    assert err.value.code == "VcpuLimitExceeded"


def test_when_time_runs_out_everything_goes_and_the_table_is_shown(
    aws_env: str, tmp_path: Path
) -> None:
    ws = Workspace(tmp_path / "loop")
    calls: list[str] = []
    with pytest.raises(CapacityError) as err:
        run(cluster(), ws, [PROVIDER_ICE] * 2, calls, url=aws_env, zones_flag="a,b")
    # The last zone's leftovers go with the rest in one destroy (no targeted one first).
    zone_bound = "destroy " + " ".join(f"-target={t}" for t in failover.ZONE_BOUND)
    assert calls == [f"apply {A}", zone_bound, f"apply {B}", "destroy all"]
    assert "  1  1      us-east-1a  2 x t3.micro  InsufficientInstanceCapacity" in str(err.value)
    assert len(err.value.attempts) == 2


def test_a_running_cluster_is_never_moved_when_its_zone_cannot_grow(
    aws_env: str, tmp_path: Path
) -> None:
    ws = Workspace(tmp_path / "loop")
    ws.ensure()
    (ws.path / ".terraform").mkdir()
    # What the first `up` left: its spec and its tfvars, with the zone it went to.
    ws.write_json(ws.spec_file, cluster(nodes=2).to_dict())
    tfvars = {"region": REGION, "cluster": {"availability_zone": B}}
    ws.write_json(ws.path / "terraform.tfvars.json", tfvars)
    calls: list[str] = []
    with pytest.raises(CapacityError) as err:
        run(cluster(nodes=3), ws, [PROVIDER_ICE], calls, running=2, url=aws_env, retry_for="1h")
    assert calls == [f"apply {B}"]  # its own zone only, and nothing destroyed
    message = str(err.value)
    assert message.startswith(
        f"cannot grow cluster 'loop' to 3 x t3.micro: {B} has no capacity for more t3.micro now"
    )
    assert f"Its 2 running node(s) stay where they are (its 2 node(s) run in {B})" in message
    assert "nothing was moved or destroyed" in message
    assert "a new cluster (another --name) in another zone" in message

    zone_a = r"value for --zones: got 'us-east-1a'; expected zones including"
    with pytest.raises(SpecError, match=zone_a):
        run(cluster(nodes=3), ws, [], calls, running=2, url=aws_env, zones_flag="a")


def test_zones_that_do_not_offer_the_type(aws_env: str, tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "loop")
    calls: list[str] = []
    zone, lines, _ = run(cluster(), ws, [None], calls, url=aws_env, zones_flag="e,b")
    assert zone == B
    assert f"[skyinfra] warning: {REGION}e does not offer t3.micro; not tried" in lines
    with pytest.raises(PreflightError, match=rf"none of the zones asked for \({REGION}e\) offers"):
        run(cluster(), ws, [], calls, url=aws_env, zones_flag="e")


# Spot (issue 26)
SPOT = "spot=node-1,node-2"


def test_spot_without_capacity_anywhere_goes_on_demand_with_the_fallback(
    aws_env: str, tmp_path: Path
) -> None:
    ws = Workspace(tmp_path / "loop")
    calls: list[str] = []
    spec = cluster(nodes=3, market="spot", spot_fallback="on-demand")
    zone, lines, _ = run(spec, ws, [SPOT_ICE, SPOT_ICE, None], calls, url=aws_env, zones_flag="a,b")
    assert zone == A
    zone_bound = "destroy " + " ".join(f"-target={t}" for t in failover.ZONE_BOUND)
    # The head (node-0) is On-Demand throughout; the workers go On-Demand in the second pass.
    assert calls == [f"apply {A} {SPOT}", zone_bound, f"apply {B} {SPOT}", zone_bound, f"apply {A}"]
    assert f"[skyinfra] zones to try for 3 x t3.micro (2 on Spot): {A}, {B}" in lines
    said = next(line for line in lines if "Spot could not place" in line)
    assert said == (
        "[skyinfra] Spot could not place node-1, node-2: no Spot capacity in any zone tried "
        f"({A}, {B}); last: {B} InsufficientInstanceCapacity (There is no Spot capacity "
        'available that matches your request.). aws.spot_fallback = "on-demand": launching '
        "them On-Demand"
    )
    log = ws.read_json(ws.path / LOG_FILE)
    assert log["zone"] == A and log["spot_fallback"]["nodes"] == ["node-1", "node-2"]
    assert log["markets"] == {f"node-{i}": "on-demand" for i in range(3)}
    assert [(a["asked"], a["outcome"]) for a in log["attempts"]] == [
        ("3 x t3.micro (2 on Spot)", "capacity"),
        ("3 x t3.micro (2 on Spot)", "capacity"),
        ("3 x t3.micro", "ok"),
    ]

    # The next `up` of the running cluster keeps them On-Demand (no replacement), and says so.
    (ws.path / ".terraform").mkdir()
    ws.write_json(ws.path / "terraform.tfvars.json", {"cluster": {"availability_zone": A}})
    again: list[str] = []
    run(spec, ws, [None], again, running=3, url=aws_env)
    assert again == [f"apply {A}"]
    log = ws.read_json(ws.path / LOG_FILE)
    assert log["spot_fallback"]["nodes"] == ["node-1", "node-2"]


def test_spot_without_the_fallback_ends_like_any_full_region_and_names_it(
    aws_env: str, tmp_path: Path
) -> None:
    ws = Workspace(tmp_path / "loop")
    calls: list[str] = []
    with pytest.raises(CapacityError) as err:
        run(
            cluster(nodes=3, market="spot"),
            ws,
            [SPOT_ICE] * 2,
            calls,
            url=aws_env,
            zones_flag="a,b",
        )
    assert calls[-1] == "destroy all"
    assert [c for c in calls if c.startswith("apply")] == [f"apply {A} {SPOT}", f"apply {B} {SPOT}"]
    message = str(err.value)
    assert "no zone had capacity for 3 x t3.micro (2 on Spot)" in message
    assert 'aws.spot_fallback = "on-demand"' in message
    assert ws.read_json(ws.path / LOG_FILE)["spot_fallback"] is None


def test_a_spot_price_cap_below_the_price_stops_at_once_naming_it(
    aws_env: str, tmp_path: Path
) -> None:
    """Not another zone, and not the fallback: the cap is the user's setting."""
    ws = Workspace(tmp_path / "loop")
    calls: list[str] = []
    spec = cluster(nodes=3, market="spot", spot_max_price=0.1, spot_fallback="on-demand")
    with pytest.raises(LaunchRefusedError) as err:
        run(spec, ws, [SPOT_PRICE], calls, url=aws_env, zones_flag="a,b")
    assert calls == [f"apply {A} {SPOT}", "destroy all"]
    assert err.value.code == "SpotMaxPriceTooLow"
    assert "raise aws.spot_max_price" in str(err.value)


def test_spot_nodes_go_first_to_the_zone_with_the_best_placement_score(
    aws_env: str, tmp_path: Path
) -> None:
    # EC2 scores zones by id; moto's us-east-1b is use1-az1, us-east-1c use1-az2, and
    # us-east-1a (use1-az6) is not in the answer (only the top zones are scored).
    with fault_proxy(aws_env, REGION) as proxy:
        proxy.answers["GetSpotPlacementScores"] = lambda: spot_placement_scores_body(
            {"use1-az2": 9, "use1-az1": 3, "use1-az99": 10}
        )
        ws = Workspace(tmp_path / "loop")
        calls: list[str] = []
        spec = cluster(nodes=3, market="spot")
        zone, lines, _ = run(spec, ws, [SPOT_ICE, None], calls, url=proxy.url)
    assert zone == B
    zone_bound = "destroy " + " ".join(f"-target={t}" for t in failover.ZONE_BOUND)
    assert calls == [f"apply {C} {SPOT}", zone_bound, f"apply {B} {SPOT}"]
    said = next(line for line in lines if "Spot placement scores" in line)
    assert said.startswith(
        "[skyinfra] Spot placement scores for 2 x t3.micro in one zone (1-10, EC2's "
        f"GetSpotPlacementScores): {C} 9, {B} 3, {A} (no score), "
    ), said
    # What was asked: the two Spot workers (the head is On-Demand), in one zone, by count.
    (form,) = proxy.asked["GetSpotPlacementScores"]
    assert form["InstanceType.1"] == ["t3.micro"] and form["TargetCapacity"] == ["2"]
    assert form["TargetCapacityUnitType"] == ["units"]
    assert form["SingleAvailabilityZone"] == ["true"] and form["RegionName.1"] == [REGION]


def test_zones_the_user_ordered_or_no_scores_keep_their_order(aws_env: str, tmp_path: Path) -> None:
    spec = cluster(nodes=2, market="spot")
    with fault_proxy(aws_env, REGION) as proxy:
        proxy.answers["GetSpotPlacementScores"] = lambda: spot_placement_scores_body(
            {"use1-az6": 1, "use1-az1": 10}
        )
        calls: list[str] = []
        zone, lines, _ = run(
            spec, Workspace(tmp_path / "given"), [None], calls, url=proxy.url, zones_flag="a,b"
        )
        assert zone == A and "GetSpotPlacementScores" not in proxy.asked
    assert not any("placement scores" in line for line in lines)
    # moto does not have the API (it answers 500): name order, and `up` says why.
    calls = []
    zone, lines, _ = run(spec, Workspace(tmp_path / "none"), [None], calls, url=aws_env)
    assert zone == A and calls == [f"apply {A} spot=node-1"]
    said = next(line for line in lines if "placement scores" in line)
    assert said.startswith("[skyinfra] no Spot placement scores (") and said.endswith(
        "): zones in name order"
    ), said


def test_a_refused_planfile_goes_on_with_its_rungs_other_listed_zones(
    aws_env: str, tmp_path: Path
) -> None:
    """`apply PLANFILE` (issue 44): the planfile's zone refused is the rung's first attempt;
    what it made in the zone goes, and the other zones the plan listed follow, the refused one
    not applied again (and said apart). With none listed besides it, nothing more is applied."""
    spec = cluster()
    refused = failover.planned_attempt(spec, B, classify(PROVIDER_ICE))
    ws = Workspace(tmp_path / "loop")
    calls: list[str] = []
    planned = failover.ReviewedRung((A, B, C), refused)
    zone, lines, _ = run(spec, ws, [PROVIDER_ICE, None], calls, url=aws_env, reviewed=planned)
    assert zone == C
    zone_bound = "destroy " + " ".join(f"-target={t}" for t in failover.ZONE_BOUND)
    assert calls == [zone_bound, f"apply {A}", zone_bound, f"apply {C}"]
    assert f"[skyinfra] removing what the planfile's apply started in {B}" in lines
    assert (
        f"[skyinfra] zones to try for 2 x t3.micro: {A}, {C} ({B} refused the planfile's "
        "apply already)"
    ) in lines
    log = ws.read_json(ws.path / LOG_FILE)
    assert [a["zone"] for a in log["attempts"]] == [B, A, C]
    assert (log["zone"], log["first_choice"]) == (C, B)
    assert log["reason"].startswith(f"{B} refused 2 x t3.micro: InsufficientInstanceCapacity")

    calls.clear()
    alone = Workspace(tmp_path / "alone")
    with pytest.raises(CapacityError) as err:
        run(spec, alone, [], calls, url=aws_env, reviewed=failover.ReviewedRung((B,), refused))
    assert calls == ["destroy all"]  # no zone left to try: everything goes, once
    assert "no zone had capacity for 2 x t3.micro of cluster 'loop'; attempts:" in str(err.value)
    assert "nothing of it is left (checked with AWS by tag)" in str(err.value)
    assert err.value.exit_code == 10  # exitcodes.NO_CAPACITY, as `up`'s
    assert [a.zone for a in err.value.attempts if isinstance(a, Attempt)] == [B]


def test_a_later_reviewed_rung_tries_the_zones_its_plan_listed_only(
    aws_env: str, tmp_path: Path
) -> None:
    """A later rung of `apply PLANFILE` (issue 44) is tried in the zones the plan listed for
    it, not in every zone offering the type now (the reviewer saw those)."""
    ws = Workspace(tmp_path / "loop")
    calls: list[str] = []
    zone, lines, _ = run(
        cluster(), ws, [None], calls, url=aws_env, reviewed=failover.ReviewedRung((C,))
    )
    assert (zone, calls) == (C, [f"apply {C}"])
    assert "[skyinfra] zones to try for 2 x t3.micro: us-east-1c" in lines


def test_a_one_rung_plan_keeps_its_rung_and_zones_for_apply(
    aws_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spec of one type in one region is a ladder of one rung (issue 44): `plan` keeps it in
    plan-meta.json with the zones that offer the type (within aws.zones, in `up`'s order),
    so that a refused planfile goes on with them; plan.md gets no Ladder table."""
    monkeypatch.setenv(ENDPOINT_ENV_VAR, aws_env)
    ws = Workspace(tmp_path / "loop")
    target = AwsTarget()
    every = [f"{REGION}{letter}" for letter in "abcdf"]  # moto's offerings of t3.micro
    for spec, zones in ((cluster(), every), (cluster(zones=["c", "a"]), [C, A])):
        review = target.plan_ladder(spec, ws, lambda _: None, {})
        assert review is not None and review.markdown == "" and review.render_spec == spec
        (rung,) = review.metadata["rungs"]
        assert (rung["instance_type"], rung["region"], rung["verdict"]) == (
            "t3.micro",
            REGION,
            "approved",
        )
        assert rung["zones"] == zones
    skipped = target.plan_ladder(cluster(), ws, lambda _: None, {SKIP_PREFLIGHT.name: True})
    assert skipped is not None and skipped.metadata["rungs"][0]["zones"] is None
