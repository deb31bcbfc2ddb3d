"""The run session's steps against an in-memory transport (no processes, no nodes): what is
copied and started, the first failure ending the others, Ctrl-C ending every node, the logs,
the fetched results and summary.json."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from skyinfra.run.report import RunReport
from skyinfra.run.session import run_on_cluster
from skyinfra.topology import Node, Topology
from skyinfra.transport.base import IgnoreFn, Readiness


@dataclass
class FakeProcess:
    node: int
    output: list[str]
    code: int | None  # None: runs until killed
    ended: threading.Event = field(default_factory=threading.Event)
    killed: bool = False

    def lines(self) -> Iterator[str]:
        yield from self.output
        if self.code is None:
            self.ended.wait(10)
        self.ended.set()

    def poll(self) -> int | None:
        return self.wait() if self.ended.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        self.ended.wait(timeout)
        return -15 if self.killed else (self.code if self.code is not None else -9)

    def kill(self) -> None:
        self.killed = self.killed or not self.ended.is_set()
        self.ended.set()


class FakeTransport:
    def __init__(self, plan: dict[int, tuple[list[str], int | None]], results: dict[int, str]):
        self.plan = plan
        self.results = results
        self.calls: list[tuple[object, ...]] = []
        self.procs: dict[int, FakeProcess] = {}

    def node_root(self, node: int) -> str:
        return f"/n{node}"

    def readiness(self, node: int) -> Readiness:
        return Readiness("ready")

    def copy_dir(self, node: int, src: Path, dest: str, ignore: IgnoreFn) -> None:
        self.calls.append(("copy_dir", node, dest, ignore(".git"), ignore("train.py")))

    def put_file(self, node: int, src: Path, dest: str) -> None:
        self.calls.append(("put_file", node, dest))

    def start(
        self, node: int, argv: Sequence[str], *, env: Mapping[str, str], cwd: str, tag: str
    ) -> FakeProcess:
        self.calls.append(("start", node, list(argv), dict(env), cwd, tag))
        output, code = self.plan[node]
        self.procs[node] = FakeProcess(node, output, code)
        return self.procs[node]

    def fetch(self, node: int, remote: str, local: Path) -> bool:
        if node not in self.results:
            return False
        local.write_text(self.results[node], encoding="utf-8")
        return True


def topology(count: int) -> Topology:
    return Topology(
        cluster="c",
        provider="local",
        head_addr="127.0.0.2",
        head_port=29500,
        nodes=tuple(
            Node(i, f"node-{i}", f"127.0.0.{2 + i}", None, f"local-c-{i}") for i in range(count)
        ),
    )


def run(
    transport: FakeTransport,
    tmp_path: Path,
    lines: list[str],
    *,
    args: Sequence[str] = ("--epochs", "1"),
    all_logs: bool = False,
) -> RunReport:
    (tmp_path / "src").mkdir(exist_ok=True)
    return run_on_cluster(
        transport=transport,
        topology=topology(len(transport.plan)),
        topology_file=tmp_path / "topology.json",
        runs_dir=tmp_path / "runs",
        src=tmp_path / "src",
        entry="train.py:main",
        args=args,
        all_logs=all_logs,
        echo=lines.append,
    )


def test_a_clean_run_copies_starts_streams_and_collects(tmp_path: Path) -> None:
    results = {0: json.dumps({"workers": [{"worker": 0, "value": 1}]}), 1: "not json"}
    transport = FakeTransport({0: (["a", "b"], 0), 1: (["c"], 0)}, results)
    lines: list[str] = []
    report = run(transport, tmp_path, lines)

    rid = report.run_id
    assert report.run_dir == tmp_path / "runs" / rid
    assert lines == ["[node-0] a", "[node-0] b"]  # node 0 only, without --all-logs
    copies = [c for c in transport.calls if c[0] != "start"]
    assert copies == [
        ("copy_dir", 0, "/n0/work", True, False),
        ("put_file", 0, "/n0/topology.json"),
        ("copy_dir", 1, "/n1/work", True, False),
        ("put_file", 1, "/n1/topology.json"),
    ]
    starts = {c[1]: c for c in transport.calls if c[0] == "start"}
    argv = ["/n1/venv/bin/skyinfra-runtime", "launch", "--topology", "/n1/topology.json"]
    argv += ["--node", "1", "--result", f"/n1/runs/{rid}/result.json"]
    argv += ["train.py:main", "--", "--epochs", "1"]
    env = {
        "SKYINFRA_TOPOLOGY": "/n1/topology.json",
        "SKYINFRA_NODE": "1",
        "SKYINFRA_RUN_ID": rid,
        "PYTHONUNBUFFERED": "1",
    }
    assert starts[1] == ("start", 1, argv, env, "/n1/work", rid)
    assert (report.run_dir / "node-0.log").read_text() == "a\nb\n"
    assert (report.run_dir / "node-1.log").read_text() == "c\n"
    assert report.first_failure is None
    assert report.outcomes[0].result == {"workers": [{"worker": 0, "value": 1}]}
    assert report.outcomes[1].result is None  # unreadable result.json
    summary = json.loads((report.run_dir / "summary.json").read_text())
    assert summary["exit_code"] == 0 and summary["args"] == ["--epochs", "1"]


def test_the_first_failure_ends_the_other_nodes(tmp_path: Path) -> None:
    transport = FakeTransport({0: (["waiting"], None), 1: (["boom"], 3)}, {})
    lines: list[str] = []
    report = run(transport, tmp_path, lines, args=[], all_logs=True)

    assert "[skyinfra] node-1 exited with 3; ending the other nodes" in lines
    assert "[node-1] boom" in lines
    assert report.first_failure == 1
    assert report.outcomes[1].exit_code == 3 and not report.outcomes[1].ended_by_us
    assert report.outcomes[0].ended_by_us and report.outcomes[0].exit_code == -15
    assert transport.procs[0].killed
    argv = next(c for c in transport.calls if c[0] == "start")[2]
    assert isinstance(argv, list) and "--" not in argv  # no args, no separator
    summary = json.loads((report.run_dir / "summary.json").read_text())
    assert summary["first_failure"] == 1 and summary["exit_code"] == report.exit_code


def test_ctrl_c_ends_every_started_node_and_propagates(tmp_path: Path) -> None:
    transport = FakeTransport({0: (["x"], None), 1: ([], None)}, {})

    def interrupt(line: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_on_cluster(
            transport=transport,
            topology=topology(2),
            topology_file=tmp_path / "topology.json",
            runs_dir=tmp_path / "runs",
            src=tmp_path,
            entry="train.py:main",
            args=[],
            all_logs=False,
            echo=interrupt,
        )
    assert transport.procs[0].killed and transport.procs[1].killed
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "node-0.log").read_text() == "x\n"
    assert not (run_dir / "summary.json").exists()
