"""`skyinfra status` reads each answering node's facts (its Spot interruption notice, its
waiting standby workers) through the node's transport: the node's runtime
(`skyinfra-runtime node-facts`, a real process here) answers with the ``interruption.json``
its watcher or IMDS stand-in wrote; and how `status` and `jobs JOB` say standbys in words."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from skyinfra.lifecycle.cluster_status import _node_facts
from skyinfra.spec import validate_spec
from skyinfra.workspace import Workspace
from tests.support.topologies import local_topology


def test_status_reads_the_notice_of_each_answering_node(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "c")
    for i in range(3):
        node = ws.nodes_dir / f"node-{i}"
        (node / "venv" / "bin").mkdir(parents=True)
        (node / ".skyinfra-node").touch()
        # The node's runtime: this environment's.
        runtime = Path(sys.executable).parent / "skyinfra-runtime"
        (node / "venv" / "bin" / "skyinfra-runtime").symlink_to(runtime)
    notice = {"action": "terminate", "time": 1795508520.0, "noticed_at": 1795508400.0}
    (ws.nodes_dir / "node-1" / "interruption.json").write_text(json.dumps(notice))
    (ws.nodes_dir / "node-2" / "interruption.json").write_text("not json")
    spec = validate_spec({"name": "c", "nodes": 3})
    found = _node_facts(ws, spec, local_topology(3), [0, 1, 2])
    # Node 0 has none; node 2's is unreadable, so none either; no node has standbys.
    assert {i: f.interrupted for i, f in found.items()} == {0: None, 1: notice, 2: None}
    assert all(f.standbys == () for f in found.values())
    assert list(_node_facts(ws, spec, local_topology(3), [0])) == [0]


def test_status_and_jobs_say_in_words_what_standbys_hold_and_how_workers_started() -> None:
    from skyinfra_runtime.jobrecord import WorkerStart

    from skyinfra.cli.cluster import standby_words
    from skyinfra.cli.jobs_shown import start_words

    waiting = [
        {"slot": 0, "pid": 41, "rss_bytes": 300 << 20},
        {"slot": 1, "pid": 42, "rss_bytes": 0},
    ]
    assert standby_words(waiting) == "standby workers: 2 waiting, 300 MiB resident (pids 41, 42)"
    started = (WorkerStart(0, True, waited_s=61.7), WorkerStart(1, False, reason="no standby"))
    assert start_words(started) == (
        "; worker 0 warm (its standby waited 62 s), worker 1 cold (no standby)"
    )
    importing = WorkerStart(0, True, waited_s=0.0, imports_s=1.26)
    assert start_words((importing,)) == (
        "; worker 0 warm (its standby was still importing: 1.3 s more)"
    )
    assert start_words(()) == ""  # a record from before, or a launcher that has not said yet
