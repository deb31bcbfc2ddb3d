"""The ssh target's GPUs (issue 45): counted at first contact from `nvidia-smi -L` as the AWS
node check counts them, carried in the topology, and turned into worker processes by the
runtime's own rules, as on AWS (one per GPU for torch by default and for "auto"; one process on
a host without GPU). Pure functions only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from skyinfra_runtime.devices import node_gpus, torch_procs
from skyinfra_runtime.launcher import resolve_procs
from skyinfra_runtime.topology import Topology

from skyinfra.review.summary import shape
from skyinfra.spec import ClusterSpec, validate_spec
from skyinfra.targets.ssh import enrol
from skyinfra.targets.ssh.contact import HostFacts, gpus_from_listing, python_found
from skyinfra.targets.ssh.spec import SshSpec
from skyinfra.topology import Accelerator

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKycekKHho4R9yi/oQm2k19DShMSWzssNkyCaC1HJtGc"
H100_X2 = """\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5f1d2c3b-aaaa-bbbb-cccc-000000000000)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-5f1d2c3b-aaaa-bbbb-cccc-000000000001)
"""


@pytest.mark.parametrize(
    ("listing", "expected"),
    [
        ("", None),  # no nvidia-smi on the host: the probe prints nothing
        (H100_X2, Accelerator("H100 80GB HBM3", 2)),
        ("GPU 0: Tesla T4\n", Accelerator("Tesla T4", 1)),  # an older driver: no UUID
        # A driver that does not answer: nvidia-smi's complaint lists no GPU.
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
            None,
        ),
        (
            "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\nGPU 1: NVIDIA L4 (UUID: GPU-2)\n",
            Accelerator("A100-SXM4-80GB / L4", 2),
        ),
    ],
)
def test_gpus_are_counted_from_nvidia_smi_as_the_aws_node_check_counts_them(
    listing: str, expected: Accelerator | None
) -> None:
    assert gpus_from_listing(listing) == expected


def facts(gpus: int) -> list[HostFacts]:
    accelerator = Accelerator("H100 80GB HBM3", gpus) if gpus else None
    return [
        HostFacts(0, "10.0.0.5", "/home/ml", "3.11", KEY, accelerator),
        HostFacts(1, "10.0.0.6", "/home/ml", "3.11", KEY),
    ]


def cluster_spec(tmp_path: Path) -> ClusterSpec:
    key = tmp_path / "id"
    key.write_text("a private key\n")
    return validate_spec(
        {"name": "lab", "provider": "ssh", "nodes": 2,
         "ssh": {"hosts": ["10.0.0.5", "10.0.0.6"], "user": "ml", "key": str(key)}}
    )  # fmt: skip


def test_the_topology_carries_each_hosts_gpus_and_the_runtime_decides_the_processes(
    tmp_path: Path,
) -> None:
    spec = cluster_spec(tmp_path)
    topology = Topology.from_dict(json.loads(enrol.enrol_topology(spec, facts(4))))
    gpu_host, bare_host = topology.nodes
    assert gpu_host.accelerator == Accelerator("H100 80GB HBM3", 4)
    assert bare_host.accelerator is None
    # As on AWS: "auto" and torch's default are one process per GPU; no GPU, one process.
    no_devices = tmp_path / "dev"
    no_devices.mkdir()
    procs = []
    for node in topology.nodes:
        count = node.accelerator.count if node.accelerator else 0
        gpus = node_gpus(count, "ssh", dev=no_devices, env={})
        auto, default = resolve_procs("auto", topology, node.index), resolve_procs(1, topology, 0)
        procs.append((auto, torch_procs(default, gpus, chosen=False), default))
    assert procs == [(4, 4, 1), (1, 1, 1)]


def test_up_and_the_plan_say_each_hosts_gpus(tmp_path: Path) -> None:
    spec = cluster_spec(tmp_path)
    lines = enrol.host_lines(spec.section_as(SshSpec), facts(2), "lab")
    assert lines[0].endswith("; 2 x H100 80GB HBM3 GPU(s))")
    assert lines[1].endswith("; no GPU)")
    ctx = enrol.context(spec, facts(2), wheel_path=tmp_path / "w.whl", wheel_sha256="a" * 64,
                        uv_path="/bin/true")  # fmt: skip
    assert [(h["gpus"], h["gpu_type"]) for h in ctx["hosts"].values()] == [
        (2, "H100 80GB HBM3"), (0, "")
    ]  # fmt: skip

    # plan.md's "GPUs per node" row reads the plan's node outputs (known at plan time).
    def plan(*accelerators: object) -> dict[str, object]:
        nodes = {f"node-{i}": {"accelerator": a} for i, a in enumerate(accelerators)}
        return {
            "resource_changes": [
                {"address": f'module.nodes.terraform_data.node["node-{i}"]',
                 "type": "terraform_data", "change": {"actions": ["create"], "after": {}}}
                for i in range(len(accelerators))
            ],
            "output_changes": {"nodes": {"after": nodes}},
        }  # fmt: skip

    assert shape(plan(None, None), "after", target="ssh").gpus_per_node == "0"
    mixed = plan({"type": "H100 80GB HBM3", "count": 2}, None)
    assert shape(mixed, "after", target="ssh").gpus_per_node == "0 / 2 x H100 80GB HBM3"


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("3.12", None),
        ("3.10", None),
        ("4.0", None),
        ("3.8", "Python 3.8"),
        ("none", "none on PATH"),
        # A wrapper or banner printed where the version belongs: named, never a traceback.
        ("Welcome to lab-3", "no Python version but 'Welcome to lab-3'"),
        ("3.11.2", "no Python version but '3.11.2'"),
    ],
)
def test_the_probes_python_line_is_read_or_named(line: str, found: str | None) -> None:
    assert python_found(line) == found
