"""The run session's steps against an in-memory transport (no processes, no nodes): what is
copied and started, the first failure ending the others, Ctrl-C ending every node, the logs,
the fetched results and summary.json."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from skyinfra_runtime.rundirs import RUN_ID_RE

from skyinfra import exitcodes
from skyinfra.errors import RunTimeoutError, UsageError
from skyinfra.run.entry_check import check_entry
from skyinfra.run.ignore import make_ignore, read_ignore_patterns
from skyinfra.run.launch import ClusterNodes, JobLaunch
from skyinfra.run.nodes import new_run_id
from skyinfra.run.report import RunReport, describe_exit, raise_for_failure
from skyinfra.run.session import run_on_cluster
from skyinfra.transport.base import Readiness
from skyinfra.transport.nodesync import Entries
from skyinfra.transport.tree import CopyStats
from tests.support.topologies import local_topology


@dataclass
class FakeProcess:
    node: int
    output: list[str]
    code: int | None  # None: runs until killed
    ended: threading.Event = field(default_factory=threading.Event)
    killed: bool = False
    kill_grace: float | None = None
    kill_takes: float = 0.0  # seconds a kill blocks (a node that ignores SIGTERM)
    kill_started: float | None = None
    # Kills meant to run at once meet here: a kill that waits alone (the others not started
    # until it returns) breaks the barrier instead of passing it.
    kill_barrier: threading.Barrier | None = None
    killed_alone: bool = False

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

    def kill(self, grace_s: float = 10.0) -> None:
        self.kill_started = time.monotonic()
        self.kill_grace = grace_s
        if self.kill_barrier is not None:
            try:
                self.kill_barrier.wait(timeout=60)  # a bound on a hang, not on speed
            except threading.BrokenBarrierError:
                self.killed_alone = True
        time.sleep(self.kill_takes)
        self.killed = self.killed or not self.ended.is_set()
        self.ended.set()


class FakeTransport:
    def __init__(self, plan: dict[int, tuple[list[str], int | None]], results: dict[int, str]):
        self.plan = plan
        self.results = results
        self.calls: list[tuple[object, ...]] = []
        self.procs: dict[int, FakeProcess] = {}

    def node_root(self, node: int) -> str:
        self.calls.append(("node_root", node))
        return f"/n{node}"

    def readiness(self, node: int) -> Readiness:
        return Readiness("ready")

    def copy_tree(self, node: int, src: Path, wanted: Entries, run_id: str) -> CopyStats:
        self.calls.append(("copy_tree", node, run_id, sorted(wanted)))
        size = sum(int(e.get("size", 0)) for e in wanted.values())
        return CopyStats(None, len(wanted), size, 0, 0, 0, 0, 0.0)

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


def run(
    transport: FakeTransport,
    tmp_path: Path,
    lines: list[str],
    *,
    args: Sequence[str] = ("--epochs", "1"),
    all_logs: bool = False,
) -> RunReport:
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / "train.py").write_text("def main():\n    pass\n")
    return run_on_cluster(
        JobLaunch(
            entry="train.py:main",
            src=tmp_path / "src",
            args=tuple(args),
            all_logs=all_logs,
        ),
        ClusterNodes(
            transport,
            local_topology(len(transport.plan)),
            tmp_path / "topology.json",
            tmp_path / "runs",
        ),
        echo=lines.append,
    )


def test_a_clean_run_copies_starts_streams_and_collects(tmp_path: Path) -> None:
    results = {0: json.dumps({"workers": [{"worker": 0, "value": 1}]}), 1: "not json"}
    transport = FakeTransport({0: (["a", "b"], 0), 1: (["c"], 0)}, results)
    lines: list[str] = []
    report = run(transport, tmp_path, lines)

    rid = report.run_id
    assert report.run_dir == tmp_path / "runs" / rid
    # what the copy sent, node 0's lines only (no --all-logs), how long node 0 took to start
    assert lines[0] == (
        "[skyinfra] copy to 2 node(s): 2 file(s) sent (42 B), 0 unchanged kept from the "
        "nodes' previous copy (0 B linked); no earlier copy on node-0, node-1"
    )
    assert lines[1:3] == ["[node-0] a", "[node-0] b"]
    assert len(lines) == 4 and lines[3].startswith("[skyinfra] node-0: ready check ")
    copies = [c for c in transport.calls if c[0] in ("copy_tree", "put_file")]
    # Each run has its own directory on the node: an earlier run's files stay where they are.
    assert copies == [
        ("copy_tree", 0, rid, ["train.py"]),
        ("put_file", 0, "/n0/topology.json"),
        ("copy_tree", 1, rid, ["train.py"]),
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
        "SKYINFRA_NODE_DIR": "/n1",
        "SKYINFRA_RUN_DIR": f"/n1/runs/{rid}",
        "SKYINFRA_SHARED_DIR": "/n1/shared",
        "SKYINFRA_KEEP_RUNS": "5",
        "PYTHONUNBUFFERED": "1",
    }
    assert starts[1] == ("start", 1, argv, env, f"/n1/runs/{rid}/work", rid)
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

    assert (
        "[skyinfra] node-1 failed first: exit 3 (topology or plugin set-up failed); "
        "ending node-0 (SIGTERM, SIGKILL after 3 s)"
    ) in lines
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

    (tmp_path / "train.py").write_text("def main():\n    pass\n")

    def interrupt(line: str) -> None:
        if line.startswith("[node-"):  # once a node's output streams
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_on_cluster(
            JobLaunch(
                entry="train.py:main",
                src=tmp_path,
            ),
            ClusterNodes(
                transport, local_topology(2), tmp_path / "topology.json", tmp_path / "runs"
            ),
            echo=interrupt,
        )
    assert transport.procs[0].killed and transport.procs[1].killed
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "node-0.log").read_text() == "x\n"
    assert not (run_dir / "summary.json").exists()


def test_a_failure_on_node_1_shows_its_last_lines_and_ends_the_others_at_once(
    tmp_path: Path,
) -> None:
    """Without --all-logs node 1's output is not streamed: its own error is still shown.
    The others get a short grace and are ended in parallel, each said with its signal."""
    plan: dict[int, tuple[list[str], int | None]] = {
        0: (["step 1"], None),
        1: ([f"line {n}" for n in range(30)] + ["Killed"], 137),
        2: ([], None),
        3: ([], None),
    }
    transport = FakeTransport(plan, {})
    original_start = transport.start
    # node 0, 2 and 3 are ended together: their kills meet at one barrier (as each blocks
    # part of its grace) only if they run at once, whatever the machine's speed.
    barrier = threading.Barrier(3)

    def start(node: int, *args: object, **kwargs: object) -> FakeProcess:
        proc = original_start(node, *args, **kwargs)  # type: ignore[arg-type]
        proc.kill_takes = 0.5  # each node uses part of its grace
        if node != 1:
            proc.kill_barrier = barrier
        return proc

    transport.start = start  # type: ignore[method-assign]
    lines: list[str] = []
    report = run(transport, tmp_path, lines, args=[])

    assert report.first_failure == 1
    assert (
        "[skyinfra] node-1 failed first: exit 137 (a worker was killed by signal SIGKILL); "
        "ending node-0, node-2, node-3 (SIGTERM, SIGKILL after 3 s)"
    ) in lines
    tail = lines[lines.index("[skyinfra] last 20 line(s) of node-1:") + 1 :][:20]
    assert tail == [f"[node-1] line {n}" for n in range(11, 30)] + ["[node-1] Killed"]
    assert all(transport.procs[i].kill_grace == 3.0 for i in (0, 2, 3))
    # all at once, not one grace period after another
    assert not any(transport.procs[i].killed_alone for i in (0, 2, 3))
    assert report.outcomes[0].ended_by_us
    assert "ended by skyinfra after node-1 failed (exit -15" in describe_exit(report.outcomes[0])
    assert "[node-0] step 1" in lines


def test_a_node_that_succeeds_while_another_fails_is_not_reported_as_ended(
    tmp_path: Path,
) -> None:
    """Node 0 still runs when node 1 fails, then finishes its work with exit 0 during the
    grace period: its success is reported as such, not as "ended by skyinfra"."""

    class FinishesAnyway(FakeProcess):
        def kill(self, grace_s: float = 10.0) -> None:
            self.kill_grace = grace_s
            self.ended.set()  # not killed: it ended by itself, with its own code

        def wait(self, timeout: float | None = None) -> int:
            self.ended.wait(timeout)
            return 0

    transport = FakeTransport({0: (["working"], None), 1: (["boom"], 1)}, {})
    original_start = transport.start

    def start(node: int, *args: object, **kwargs: object) -> FakeProcess:
        proc = original_start(node, *args, **kwargs)  # type: ignore[arg-type]
        if node == 0:
            proc = FinishesAnyway(0, ["working"], None)
            transport.procs[0] = proc
        return proc

    transport.start = start  # type: ignore[method-assign]
    report = run(transport, tmp_path, [], args=[])
    assert report.first_failure == 1
    assert transport.procs[0].kill_grace == 3.0  # it was asked to end ...
    assert report.outcomes[0].exit_code == 0  # ... and finished on its own
    assert not report.outcomes[0].ended_by_us
    assert describe_exit(report.outcomes[0]) == "ok (exit 0)"


def test_a_node_counts_as_ended_when_its_process_does_not_when_its_output_closes(
    tmp_path: Path,
) -> None:
    """A launcher killed by a signal can leave a child holding its output open: the node's
    exit decides, the others are ended at once, and the run does not wait for the stream."""

    class HeldOpen(FakeProcess):
        def lines(self) -> Iterator[str]:
            yield "worker still holds the pipe"
            time.sleep(30)  # the stream never closes within the test

        def poll(self) -> int | None:
            return -9

        def wait(self, timeout: float | None = None) -> int:
            return -9

    transport = FakeTransport({0: (["x"], None), 1: ([], -9)}, {})
    original_start = transport.start

    def start(node: int, *args: object, **kwargs: object) -> FakeProcess:
        proc = original_start(node, *args, **kwargs)  # type: ignore[arg-type]
        if node == 1:
            proc = HeldOpen(1, [], -9)
            transport.procs[1] = proc
        return proc

    transport.start = start  # type: ignore[method-assign]
    lines: list[str] = []
    began = time.monotonic()
    report = run(transport, tmp_path, lines, args=[])
    assert time.monotonic() - began < 5
    assert report.first_failure == 1
    assert any("node-1 failed first: exit -9 (killed by signal SIGKILL)" in line for line in lines)
    assert transport.procs[0].killed


def test_timeout_ends_every_node_and_names_those_still_running(tmp_path: Path) -> None:
    transport = FakeTransport({0: (["a"], None), 1: (["b", "stuck here"], None), 2: ([], 0)}, {})
    lines: list[str] = []
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text("def main():\n    pass\n")
    report = run_on_cluster(
        JobLaunch(
            entry="train.py:main",
            src=src,
            timeout_s=0.5,
        ),
        ClusterNodes(transport, local_topology(3), tmp_path / "topology.json", tmp_path / "runs"),
        echo=lines.append,
    )
    assert report.timed_out == [0, 1]
    assert report.exit_code == exitcodes.RUN_TIMEOUT == 6
    assert (
        "[skyinfra] --timeout 0.5 s passed; still running: node-0, node-1; "
        "ending them (SIGTERM, SIGKILL after 3 s)"
    ) in lines
    assert "[node-1] stuck here" in lines  # the hung node's last lines, not streamed before
    assert transport.procs[0].kill_grace == transport.procs[1].kill_grace == 3.0
    assert not transport.procs[2].killed
    assert "at --timeout 0.5 s" in describe_exit(report.outcomes[1])
    with pytest.raises(RunTimeoutError) as caught:
        raise_for_failure(report)
    assert caught.value.exit_code == 6 and caught.value.still_running == [0, 1]
    assert "timed out after 0.5 s" in str(caught.value) and "node-0, node-1" in str(caught.value)
    summary = json.loads((report.run_dir / "summary.json").read_text())
    assert (summary["exit_code"], summary["timed_out"], summary["timeout_s"]) == (6, [0, 1], 0.5)


BAD_ENTRIES = [
    ("missing.py:main", "no file 'missing.py'"),
    ("train.py:mian", "train.py defines no 'mian' at top level (its functions: helper, main)"),
    ("pkg.nothere:main", "module 'pkg.nothere' is not in the project"),
    ("pkg.mod:absent", "pkg/mod.py defines no 'absent'"),
    ("secret/.env.py:main", "'secret/.env.py' is left out of the copy"),
    ("data/run.py:main", "'data' is left out of the copy"),
    ("asyncy.py:main", "is `async def`"),
    ("pkg.mod", "names a module without a function"),
    ("train.py:not-a-name", "is malformed"),
    ("pkg/:main", "is not a module name"),
    ("nsdir.sub:main", "nsdir/sub/ in"),
    ("-m pkg", "pkg/ is a package without __main__.py"),
    ("-m pkg.nothere", "module 'pkg.nothere' is not in the project"),
    ("-m pkg-x", "is not a module name"),
    # Compiled here (never imported), so a syntax error names its file and line at once
    # instead of failing on every node after the copy.
    ("broken.py:main", "broken.py line 1: invalid syntax"),
    ("broken.py", "broken.py line 1"),
    ("pkg.broken:main", "pkg/broken.py line 4: unindent does not match"),
    ("-m pkg.broken", "pkg/broken.py line 4"),
    ("toplevel_return.py", "toplevel_return.py line 3: 'return' outside function"),
]


def project(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "mod.py").write_text("import os\n\n\ndef main():\n    return os.getcwd()\n")
    (src / "train.py").write_text("def helper():\n    pass\n\n\ndef main():\n    pass\n")
    (src / "asyncy.py").write_text("async def main():\n    pass\n")
    (src / "secret").mkdir()
    (src / "secret" / ".env.py").write_text("def main():\n    pass\n")
    (src / "data").mkdir()
    (src / "data" / "run.py").write_text("def main():\n    pass\n")
    (src / ".skyinfraignore").write_text("data/\n")
    (src / "nsdir" / "sub").mkdir(parents=True)
    (src / "broken.py").write_text("def main(:\n")
    (src / "pkg" / "broken.py").write_text("x = 1\ndef main():\n        return 1\n    oops\n")
    # ast.parse takes this; only compiling finds it.
    (src / "toplevel_return.py").write_text("def main():\n    pass\nreturn 1\n")
    return src


@pytest.mark.parametrize(("entry", "message"), BAD_ENTRIES)
def test_a_bad_entry_is_refused_before_anything_is_copied_or_started(
    tmp_path: Path, entry: str, message: str
) -> None:
    src = project(tmp_path)
    transport = FakeTransport({0: ([], 0), 1: ([], 0)}, {})
    with pytest.raises(UsageError) as caught:
        run_on_cluster(
            JobLaunch(
                entry=entry,
                src=src,
            ),
            ClusterNodes(
                transport, local_topology(2), tmp_path / "topology.json", tmp_path / "runs"
            ),
            echo=lambda line: None,
        )
    assert caught.value.exit_code == exitcodes.USAGE == 2
    assert message in str(caught.value)
    assert transport.calls == []  # not even asked whether the nodes are ready
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("entry", "note"),
    [
        ("pkg.mod:main", None),
        ("pkg:main_from_init", None),
        ("train.py", None),
        ("-m pkg.mod", None),  # `python -m`
        ("star.py:anything", None),  # `from x import *`: cannot be known here
        ("guarded.py:main", None),  # defined under `if`/`try`
        ("numpy.linalg:norm", "is not in"),  # installed on the nodes, presumably
        ("effects.py", None),  # compiled, not run: its side effect does not happen here
    ],
)
def test_entries_that_can_run_pass_the_check(tmp_path: Path, entry: str, note: str | None) -> None:
    src = project(tmp_path)
    (src / "pkg" / "__init__.py").write_text("from .mod import main as main_from_init\n")
    (src / "star.py").write_text("from os.path import *\n")
    (src / "guarded.py").write_text(
        "try:\n    import fast\nexcept ImportError:\n    if True:\n"
        "        def main():\n            pass\n"
    )
    (src / "effects.py").write_text("open('ran-here', 'w').close()\n")
    notes = check_entry(src, entry, make_ignore(read_ignore_patterns(src)))
    assert not (src / "ran-here").exists() and not Path("ran-here").exists()
    if note is None:
        assert notes == []
    else:
        (only,) = notes
        assert note in only


def test_run_ids_sort_in_start_order_within_one_second() -> None:
    """Pruning keeps the newest runs by id, and so do people reading runs/: ids made within
    the same second still sort by when they were made (the random part comes last)."""
    ids = [new_run_id() for _ in range(50)]
    assert sorted(ids) == ids
    assert len(set(ids)) == len(ids)
    assert all(RUN_ID_RE.match(run_id) for run_id in ids)


def test_a_dash_m_entry_reaches_the_launcher_as_two_arguments(tmp_path: Path) -> None:
    from skyinfra.run.nodes import NodeDirs, _launch_argv

    dirs = NodeDirs(str(tmp_path), "run-1")
    argv = _launch_argv(dirs, 0, "-m pkg.train", ["--epochs", "3"])
    assert argv[-5:] == ["-m", "pkg.train", "--", "--epochs", "3"]
    assert _launch_argv(dirs, 0, "train.py", [])[-1] == "train.py"


def test_a_project_file_that_cannot_be_read_stops_the_run_before_anything_is_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import skyinfra.transport.tree as tree

    def unreadable(path: Path) -> str:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(tree, "_sha256", unreadable)
    transport = FakeTransport({0: ([], 0)}, {})
    with pytest.raises(UsageError, match=r"cannot read .*train\.py to copy it to the nodes"):
        run(transport, tmp_path, [])
    assert not [c for c in transport.calls if c[0] in ("copy_tree", "start")]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("world", "queued", "agents"),
    [
        ((3,), False, [0, 3]),  # started at once on node 3: node 0 holds its supervisor
        ((0,), False, [0]),  # a one-node job on the head: one agent, not eight
        ((5, 2), False, [0, 2, 5]),  # named nodes in rank order: agents in node order
        ((), True, list(range(8))),  # queued: it starts on whichever nodes free first
        ((), False, list(range(8))),  # no world said (an older head): every node, as before
    ],
)
def test_a_job_gets_agents_on_its_world_alone_unless_it_waits_in_the_queue(
    world: tuple[int, ...], queued: bool, agents: list[int]
) -> None:
    from skyinfra.run.jobstart import agent_nodes

    assert agent_nodes(range(8), world, queued) == agents
