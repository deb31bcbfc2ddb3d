"""The checkpoint directory's contract (skyinfra_runtime.checkpoints) and the operator's view of
the sets (skyinfra.checkpoints): names, where each target puts a set, committed steps, the
spec's `checkpoints`, listing and deleting."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from skyinfra_runtime import checkpoints, jobenv

from skyinfra import checkpoints as ops
from skyinfra.cli.main import main
from skyinfra.errors import SpecError, UsageError
from skyinfra.spec import validate_spec
from skyinfra.workspace import Workspace


@pytest.mark.parametrize("name", ["20261125-094840-123456-ab12", "run1", "a.b_c-d", "x" * 128])
def test_safe_names_are_accepted(name: str) -> None:
    assert checkpoints.name_problem(name) is None


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a/b", "../x", ".hidden", "-rf", "a..b", "x" * 129, "a b", 3, None]
)
def test_unsafe_names_are_refused_naming_what_is_valid(name: object) -> None:
    assert checkpoints.name_problem(name) == checkpoints.NAME_EXPECTED
    with pytest.raises(ValueError, match="checkpoint set name"):
        checkpoints.checkpoint_dir("/n", name, "local")  # type: ignore[arg-type]


def test_the_variable_is_reserved_for_skyinfra() -> None:
    assert jobenv.name_problem(checkpoints.CHECKPOINT_DIR_ENV) is not None


def test_local_sets_live_beside_the_node_folders_and_aws_sets_in_the_node_dir(
    tmp_path: Path,
) -> None:
    node = tmp_path / "ws" / "nodes" / "node-1"
    assert checkpoints.checkpoint_dir(node, "s", "local") == tmp_path / "ws" / "checkpoints" / "s"
    assert checkpoints.checkpoint_dir(node, "s", "aws") == node / "checkpoints" / "s"


def test_job_env_resolves_by_the_topology_and_creates_the_directory(tmp_path: Path) -> None:
    node = tmp_path / "ws" / "nodes" / "node-0"
    node.mkdir(parents=True)
    (node / "topology.json").write_text(json.dumps({"provider": "local"}))
    env = checkpoints.job_env(node, "shared")
    want = tmp_path / "ws" / "checkpoints" / "shared"
    assert env == {"SKYINFRA_CHECKPOINT_DIR": str(want), "SKYINFRA_CHECKPOINTS": "shared"}
    assert want.is_dir()


def test_only_a_set_the_job_never_used_is_removed(tmp_path: Path) -> None:
    unused = tmp_path / "unused"
    unused.mkdir()
    assert checkpoints.remove_if_unused(unused, checkpoints.unused_mark(unused))
    assert not unused.exists()
    # Written to: kept, with what it holds.
    written = tmp_path / "written"
    written.mkdir()
    mark = checkpoints.unused_mark(written)
    (written / "step-1").mkdir()
    (written / "step-1" / "w.bin").write_bytes(b"x")
    assert not checkpoints.remove_if_unused(written, mark)
    assert (written / "step-1" / "w.bin").is_file()
    # Used, then emptied by the job (Keras deletes its backups when training ends): kept.
    emptied = tmp_path / "emptied"
    emptied.mkdir()
    os.utime(emptied, ns=(0, emptied.stat().st_mtime_ns - 10**9))  # made a second ago
    mark = checkpoints.unused_mark(emptied)
    (emptied / "latest").write_bytes(b"x")
    (emptied / "latest").unlink()
    assert not checkpoints.remove_if_unused(emptied, mark)
    assert emptied.is_dir()
    assert not checkpoints.remove_if_unused(tmp_path / "none", {"ino": 1, "mtime_ns": 1})
    assert not checkpoints.remove_if_unused(emptied, None)


def test_only_committed_steps_count(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        checkpoints.step_dir(tmp_path, step).mkdir()
    checkpoints.commit(checkpoints.step_dir(tmp_path, 1))
    checkpoints.commit(checkpoints.step_dir(tmp_path, 2), {"epoch": 2})
    # step 3: a writer killed before its marker
    (checkpoints.step_dir(tmp_path, 3) / "weights.bin").write_bytes(b"half")
    assert checkpoints.committed_steps(tmp_path) == [1, 2]
    assert checkpoints.latest_step(tmp_path) == 2
    assert checkpoints.latest_step(tmp_path / "none") is None
    marker = checkpoints.step_dir(tmp_path, 2) / checkpoints.COMMIT_MARKER
    assert json.loads(marker.read_text()) == {"epoch": 2}


def test_spec_checkpoints_round_trips_and_is_checked() -> None:
    base = {"name": "c", "provider": "local", "nodes": 1}
    spec = validate_spec({**base, "checkpoints": "team-run"})
    assert spec.checkpoints == "team-run"
    assert validate_spec(spec.to_dict()).checkpoints == "team-run"
    assert validate_spec(base).checkpoints is None
    with pytest.raises(SpecError, match="checkpoints") as err:
        validate_spec({**base, "checkpoints": "../up"})
    assert "'../up'" in str(err.value)


def _ws_with_sets(tmp_path: Path) -> Workspace:
    ws = Workspace(tmp_path / "c")
    (ws.path / "checkpoints" / "a" / "step-1").mkdir(parents=True)
    (ws.path / "checkpoints" / "a" / "step-1" / "w.bin").write_bytes(b"x" * 100)
    (ws.path / "checkpoints" / "b").mkdir()
    for job, name in (("20261125-000001-000000-aaaa", "a"), ("20261125-000002-000000-bbbb", "a")):
        (ws.runs_dir / job).mkdir(parents=True)
        ops.record_use(ws.runs_dir / job, name)
    return ws


def test_sets_are_listed_with_size_files_and_jobs(tmp_path: Path) -> None:
    ws = _ws_with_sets(tmp_path)
    sets = {s.name: s.to_dict() for s in ops.list_sets(ws)}
    assert sets["a"]["size_bytes"] == 100 and sets["a"]["files"] == 1
    assert sets["a"]["jobs"] == ["20261125-000001-000000-aaaa", "20261125-000002-000000-bbbb"]
    assert sets["b"] == {**sets["b"], "size_bytes": 0, "files": 0, "modified": None, "jobs": []}
    assert "2 checkpoint set(s)" in (ops.kept_line(ws) or "")
    with pytest.raises(UsageError, match="it has: a, b"):
        ops.find_set(ws, "zz")


def _skyinfra(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as end:
        main(args)
    out = capsys.readouterr()
    return int(end.value.code or 0), out.out + out.err


def test_the_command_lists_and_deletes_only_with_yes_off_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = _ws_with_sets(tmp_path)
    ws.write_json(
        ws.spec_file, validate_spec({"name": "c", "provider": "local", "nodes": 1}).to_dict()
    )
    base = ["checkpoints", "--dir", str(tmp_path), "--cluster", "c"]
    code, out = _skyinfra([*base, "--json"], capsys)
    assert code == 0, out
    assert [s["name"] for s in json.loads(out)] == ["a", "b"]
    code, out = _skyinfra([*base, "delete", "a"], capsys)
    assert code == 2 and "--yes" in out and "nothing was deleted" in out
    assert (ws.path / "checkpoints" / "a").is_dir()
    code, out = _skyinfra([*base, "delete", "../a", "--yes"], capsys)
    assert code == 2 and "'../a'" in out
    code, out = _skyinfra([*base, "delete", "a", "--yes"], capsys)
    assert code == 0, out
    assert not (ws.path / "checkpoints" / "a").exists()
    assert (ws.path / "checkpoints" / "b").is_dir()


def test_an_agent_refuses_a_bad_name_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from skyinfra_runtime.jobs.commands import main as runtime_main

    argv = ["supervise", "--job", "j1", "--node-dir", str(tmp_path / "n"), "--node", "0"]
    assert runtime_main([*argv, "--checkpoints", "../x", "--", "true"]) == 2
    assert "checkpoint set name '../x'" in capsys.readouterr().err
    assert not (tmp_path / "n").exists() and not (tmp_path / "x").exists()
