"""The accelerator checks' judgement, on facts as node/probe.py reports them from a GPU node
(no GPU on the machines the suite runs on): counts that differ, EFA missing, NCCL on sockets
while EFA is on; and not applicable, never a pass, on a node without accelerators."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from skyinfra_runtime.topology import PluginRef

from skyinfra.targets.local.transport import LocalTransport
from skyinfra.topology import Accelerator
from skyinfra.verify.checks import test_accelerators as checks
from skyinfra.verify.collective import CollectiveOutcome
from skyinfra.verify.context import Expectations, VerifyContext
from tests.support.topologies import local_topology


def context(tmp_path: Path, *, efa: bool) -> VerifyContext:
    base = local_topology(2)
    gpu = Accelerator("nvidia-h100", 8)
    nodes = (dataclasses.replace(base.nodes[0], accelerator=gpu), base.nodes[1])
    topology = dataclasses.replace(base, nodes=nodes, plugins=(PluginRef("torch"),))
    dirs = {}
    for node in topology.nodes:
        dirs[node.index] = tmp_path / node.name
        dirs[node.index].mkdir()
        (dirs[node.index] / ".skyinfra-node").touch()
    expect = Expectations(runtime_version="0.1.0", frameworks=(("torch", None),), efa=efa)
    return VerifyContext(LocalTransport(dirs), topology, expect)


def gpu_facts(**gpu: Any) -> dict[str, Any]:
    found = {"driver_count": 8, "frameworks": {"torch": 8}, "efa_devices": ["rdmap16s27"]}
    return {"gpu": {**found, **gpu}}


def test_gpu_counts_must_match_the_topology(tmp_path: Path) -> None:
    cluster = context(tmp_path, efa=True)
    checks.test_gpus_visible(cluster, 0, gpu_facts())
    with pytest.raises(AssertionError, match="nvidia-smi lists 7 GPU"):
        checks.test_gpus_visible(cluster, 0, gpu_facts(driver_count=7))
    with pytest.raises(AssertionError, match=r"torch sees 0 GPU\(s\), the topology says 8"):
        checks.test_gpus_visible(cluster, 0, gpu_facts(frameworks={"torch": 0}))


def test_efa_on_needs_efa_devices(tmp_path: Path) -> None:
    cluster = context(tmp_path, efa=True)
    checks.test_efa(cluster, 0, gpu_facts())
    with pytest.raises(AssertionError, match="no EFA device"):
        checks.test_efa(cluster, 0, gpu_facts(efa_devices=[]))


def test_nccl_on_sockets_fails_when_efa_is_on(tmp_path: Path) -> None:
    cluster = context(tmp_path, efa=True)
    details: dict[str, object] = {}
    cluster._collective = {
        0: CollectiveOutcome(0, ok=True, lines=["h:1:1 [0] NCCL INFO Using network AWS Libfabric"]),
        1: CollectiveOutcome(1, ok=True),
    }
    checks.test_nccl_network(cluster, 0, details.__setitem__)
    assert details == {"detail": "AWS Libfabric"}
    cluster._collective[0] = CollectiveOutcome(
        0, ok=True, lines=["h:1:1 [0] NCCL INFO Using network Socket"]
    )
    with pytest.raises(AssertionError, match="NCCL uses Socket, not EFA"):
        checks.test_nccl_network(cluster, 0, details.__setitem__)


def test_gpu_checks_do_not_apply_to_a_node_without_accelerators(tmp_path: Path) -> None:
    cluster = context(tmp_path, efa=True)
    with pytest.raises(pytest.skip.Exception, match="n/a: no accelerator"):
        checks.test_gpus_visible(cluster, 1, gpu_facts())
    with pytest.raises(pytest.skip.Exception, match="n/a: no accelerator"):
        checks.test_idle_timer(cluster, 1, cluster.hosts[1])
