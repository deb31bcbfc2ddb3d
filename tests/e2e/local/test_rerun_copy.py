"""A re-run copies only what changed, end to end through the CLI on one 2-node local cluster
(shared by the module; each test starts with nothing copied, so any order works): the bytes
each node got (runs/<id>/copy.json and summary.json), what the entry sees, the earlier run
left as it was, a node whose earlier copies are gone, and secrets never sent. Real processes
only."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.local_jobs import cli, module_env, wait_until_ended

pytestmark = pytest.mark.slow

NAME = "rerun"
DATA_FILES, DATA_BYTES = 4, 1024 * 1024

ENTRY = """\
import os


def main():
    sizes = sum(os.path.getsize(os.path.join("data", n)) for n in os.listdir("data"))
    return {"version": open("version.txt").read().strip(), "data": sizes,
            "files": sorted(os.listdir("."))}
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> dict[str, str]:
    return module_env(tmp_path_factory, tf_plugin_cache, "rerun")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Path]:
    proj = tmp_path_factory.mktemp("rerun-project")
    up = cli(["up", "--name", NAME, "--nodes", "2"], proj, env)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield proj
    finally:
        down = cli(["down", "--yes", "--cluster", NAME], proj, env)
        assert down.returncode == 0, down.stdout + down.stderr


@pytest.fixture
def project(cluster: Path) -> Path:
    """The project as each test begins (in any order): nothing copied to the nodes yet."""
    for i in (0, 1):
        shutil.rmtree(node_dir(cluster, i) / "runs", ignore_errors=True)
    shutil.rmtree(cluster / "data", ignore_errors=True)
    (cluster / "data").mkdir()
    for i in range(DATA_FILES):
        (cluster / "data" / f"part-{i}.bin").write_bytes(os.urandom(DATA_BYTES))
    (cluster / "entry.py").write_text(ENTRY)
    (cluster / "version.txt").write_text("1\n")
    (cluster / ".env").write_text("API_TOKEN=never-on-a-node\n")
    (cluster / ".env.local").unlink(missing_ok=True)
    return cluster


def node_dir(project: Path, i: int) -> Path:
    return project / ".skyinfra" / "clusters" / NAME / "nodes" / f"node-{i}"


def run(project: Path, env: dict[str, str], *flags: str) -> tuple[str, dict[str, Any], str]:
    """`skyinfra run [FLAGS] entry.py:main`: (run id, summary.json, stdout)."""
    res = cli(["run", "--cluster", NAME, *flags, "entry.py:main"], project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    runs = project / ".skyinfra" / "clusters" / NAME / "runs"
    run_dir = sorted(runs.iterdir())[-1]
    summary = json.loads((run_dir / "summary.json").read_text())
    copies = json.loads((run_dir / "copy.json").read_text())
    for node in summary["nodes"]:
        assert node["copy"] == copies[f"node-{node['node']}"]
    return run_dir.name, summary, res.stdout


def value(summary: dict[str, Any], node: int) -> Any:
    return summary["nodes"][node]["result"]["workers"][0]["value"]


def test_a_rerun_after_a_one_line_change_sends_that_file_only(
    project: Path, env: dict[str, str]
) -> None:
    first_id, first, out = run(project, env)
    project_bytes = DATA_FILES * DATA_BYTES + len(ENTRY) + len("1\n")
    for i in (0, 1):
        copied = first["nodes"][i]["copy"]
        assert copied["base"] is None and copied["sent_bytes"] == project_bytes
        assert value(first, i) == {
            "version": "1",
            "data": DATA_FILES * DATA_BYTES,
            "files": ["data", "entry.py", "version.txt"],  # no .env
        }
    assert "no earlier copy on node-0, node-1" in out

    (project / "version.txt").write_text("2\n")  # the one-line change
    (project / ".env.local").write_text("ANOTHER_SECRET=x\n")  # a new secret: never sent
    second_id, second, out = run(project, env)
    for i in (0, 1):
        copied = second["nodes"][i]["copy"]
        assert copied["base"] == first_id
        assert (copied["sent_files"], copied["sent_bytes"]) == (1, len("2\n"))
        assert copied["linked_bytes"] == DATA_FILES * DATA_BYTES + len(ENTRY)
        assert value(second, i)["version"] == "2"
        assert value(second, i)["files"] == ["data", "entry.py", "version.txt"]
        runs = node_dir(project, i) / "runs"
        # the first run keeps its own version.txt; the data is one inode in both runs
        assert (runs / first_id / "work" / "version.txt").read_text() == "1\n"
        old, new = (runs / r / "work" / "data" / "part-0.bin" for r in (first_id, second_id))
        assert old.stat().st_ino == new.stat().st_ino
    assert "copy to 2 node(s): 2 file(s) sent (4 B), 10 unchanged kept" in out


def test_a_node_whose_earlier_copies_are_gone_gets_a_full_copy(
    project: Path, env: dict[str, str]
) -> None:
    """As for a replaced node: node-1's run directories removed by hand."""
    run(project, env)  # both nodes hold a copy now
    shutil.rmtree(node_dir(project, 1) / "runs")
    (project / "data" / "part-3.bin").unlink()  # a deleted file is absent from the new copy
    run_id, summary, out = run(project, env)
    node0, node1 = summary["nodes"][0]["copy"], summary["nodes"][1]["copy"]
    assert node0["base"] is not None and node0["sent_bytes"] == 0
    assert node1["base"] is None and node1["sent_bytes"] > (DATA_FILES - 1) * DATA_BYTES
    assert "no earlier copy on node-1" in out
    for i in (0, 1):
        assert value(summary, i)["data"] == (DATA_FILES - 1) * DATA_BYTES
        work = node_dir(project, i) / "runs" / run_id / "work"
        assert sorted(p.name for p in (work / "data").iterdir()) == [
            f"part-{n}.bin" for n in range(DATA_FILES - 1)
        ]


def snapshot(work: Path) -> dict[str, tuple[int, int, int, bytes]]:
    return {
        p.relative_to(work).as_posix(): (st.st_ino, st.st_mtime_ns, st.st_size, p.read_bytes())
        for p in sorted(work.rglob("*"))
        if p.is_file() and (st := p.stat())
    }


def test_a_rerun_never_edits_the_run_it_copies_from(project: Path, env: dict[str, str]) -> None:
    """A detached job's copy is the next run's base: a re-run with a changed, a new and a
    deleted file is copied beside it from that copy, and the job's files stay as they were,
    not a byte, inode or mtime changed. One job runs on a cluster at a time, so the re-run
    comes once the job, which read its files, has ended."""
    res = cli(["run", "--cluster", NAME, "--detach", "entry.py:main"], project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    job = res.stdout.split("job ", 1)[1].split()[0]
    works = [node_dir(project, i) / "runs" / job / "work" for i in (0, 1)]
    record = wait_until_ended(NAME, project, env, job)
    assert record["state"] == "succeeded", record
    for i in (0, 1):
        result = json.loads((node_dir(project, i) / "runs" / job / "result.json").read_text())
        assert result["workers"][0]["value"]["version"] == "1"
        assert result["workers"][0]["value"]["data"] == DATA_FILES * DATA_BYTES
    before = [snapshot(w) for w in works]
    (project / "version.txt").write_text("2\n")
    (project / "data" / "part-0.bin").unlink()
    (project / "data" / "extra.bin").write_bytes(b"x" * 1000)
    _, summary, _ = run(project, env)
    for i in (0, 1):
        assert summary["nodes"][i]["copy"]["base"] == job
        assert summary["nodes"][i]["copy"]["sent_bytes"] == len("2\n") + 1000
        assert value(summary, i)["version"] == "2"
        assert snapshot(works[i]) == before[i]  # not a byte, inode or mtime changed
