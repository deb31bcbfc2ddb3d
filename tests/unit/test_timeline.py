"""The timeline of `up`: stages, laps, nested stages, Terraform's per-resource times (pure:
a fake clock, events as Terraform's JSON UI writes them)."""

from __future__ import annotations

import json

import pytest

from skyinfra import timeline as tl
from skyinfra.timeline import Timeline


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_stages_laps_and_nesting_are_printed_and_kept() -> None:
    clock, lines = FakeClock(), []
    timeline = Timeline("up", lines.append, clock=clock)
    with tl.active(timeline):
        with timeline.stage("prepare"):
            clock.now += 1.0
            tl.lap("wheel build")  # what a target marks without being handed the timeline
            clock.now += 0.5
            tl.lap("render")
        clock.now += 2.0
        with pytest.raises(RuntimeError), tl.stage("terraform init"):
            raise RuntimeError("a failing stage is still timed")
    tl.lap("outside any timeline: nothing")
    stages = timeline.to_dict()["stages"]
    assert [(s["name"], s["depth"], s["start_s"], s["seconds"]) for s in stages] == [
        ("wheel build", 1, 0.0, 1.0),
        ("render", 1, 1.0, 0.5),
        ("prepare", 0, 0.0, 1.5),
        ("terraform init", 0, 3.5, 0.0),
    ]
    assert lines == [
        "[skyinfra]   wheel build: 1.0 s",
        "[skyinfra]   render: 0.5 s",
        "[skyinfra] prepare: 1.5 s",
        "[skyinfra] terraform init: 0.0 s",
    ]
    assert timeline.to_dict()["total_s"] == 3.5
    json.dumps(timeline.to_dict())  # what timeline.json holds


def event(kind: str, address: str, at: str, action: str = "create") -> dict[str, object]:
    return {
        "type": kind,
        "@timestamp": f"2026-11-23T10:00:{at}Z",
        "hook": {"resource": {"addr": address}, "action": action},
    }


def test_each_resource_apply_is_timed_from_terraform_events() -> None:
    timeline = Timeline("up", lambda _line: None)
    node0, node1 = 'module.nodes.terraform_data.node["node-0"]', 'module.x["node-1"]'
    for e in (
        event("apply_start", node0, "01.000000"),
        event("apply_start", node1, "01.250000"),
        {"type": "apply_progress", "hook": {"resource": {"addr": node0}}},
        event("apply_complete", node1, "02.000000"),
        event("apply_errored", node0, "04.500000"),
        event("apply_complete", "never.started", "05.000000"),
    ):
        timeline.on_event(e)
    assert timeline.resources_summary() == [
        f"create {node0} (failed): 3.5 s",
        f"create {node1}: 0.8 s",
    ]
    kinds = {s["kind"] for s in timeline.to_dict()["stages"]}
    assert kinds == {"resource"}
