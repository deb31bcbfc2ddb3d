"""The ssh target's checkpoint listing and delete, their pure part: one entry per set over
the hosts' folders and the store's prefix, and what a delete says (a host that did not answer
named with what is left there). The SSH and S3 calls are proven in tests/e2e/ssh."""

from __future__ import annotations

from pathlib import Path

import pytest
from skyinfra_runtime.s3 import StoredObject

from skyinfra.errors import SkyinfraError
from skyinfra.targets.ssh.checkpoint_sets import (
    Copy,
    Found,
    HostFolder,
    deleted_words,
    folders,
    merge,
    store_copies,
    where_words,
)
from skyinfra.targets.ssh.checkpoint_store import SshCheckpointStore
from skyinfra.targets.ssh.hosts import write_hosts
from skyinfra.targets.ssh.spares import LostHost
from skyinfra.workspace import Workspace

STORE = SshCheckpointStore("s3://lab-ck/team", endpoint="http://10.9.0.1:9000")


def test_a_set_on_two_hosts_and_in_the_store_is_one_entry_with_its_nodes() -> None:
    objects = [
        StoredObject("team/ck/nodes/node-0/manifest.json", 100, "2026-11-27T16:00:05.000Z"),
        StoredObject("team/ck/nodes/node-0/objects/ab", 900, "2026-11-27T16:00:04.000Z"),
        StoredObject("team/stray.txt", 5, None),  # beside the sets: not one
        StoredObject("team/old/nodes/node-1/manifest.json", 7, "2026-11-01T00:00:00Z"),
    ]
    copies = [
        Copy("ck", 1, "node-1 h1:/home/u/.skyinfra/lab/node-1/checkpoints/ck", 10, 1, 1.0e9),
        Copy("ck", 0, "node-0 h0:/home/u/.skyinfra/lab/node-0/checkpoints/ck", 1000, 3, 2.0e9),
        *store_copies(STORE, objects),
    ]
    sets = {s.name: s for s in merge(copies, {"ck": ["job-1", "job-2"]})}
    assert sorted(sets) == ["ck", "old"]
    ck = sets["ck"].to_dict()
    assert ck == {
        "name": "ck",
        "places": "node-0 h0:/home/u/.skyinfra/lab/node-0/checkpoints/ck; "
        "node-1 h1:/home/u/.skyinfra/lab/node-1/checkpoints/ck; s3://lab-ck/team/ck",
        "size_bytes": 2010,
        "files": 6,
        "modified": "2033-05-18T03:33:20+00:00",  # node 0's newest file, after the store's
        "jobs": ["job-1", "job-2"],
        "nodes": [0, 1],
    }
    assert sets["ck"].item_unit == "file or object"
    # Only in the store (the hosts' folders went with `down`): no node holds it.
    old = sets["old"]
    assert (old.nodes, old.item_unit, old.modified) == ((), "object", "2026-11-01T00:00:00+00:00")


def test_a_delete_says_where_it_removed_the_set() -> None:
    said = deleted_words("ck", ["node-0 (h0)", "node-1 (h1)"], {}, 4, STORE.url)
    assert said == (
        ": from the folders of node-0 (h0), node-1 (h1) and 4 object(s) under s3://lab-ck/team/ck/"
    )
    assert deleted_words("ck", ["node-0 (h0)"], {}, None, None) == (
        ": from the folders of node-0 (h0)"
    )


def test_a_host_that_did_not_answer_is_named_with_what_is_left_there() -> None:
    left = {"host h1": "not reachable (timed out); left there: /home/u/.skyinfra/lab/node-1/"
                       "checkpoints/ck if it holds the set"}  # fmt: skip
    with pytest.raises(SkyinfraError) as err:
        deleted_words("ck", ["node-0 (h0)"], left, 4, STORE.url)
    said = str(err.value)
    assert err.value.exit_code == 1
    done = "deleted from the folders of node-0 (h0) and 4 object(s) under s3://lab-ck/team/ck/"
    assert done in said
    assert "host h1: not reachable (timed out); left there: /home/u/.skyinfra/lab/node-1/" in said
    assert "`skyinfra checkpoints delete ck` again once the host answers" in said


LOST = HostFolder.of_lost(LostHost(1, "h1", "h2", "/home/u/.skyinfra/lab/node-1"), 0)


def test_a_set_a_lost_host_kept_is_listed_there_and_held_by_no_node() -> None:
    """Host h1 was node 1 until spare h2 replaced it; its node's folder is still there."""
    copies = [
        Copy("ck", None, LOST.place("ck"), 10, 2, 1.0e9, on_lost_host=True),
        Copy("ck", 0, "node-0 h0:/home/u/.skyinfra/lab/node-0/checkpoints/ck", 1000, 3, 2.0e9),
        Copy("ck", None, "s3://lab-ck/team/ck", 5, 1, None),
        Copy("only-there", None, LOST.place("only-there"), 7, 1, 1.0e9, on_lost_host=True),
    ]
    sets = {s.name: s for s in merge(copies, {})}
    ck = sets["ck"]
    assert ck.place == (
        "node-0 h0:/home/u/.skyinfra/lab/node-0/checkpoints/ck; "
        "lost host h1 (node-1 until spare h2 replaced it): "
        "h1:/home/u/.skyinfra/lab/node-1/checkpoints/ck; s3://lab-ck/team/ck"
    )
    assert (ck.nodes, ck.item_unit, ck.size_bytes, ck.items) == ((0,), "file or object", 1015, 6)
    there = sets["only-there"]
    assert (there.nodes, there.item_unit) == ((), "file")  # a file on a host, not an object


def test_a_lost_host_that_did_not_answer_is_named_as_lost() -> None:
    found = Found([], {LOST.label: "not reachable (timed out)", "host h0": "not reachable (x)"})
    words = where_words(Workspace(Path("/w/lab")), None, found)
    assert words == (
        "in each node's folder ~/.skyinfra/lab/node-<i>/checkpoints "
        "(host h0: its sets not listed: not reachable (x)) "
        "(lost host h1 (node-1 until spare h2 replaced it): its sets not listed: "
        "not reachable (timed out))"
    )
    with pytest.raises(SkyinfraError) as err:
        deleted_words("ck", ["node-0 (h0)"], {LOST.label: "not reachable; left there: X"}, None,
                      None)  # fmt: skip
    assert "lost host h1 (node-1 until spare h2 replaced it): not reachable; left there: X" in (
        str(err.value)
    )


def test_the_folders_asked_are_the_nodes_then_the_lost_hosts_not_one_enrolled_again(
    tmp_path: Path,
) -> None:
    ws = Workspace(tmp_path / "lab")
    ws.path.mkdir()
    assert folders(ws) == []  # down: hosts.json gone, nothing to ask
    nodes = [
        {"index": 0, "host": "h0", "node_dir": "/home/u/.skyinfra/lab/node-0"},
        {"index": 1, "host": "h2", "node_dir": "/home/u/.skyinfra/lab/node-1"},
    ]
    lost = [
        LostHost(1, "h1", "h2", "/home/u/.skyinfra/lab/node-1"),
        # Lost once, then back as node 0's host in a later `up`: its folder is node 0's now.
        LostHost(0, "h0", "h3", "/home/u/.skyinfra/lab/node-0"),
    ]
    write_hosts(ws, nodes, lost)
    assert [(f.label, f.node, f.lost_at) for f in folders(ws)] == [
        ("host h0", 0, None),
        ("host h2", 1, None),
        ("lost host h1 (node-1 until spare h2 replaced it)", None, 0),
    ]
