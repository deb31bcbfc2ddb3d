"""Each node's own set-up: runtime, topology, Python and frameworks, disk."""

from __future__ import annotations

from collections import Counter
from typing import Any

from skyinfra.verify.context import VerifyContext


def _reference(values: dict[int, str], head: int) -> str:
    """The value most nodes have (the head's on a tie): a node that differs is the odd one."""
    counts = Counter(values.values())
    best = max(counts.values())
    tied = [v for v, c in counts.items() if c == best]
    return values[head] if values.get(head) in tied else tied[0]


def _skew(cluster: VerifyContext, node: int, read: Any, what: str) -> None:
    """Fail when this node's value differs from the other nodes' (a skew is a failure)."""
    values: dict[int, str] = {}
    for other in cluster.topology.nodes:
        facts = cluster.facts(other.index)
        value = None if "error" in facts else read(facts)
        if value is not None:
            values[other.index] = value
    if node not in values or len(values) < 2:
        return
    expected = _reference(values, cluster.head)
    if values[node] != expected:
        others = sorted(
            {f"{v} on {cluster.node(i).name}" for i, v in values.items() if v != values[node]}
        )
        raise AssertionError(
            f"{what} {values[node]} here, but {', '.join(others)}: versions must match on "
            "every node"
        )


def test_ready(cluster: VerifyContext, node: int) -> None:
    """The node's bootstrap finished (what `run` waits for: on AWS, cloud-init's provision)."""
    readiness = cluster.transport.readiness(node)
    assert readiness.ready, f"the node is {readiness.state}: {readiness.detail}"


def test_runtime(cluster: VerifyContext, node: int, facts: dict[str, Any]) -> None:
    runtime = facts["runtime"]
    assert runtime["launcher_exists"], (
        f"the runtime is not installed in the node's environment: {runtime['launcher']} is "
        "missing (`skyinfra up` reinstalls it)"
    )
    assert "error" not in runtime, f"skyinfra_runtime does not import: {runtime.get('error')}"
    version = runtime.get("dist_version") or runtime.get("version")
    expected = cluster.expect.runtime_version
    assert version == expected, (
        f"skyinfra-runtime {version} on the node, {expected} on the operator "
        "(`skyinfra up` installs the operator's)"
    )


def test_topology(cluster: VerifyContext, node: int, facts: dict[str, Any]) -> None:
    topo = facts["topology"]
    assert topo["present"], f"no topology at {topo['path']}"
    assert "error" not in topo, f"{topo['path']} does not read: {topo.get('error')}"
    mine = cluster.node(node)
    assert topo["index"] == node and topo["private_ip"] == mine.private_ip, (
        f"{topo['path']} names node {topo['index']} at {topo['private_ip']}; this is node "
        f"{node} at {mine.private_ip}"
    )
    assert topo["address_is_mine"], (
        f"{mine.private_ip} is not an address of this node ({topo.get('address_error')})"
    )
    expected = cluster.topology.to_dict()
    differs = sorted(k for k in expected if topo["topology"].get(k) != expected[k])
    assert not differs, (
        f"{topo['path']} differs from the operator's topology.json in {', '.join(differs)} "
        "(stale: `skyinfra run` replaces it)"
    )


def test_python(cluster: VerifyContext, node: int, facts: dict[str, Any]) -> None:
    _skew(cluster, node, lambda f: f["python"], "Python")


def test_framework(
    cluster: VerifyContext, node: int, facts: dict[str, Any], framework: str
) -> None:
    """Each plugin's framework (``framework`` is parametrized over them by the plugin)."""
    found = facts["frameworks"][framework]
    assert "error" not in found, f"{framework} does not import: {found.get('error')}"
    _skew(
        cluster,
        node,
        lambda f: (f["frameworks"].get(framework) or {}).get("version"),
        framework,
    )


def test_disk(cluster: VerifyContext, node: int, facts: dict[str, Any]) -> None:
    assert "disk_error" not in facts, f"cannot read free disk space: {facts.get('disk_error')}"
    free, need = facts["disk_free"], cluster.expect.min_free_bytes
    gib = 1024**3
    assert free >= need, (
        f"{free / gib:.1f} GiB free in {cluster.root(node)}, below {need / gib:.1f} GiB"
    )
