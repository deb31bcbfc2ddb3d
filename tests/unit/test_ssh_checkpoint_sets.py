"""The ssh target's checkpoint listing and delete, their pure part: one entry per set over
the hosts' folders and the store's prefix, and what a delete says (a host that did not answer
named with what is left there). The SSH and S3 calls are proven in tests/e2e/ssh."""

from __future__ import annotations

import pytest
from skyinfra_runtime.s3 import StoredObject

from skyinfra.errors import SkyinfraError
from skyinfra.targets.ssh.checkpoint_sets import Copy, deleted_words, merge, store_copies
from skyinfra.targets.ssh.checkpoint_store import SshCheckpointStore

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
    left = {"h1": "not reachable (timed out); left there: /home/u/.skyinfra/lab/node-1/"
                  "checkpoints/ck if it holds the set"}  # fmt: skip
    with pytest.raises(SkyinfraError) as err:
        deleted_words("ck", ["node-0 (h0)"], left, 4, STORE.url)
    said = str(err.value)
    assert err.value.exit_code == 1
    done = "deleted from the folders of node-0 (h0) and 4 object(s) under s3://lab-ck/team/ck/"
    assert done in said
    assert "host h1: not reachable (timed out); left there: /home/u/.skyinfra/lab/node-1/" in said
    assert "`skyinfra checkpoints delete ck` again once the host answers" in said
