"""The choice of spare for a lost host (skyinfra/targets/ssh/spares.py, issue 45): pure, golden
in the test. The next spare in the spec's order that is neither enrolled nor lost takes the
node; a node stays on its spare while the spec still lists the lost host; with no spare left
the error names the lost host and says so. The review's plan.md lists the spares."""

from __future__ import annotations

import pytest

from skyinfra.errors import NoSpareLeft
from skyinfra.review.markdown import topology
from skyinfra.review.summary import Shape
from skyinfra.targets.ssh.spares import (
    LostHost,
    assigned_hosts,
    choose_spares,
    spares_left,
)
from skyinfra.targets.ssh.spec import SshSpec

SECTION = SshSpec(
    hosts=("10.0.0.5", "10.0.0.6", "10.0.0.7"),
    user="ml",
    key="id",
    spare_hosts=("spare-a.lab", "spare-b.lab"),
)


def lost(index: int, host: str, by: str) -> LostHost:
    return LostHost(index, host, by, f"/home/ml/.skyinfra/lab/node-{index}", "timed out")


def test_the_first_spare_takes_the_lost_node_and_the_node_stays_on_it() -> None:
    assigned = assigned_hosts(SECTION, 2, [])
    assert assigned == ("10.0.0.5", "10.0.0.6")
    assert choose_spares(SECTION, assigned, [], {1: "timed out"}) == {1: "spare-a.lab"}
    gone = [lost(1, "10.0.0.6", "spare-a.lab")]
    assert assigned_hosts(SECTION, 2, gone) == ("10.0.0.5", "spare-a.lab")
    assert spares_left(SECTION, assigned_hosts(SECTION, 2, gone), gone) == ["spare-b.lab"]


def test_a_lost_spare_is_replaced_by_the_next_one_and_two_lost_nodes_take_them_in_order() -> None:
    gone = [lost(1, "10.0.0.6", "spare-a.lab")]
    now = assigned_hosts(SECTION, 2, gone)
    assert choose_spares(SECTION, now, gone, {1: "refused"}) == {1: "spare-b.lab"}
    chain = [*gone, lost(1, "spare-a.lab", "spare-b.lab")]
    assert assigned_hosts(SECTION, 2, chain) == ("10.0.0.5", "spare-b.lab")
    both = choose_spares(SECTION, ("10.0.0.5", "10.0.0.6"), [], {1: "x", 0: "y"})
    assert both == {0: "spare-a.lab", 1: "spare-b.lab"}


def test_a_spare_already_enrolled_by_a_grown_spec_or_written_differently_is_not_taken() -> None:
    section = SshSpec(
        hosts=("10.0.0.5", "10.0.0.6", "Spare-A.lab."), user="ml", key="id",
        spare_hosts=("spare-a.lab", "spare-b.lab"),
    )  # fmt: skip
    assigned = assigned_hosts(section, 3, [])
    assert choose_spares(section, assigned, [], {1: "timed out"}) == {1: "spare-b.lab"}


def test_no_spare_left_names_the_lost_host_and_says_so() -> None:
    gone = [lost(1, "10.0.0.6", "spare-a.lab"), lost(1, "spare-a.lab", "spare-b.lab")]
    now = assigned_hosts(SECTION, 2, gone)
    with pytest.raises(NoSpareLeft) as err:
        choose_spares(SECTION, now, gone, {1: "timed out"})
    said = str(err.value)
    assert "host spare-b.lab (node-1) lost: it stopped answering (timed out)" in said
    assert (
        "no spare is left" in said and "spare-a.lab, spare-b.lab: each is enrolled or lost" in said
    )
    bare = SshSpec(hosts=("10.0.0.5", "10.0.0.6"), user="ml", key="id")
    with pytest.raises(NoSpareLeft, match=r"host 10\.0\.0\.5 \(node-0\) lost.*lists none"):
        choose_spares(bare, ("10.0.0.5", "10.0.0.6"), [], {0: "refused"})


def test_plan_md_lists_the_spares_as_not_enrolled() -> None:
    before = Shape(nodes=2, instance_type="SSH host", spare_hosts=("spare-a.lab", "spare-b.lab"))
    after = Shape(nodes=2, instance_type="SSH host", spare_hosts=("spare-b.lab",))
    rows = topology(before, after)
    assert "| spare hosts (not enrolled) | spare-a.lab, spare-b.lab | spare-b.lab ⚠️ |" in rows
    assert not any("spare" in row for row in topology(Shape(nodes=2), Shape(nodes=2)))


def test_a_spare_passed_over_is_not_chosen_and_no_spare_left_names_each_one_tried() -> None:
    assigned = assigned_hosts(SECTION, 2, [])
    passed = {"spare-a.lab": "did not answer: timed out"}
    assert choose_spares(SECTION, assigned, [], {1: "refused"}, passed) == {1: "spare-b.lab"}
    both = {**passed, "spare-b.lab": "cannot be enrolled: ssh.python 'python3' is Python 3.8"}
    with pytest.raises(NoSpareLeft) as err:
        choose_spares(SECTION, assigned, [], {1: "no route"}, both)
    said = str(err.value)
    assert (
        "host 10.0.0.6 (node-1) lost: it stopped answering (no route), and no spare is left to "
        "enrol in its place (spare spare-a.lab did not answer: timed out; spare spare-b.lab "
        "cannot be enrolled: ssh.python 'python3' is Python 3.8): bring the host or one of "
        "those spares back"
    ) in said
    assert said.endswith("and run `skyinfra up`; nothing was enrolled")
    gone = [lost(1, "10.0.0.6", "spare-a.lab")]
    with pytest.raises(
        NoSpareLeft,
        match=r"spare spare-b\.lab did not answer: x; ssh\.spare_hosts spare-a\.lab: each is "
        "enrolled or lost",
    ):
        choose_spares(
            SECTION,
            assigned_hosts(SECTION, 2, gone),
            gone,
            {1: "y"},
            {"spare-b.lab": "did not answer: x"},
        )
