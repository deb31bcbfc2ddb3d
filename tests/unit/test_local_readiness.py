"""Local target readiness: `up` bootstraps synchronously, so `run` checks once and does not
wait; a node directory without the bootstrap's marker stops the run before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from skyinfra.cli import cli
from skyinfra.errors import NodesNotReadyError
from skyinfra.lifecycle import default_wait_ready_s
from skyinfra.spec import validate_spec
from skyinfra.targets.local.transport import LocalTransport
from skyinfra.transport.readiness import wait_until_ready
from tests.support.topologies import local_topology


def node_dirs(tmp_path: Path, bootstrapped: tuple[bool, ...]) -> dict[int, Path]:
    dirs = {}
    for i, done in enumerate(bootstrapped):
        d = tmp_path / "nodes" / f"node-{i}"
        d.mkdir(parents=True)
        if done:
            (d / ".skyinfra-node").touch()
        dirs[i] = d
    return dirs


def test_marker_makes_a_local_node_ready(tmp_path: Path) -> None:
    transport = LocalTransport(node_dirs(tmp_path, (True, False)))
    assert transport.readiness(0).ready
    missing = transport.readiness(1)
    assert missing.state == "failed"
    assert "not a bootstrapped node directory (run `skyinfra up`)" in missing.detail
    assert transport.readiness(7).state == "failed"


def test_local_run_does_not_wait(tmp_path: Path) -> None:
    assert default_wait_ready_s(validate_spec({"name": "c", "nodes": 2})) == 0.0
    transport = LocalTransport(node_dirs(tmp_path, (True, False)))
    lines: list[str] = []
    with pytest.raises(NodesNotReadyError, match=r"^cannot run: node-1: .*node-1 is not a") as err:
        wait_until_ready(transport, local_topology(2), timeout_s=0, echo=lines.append)
    assert err.value.nodes == {"node-1": "failed"}
    assert lines == []


def test_cli_run_stops_before_copying_when_a_node_is_not_bootstrapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("def main():\n    pass\n")
    monkeypatch.chdir(project)
    ws = tmp_path / "clusters" / "c"
    dirs = node_dirs(ws, (True, False))
    (ws / "spec.json").write_text(json.dumps(validate_spec({"name": "c", "nodes": 2}).to_dict()))
    (ws / "topology.json").write_text(json.dumps(local_topology(2).to_dict()))
    result = CliRunner().invoke(
        cli,
        ["run", "--dir", str(tmp_path / "clusters"), "--cluster", "c", "train.py:main"],
        catch_exceptions=True,
    )
    assert isinstance(result.exception, NodesNotReadyError), result.output
    assert "cannot run: node-1" in str(result.exception)
    assert not (dirs[0] / "work").exists()
    assert not (dirs[0] / "runs").exists()
    assert not (ws / "runs").exists()
