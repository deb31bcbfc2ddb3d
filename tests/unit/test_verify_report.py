"""`skyinfra verify`'s pure parts: the table and JSON (golden files), the verdict, which
network NCCL said it uses, and the collective's topology."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from skyinfra_runtime.topology import PluginRef

from skyinfra.verify.collective import collective_topology, nccl_network
from skyinfra.verify.report import CheckResult, VerifyReport, render_table, to_json, verdict
from tests.support.topologies import local_topology

GOLDEN = Path(__file__).parent / "golden" / "verify"


def sample() -> VerifyReport:
    nodes = ("node-0", "node-1")
    report = VerifyReport("demo", nodes)
    for check in ("runtime", "python", "framework torch"):
        report.results += [CheckResult(check, i, "pass") for i in (0, 1)]
    report.results += [
        CheckResult("ports free on head", 0, "pass"),
        CheckResult("ports free on head", 1, "n/a", "n/a: the ports are the head's"),
        CheckResult("collective", 0, "fail", "missing: node 1; ended without a result"),
        CheckResult(
            "collective",
            1,
            "fail",
            "could not start the runtime's launcher: node 1: cannot start /x/bin/skyinfra-runtime",
        ),
        CheckResult("nccl network", 0, "pass", "Socket"),
        CheckResult("nccl network", 1, "n/a", "n/a: no accelerator on this node"),
    ]
    return report


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("SKYINFRA_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_table_golden() -> None:
    golden("table.txt", render_table(sample()))


def test_json_golden() -> None:
    golden("report.json", json.dumps(to_json(sample()), indent=2) + "\n")


def test_verdicts() -> None:
    report = sample()
    assert verdict(report) == (
        "verify: FAILED: 2 failure(s) on 'demo': collective on node-0, collective on node-1"
    )
    report.results = [r for r in report.results if r.status != "fail"]
    assert verdict(report) == "verify: OK: 8 passed, 2 not applicable, on 2 node(s) of 'demo'"
    assert report.ok
    empty = VerifyReport("demo", ("node-0",))
    assert not empty.ok and "no check ran" in verdict(empty)


@pytest.mark.parametrize(
    ("lines", "network"),
    [
        (["ip-10-0-0-5:77:77 [0] NCCL INFO Using network Socket"], "Socket"),
        (
            [
                "algo-1:18566:18639 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.11.0-aws",
                "algo-1:18566:18639 [0] NCCL INFO NET/OFI Setting provider_filter to efa",
                "algo-1:18566:18639 [0] NCCL INFO Using network AWS Libfabric",
            ],
            "AWS Libfabric (aws-ofi-nccl 1.11.0-aws)",
        ),
        (
            [  # the plugin failed to initialize: NCCL fell back to TCP sockets
                "w-0:21:570 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.9.1-aws",
                "w-0:21:570 [0] nccl_net_ofi_create_plugin:257 NCCL WARN NET/OFI aws-ofi-nccl "
                "initialization failed",
                "w-0:21:570 [0] NCCL INFO NET/Socket : Using [0]eth0:192.168.29.226<0>",
                "w-0:21:570 [0] NCCL INFO Using network Socket",
            ],
            "Socket (aws-ofi-nccl 1.9.1-aws)",
        ),
        (["skyinfra-verify-collective {}"], None),
    ],
)
def test_nccl_network_from_its_debug_lines(lines: list[str], network: str | None) -> None:
    assert nccl_network(lines) == network


def test_collective_uses_only_jax_and_torch_with_a_short_timeout() -> None:
    base = local_topology(2)
    assert collective_topology(base, 5) is None
    plugins = (PluginRef("jax"), PluginRef("keras", {"backend": "jax"}), PluginRef("torch"))
    with_plugins = type(base)(**{**base.__dict__, "plugins": plugins})
    inline = collective_topology(with_plugins, 5)
    assert inline is not None
    assert inline["plugins"] == [
        {"name": "jax", "options": {"init_timeout": 5}},
        {"name": "torch", "options": {"init_timeout": 5}},
    ]
