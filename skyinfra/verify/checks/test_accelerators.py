"""On nodes with accelerators: GPUs visible to the driver and to each framework, EFA present
when on, the network NCCL chose; on AWS, the idle-shutdown timer. Not applicable elsewhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import testinfra.host

from skyinfra.verify.context import VerifyContext

IDLE_TIMER = "skyinfra-idle.timer"


def _gpu_node(cluster: VerifyContext, node: int) -> int:
    accelerator = cluster.node(node).accelerator
    if accelerator is None or accelerator.count <= 0:
        pytest.skip("n/a: no accelerator on this node")
    return accelerator.count


def test_gpus_visible(cluster: VerifyContext, node: int, facts: dict[str, Any]) -> None:
    count = _gpu_node(cluster, node)
    gpu = facts["gpu"]
    assert "driver_error" not in gpu, f"the driver: {gpu['driver_error']}"
    assert gpu["driver_count"] == count, (
        f"nvidia-smi lists {gpu['driver_count']} GPU(s); the topology says {count}"
    )
    wrong = {name: seen for name, seen in gpu["frameworks"].items() if seen != count}
    assert not wrong, "; ".join(
        f"{name} sees {seen} GPU(s), the topology says {count}" for name, seen in wrong.items()
    )


def test_efa(cluster: VerifyContext, node: int, facts: dict[str, Any]) -> None:
    _gpu_node(cluster, node)
    if not cluster.expect.efa:
        pytest.skip("n/a: EFA is off (aws.efa)")
    assert facts["gpu"]["efa_devices"], "EFA is on, but the node has no EFA device"


def test_nccl_network(
    cluster: VerifyContext, node: int, record_property: Callable[[str, object], None]
) -> None:
    _gpu_node(cluster, node)
    if "torch" not in dict(cluster.expect.frameworks):
        pytest.skip("n/a: no torch plugin (NCCL is torch's here)")
    outcome = cluster.collective()[node]
    network = outcome.nccl_network()
    assert network is not None, "NCCL did not say which network it uses (did the collective run?)"
    if cluster.expect.efa:
        # Without the aws-ofi-nccl plugin NCCL falls back to TCP sockets without an error.
        used = network.split(" (")[0]  # the network; the plugin NCCL tried is in brackets
        assert any(word in used for word in ("Libfabric", "OFI", "EFA")), (
            f"NCCL uses {network}, not EFA: the aws-ofi-nccl net plugin did not load"
        )
    record_property("detail", network)  # the table shows which one


def test_idle_timer(cluster: VerifyContext, node: int, host: testinfra.host.Host) -> None:
    _gpu_node(cluster, node)
    if not cluster.expect.idle_timer:
        pytest.skip("n/a: no idle shutdown here (aws.idle_shutdown_minutes)")
    result = host.run(f"systemctl is-active {IDLE_TIMER}")
    assert result.stdout.strip() == "active", (
        f"{IDLE_TIMER} is {result.stdout.strip() or 'not there'}: the node will not end itself "
        "when idle"
    )
