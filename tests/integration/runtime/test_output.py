"""Output control proven on real processes: what each node's launcher actually printed."""

from __future__ import annotations

from pathlib import Path

from tests.integration.runtime.launch_harness import ENTRIES, run_nodes, topology

BASICS = ENTRIES / "basics.py"


def test_stdout_only_head_keeps_the_head_and_silences_node_1(tmp_path: Path) -> None:
    head, other = run_nodes(tmp_path, topology(nodes=2), f"{BASICS}:report")
    assert head.returncode == other.returncode == 0, (head.stderr, other.stderr)
    assert "python-level line from node 0" in head.stdout
    assert "fd-level line from node 0" in head.stdout
    assert "from node 1" not in other.stdout
    assert other.stdout == ""
    # The decorated function still ran and returned on the silenced node.
    assert other.values() == ["reported"]


def test_stdout_only_head_with_two_workers_per_node(tmp_path: Path) -> None:
    runs = run_nodes(tmp_path, topology(nodes=2, procs_per_node=2), f"{BASICS}:report")
    assert all(run.returncode == 0 for run in runs)
    everything = "".join(run.stdout for run in runs)
    # global index 0 only: one python-level and one fd-level line in the whole cluster.
    assert everything.count("line from node") == 2
    assert "line from node 0" in runs[0].stdout


def test_silent_suppresses_both_streams_on_every_node(tmp_path: Path) -> None:
    runs = run_nodes(tmp_path, topology(nodes=2), f"{BASICS}:quiet")
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert run.values() == ["quiet"]
        assert "should never appear" not in run.stdout + run.stderr
        assert "nor this" not in run.stderr
        assert run.stdout == ""
