"""ladder_shell.climb: `up`'s walk over the assessed rungs, with the launch of one rung passed
in as a plain function (the zone failover's own loop is tested end to end): the approved rungs
in order, the dropped ones never launched, the rung taken recorded in capacity.json, every
refusal in the exit-10 message, and no launch at all when no rung is approved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyinfra import exitcodes
from skyinfra.errors import CapacityError, PreflightError
from skyinfra.spec import ClusterSpec, validate_spec
from skyinfra.targets.aws.capacity import Attempt
from skyinfra.targets.aws.ladder import Assessed, Rung, RungFacts, reviewed_assessed
from skyinfra.targets.aws.ladder_shell import climb, landed_rung, only_rung, rung_spec
from skyinfra.targets.aws.spec import AwsSpec
from skyinfra.workspace import Workspace

SPEC = validate_spec(
    {
        "name": "g",
        "provider": "aws",
        "nodes": 2,
        "aws": {
            "instance_types": ["p5en.48xlarge", "p5.48xlarge"],
            "regions": ["us-east-1", "us-west-2"],
            "ssh_cidrs": ["203.0.113.4/32"],
        },
    }
)
R1, R2, R3 = (
    Rung("p5en.48xlarge", "us-east-1"),
    Rung("p5en.48xlarge", "us-west-2"),
    Rung("p5.48xlarge", "us-east-1"),
)


def _ok(rung: Rung) -> Assessed:
    return Assessed(rung, RungFacts(), "approved")


def _refusing(full: set[str], tried: list[tuple[str, str]]):  # type: ignore[no-untyped-def]
    """A rung's launch that refuses in ``full``'s regions and rungs (labels)."""

    def launch(on: ClusterSpec) -> str:
        aws = on.section_as(AwsSpec)
        tried.append((aws.instance_type, aws.region))
        if aws.region in full or f"{aws.instance_type} in {aws.region}" in full:
            attempt = Attempt(
                "t",
                1,
                f"{aws.region}a",
                f"2 x {aws.instance_type}",
                "capacity",
                "InsufficientInstanceCapacity",
                "no room",
                "t",
                1.0,
            )
            raise CapacityError(f"no zone had capacity in {aws.region}", attempts=[attempt])
        return f"up in {aws.region}"

    return launch


def test_a_full_region_moves_to_the_next_approved_rung(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    tried: list[tuple[str, str]] = []
    said: list[str] = []
    dropped = Assessed(R2, RungFacts(), "dropped", "why not")
    result = climb(
        SPEC,
        ws,
        [_ok(R1), dropped, _ok(R3), _ok(Rung("p5.48xlarge", "us-west-2"))],
        echo=said.append,
        launch_rung=_refusing({"us-east-1"}, tried),
    )
    assert tried == [
        ("p5en.48xlarge", "us-east-1"),
        ("p5.48xlarge", "us-east-1"),
        ("p5.48xlarge", "us-west-2"),
    ]
    assert result == "up in us-west-2"
    assert landed_rung(ws) == Rung("p5.48xlarge", "us-west-2")
    assert json.loads((tmp_path / "capacity.json").read_text())["rung"]["index"] == 4
    assert said[0] == "[skyinfra] rung 2 (p5en.48xlarge in us-west-2) dropped: why not"
    assert "[skyinfra] rung 1 (p5en.48xlarge in us-east-1) had no room: next rung" in said


def test_every_rung_refusing_exits_10_naming_each(tmp_path: Path) -> None:
    tried: list[tuple[str, str]] = []
    with pytest.raises(CapacityError) as err:
        climb(
            SPEC,
            Workspace(tmp_path),
            [_ok(R1), _ok(R2)],
            echo=lambda _: None,
            launch_rung=_refusing({"us-east-1", "us-west-2"}, tried),
        )
    assert err.value.exit_code == exitcodes.NO_CAPACITY
    text = str(err.value)
    assert "  rung 1 (p5en.48xlarge in us-east-1): no zone had capacity in us-east-1" in text
    assert "  rung 2 (p5en.48xlarge in us-west-2): no zone had capacity in us-west-2" in text
    assert "us-west-2a" in text and len(err.value.attempts) == 2
    assert not (tmp_path / "capacity.json").exists()


def test_no_approved_rung_launches_nothing(tmp_path: Path) -> None:
    tried: list[tuple[str, str]] = []
    skipped = Assessed(R1, RungFacts(), "skipped", "quota Q (L-1) has 0 vCPUs free")
    with pytest.raises(PreflightError, match=r"rung 1 \(p5en.48xlarge in us-east-1\) skipped"):
        climb(
            SPEC,
            Workspace(tmp_path),
            [skipped],
            echo=lambda _: None,
            launch_rung=_refusing(set(), tried),
        )
    assert tried == []


def test_rung_spec_moves_type_and_region_only() -> None:
    on = rung_spec(SPEC, R3).section_as(AwsSpec)
    assert (on.instance_type, on.region) == ("p5.48xlarge", "us-east-1")
    assert on.ladder_types == SPEC.section_as(AwsSpec).ladder_types


def _reviewed() -> list[dict[str, object]]:
    """A plan's ladder metadata: rung 2 dropped, rung 4 skipped by the review."""
    return [
        {"instance_type": "p5en.48xlarge", "region": "us-east-1", "verdict": "approved"},
        {"instance_type": "p5en.48xlarge", "region": "us-west-2", "verdict": "dropped"},
        {"instance_type": "p5.48xlarge", "region": "us-east-1", "verdict": "approved"},
        {"instance_type": "p5.48xlarge", "region": "us-west-2", "verdict": "skipped"},
    ]


def test_apply_climbs_the_reviewed_rungs_after_the_planned_one_and_no_other(
    tmp_path: Path,
) -> None:
    """`apply PLANFILE` whose planned zone refused: the planned rung (1) goes on (its other
    zones: the launch's), then the approved rungs after it; the rungs the review did not
    approve (2, 4) never are launched, whatever room they have."""
    assessed = reviewed_assessed({"rungs": _reviewed()})
    tried: list[tuple[str, str]] = []
    said: list[str] = []
    ws = Workspace(tmp_path)
    result = climb(SPEC, ws, assessed, echo=said.append, launch_rung=_refusing({R1.label}, tried))
    assert tried == [("p5en.48xlarge", "us-east-1"), ("p5.48xlarge", "us-east-1")]
    assert result == "up in us-east-1"
    assert landed_rung(ws) == R3
    assert "[skyinfra] rung 1 (p5en.48xlarge in us-east-1) had no room: next rung" in said
    assert said[-1] == "[skyinfra] took rung 3 of 4: p5.48xlarge in us-east-1"

    tried.clear()
    with pytest.raises(CapacityError) as err:
        climb(
            SPEC,
            Workspace(tmp_path / "full"),
            assessed,
            echo=lambda _: None,
            launch_rung=_refusing({"us-east-1", "us-west-2"}, tried),
        )
    assert tried == [("p5en.48xlarge", "us-east-1"), ("p5.48xlarge", "us-east-1")]  # never 4
    text = str(err.value)
    assert "  rung 1 (p5en.48xlarge in us-east-1): no zone had capacity in us-east-1" in text
    assert "  rung 3 (p5.48xlarge in us-east-1): no zone had capacity in us-east-1" in text


def test_a_one_rung_plan_refused_everywhere_exits_10_with_the_zone_failovers_own_message(
    tmp_path: Path,
) -> None:
    """A spec of one type in one region is a ladder of one rung (issue 44): its `apply
    PLANFILE` climbs it as a ladder's (the launch tries its listed zones), and when they all
    refused, the zone failover's exit 10 stands as it is, as `up`'s does."""
    assessed = reviewed_assessed(
        {"rungs": [{"instance_type": "p5.48xlarge", "region": "us-east-1", "verdict": "approved"}]}
    )
    tried: list[tuple[str, str]] = []
    said: list[str] = []
    with pytest.raises(CapacityError) as err:
        climb(
            SPEC,
            Workspace(tmp_path),
            assessed,
            echo=said.append,
            launch_rung=_refusing({"us-east-1"}, tried),
        )
    assert tried == [("p5.48xlarge", "us-east-1")]
    assert err.value.exit_code == exitcodes.NO_CAPACITY
    assert str(err.value) == "no zone had capacity in us-east-1"
    assert said == [] and not (tmp_path / "capacity.json").exists()


def test_only_rung_drops_the_ladder() -> None:
    on = only_rung(SPEC, R3).section_as(AwsSpec)
    assert (on.instance_type, on.region) == ("p5.48xlarge", "us-east-1")
    assert (on.ladder_types, on.ladder_regions) == (("p5.48xlarge",), ("us-east-1",))
