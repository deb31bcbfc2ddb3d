"""The ssh target's rendered root module through the embedded Terraform, with no host: fmt,
validate, the module's own variable checks, and what the plan says of each host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyinfra.spec import validate_spec
from skyinfra.targets.ssh import enrol
from skyinfra.targets.ssh.contact import HostFacts
from skyinfra.terraform import EmbeddedTerraform
from skyinfra.topology import Accelerator
from skyinfra.workspace import Workspace
from tests.conftest import REPO_ROOT

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKycekKHho4R9yi/oQm2k19DShMSWzssNkyCaC1HJtGc"


@pytest.fixture
def rendered(tmp_path: Path) -> Path:
    key = tmp_path / "id"
    key.write_text("a private key\n")
    wheel = tmp_path / "skyinfra_runtime-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"wheel")
    spec = validate_spec(
        {"name": "lab", "provider": "ssh", "nodes": 2,
         "ssh": {"hosts": ["10.0.0.5", "gpu-2.lab"], "user": "ml", "key": str(key),
                 "private_addresses": ["192.168.0.5", "192.168.0.6"]}}
    )  # fmt: skip
    facts = [
        HostFacts(0, "10.0.0.5", "/home/ml", "3.11", KEY),
        HostFacts(1, "gpu-2.lab", "/srv/home/ml", "3.12", KEY, Accelerator("L4", 2)),
    ]
    uv = tmp_path / "uv-binary"
    uv.write_bytes(b"uv")
    wheel, uv = enrol.payload(wheel, "a" * 64, uv, cache=tmp_path / "cache")
    ctx = enrol.context(spec, facts, wheel_path=wheel, wheel_sha256="a" * 64, uv_path=str(uv))
    ws = tmp_path / "clusters" / "lab"
    ws.mkdir(parents=True)
    Workspace(ws).write_files(enrol.files(ctx))
    return ws


def test_rendered_root_and_module_are_fmt_clean_and_validate(rendered: Path) -> None:
    engine = EmbeddedTerraform(rendered)
    assert engine.raw(["fmt", "-check", "-diff"]) == 0
    module = EmbeddedTerraform(REPO_ROOT / "infra" / "modules" / "ssh")
    assert module.raw(["fmt", "-check", "-diff", "-recursive"]) == 0
    engine.init()
    result = engine.validate()
    assert result["valid"] is True, result["diagnostics"]


def test_the_root_module_names_each_host_its_folder_and_key(rendered: Path) -> None:
    main = (rendered / "main.tf").read_text()
    assert "#   node-0: ml@10.0.0.5:22 -> /home/ml/.skyinfra/lab/node-0" in main
    assert "#   node-1: ml@gpu-2.lab:22 -> /srv/home/ml/.skyinfra/lab/node-1" in main
    hosts = json.loads((rendered / "terraform.tfvars.json").read_text())["hosts"]
    assert hosts["node-1"] == {
        "index": 1, "host": "gpu-2.lab", "private_address": "192.168.0.6",
        "node_dir": "/srv/home/ml/.skyinfra/lab/node-1", "host_key": KEY,
        "gpus": 2, "gpu_type": "L4",
    }  # fmt: skip
    staged = rendered / "scripts" / "hosts" / "node-1" / ".skyinfra" / "lab" / "node-1" / ".enrol"
    assert sorted(p.name for p in staged.iterdir()) == [
        "bootstrap-node.sh", "check-node.py", "enrol.sh", "topology.json"
    ]  # fmt: skip
    topology = json.loads((staged / "topology.json").read_text())
    assert topology["head_addr"] == "192.168.0.5" and topology["provider"] == "ssh"
    # The node check at enrolment holds the frameworks to the GPUs first contact counted; the
    # node's stage names no other node (a spare standing in for one replaces only that one).
    assert [n["accelerator"] for n in topology["nodes"]] == [{"type": "L4", "count": 2}]


def test_the_module_refuses_a_host_without_a_pinned_key(rendered: Path) -> None:
    engine = EmbeddedTerraform(rendered)
    engine.init()
    # As rendered it plans, and the node outputs carry each host's GPUs (plan.md's row).
    assert engine.raw(["plan", "-input=false", "-no-color", "-out=gpus.tfplan"]) == 0
    nodes = engine.show_plan("gpus.tfplan")["output_changes"]["nodes"]["after"]
    assert [nodes[n]["accelerator"] for n in ("node-0", "node-1")] == [
        None, {"type": "L4", "count": 2}
    ]  # fmt: skip
    # Two uploads per host (each an SSH connection): the stage tree, then the wheel and uv.
    plan = engine.show_plan("gpus.tfplan")["configuration"]["root_module"]
    node = plan["module_calls"]["nodes"]["module"]["resources"][0]
    assert [p["type"] for p in node["provisioners"]].count("file") == 2
    tfvars = rendered / "terraform.tfvars.json"
    values = json.loads(tfvars.read_text())
    values["hosts"]["node-0"]["host_key"] = ""
    tfvars.write_text(json.dumps(values))
    assert engine.raw(["plan", "-input=false", "-no-color"]) == 1


def test_the_module_refuses_a_uv_outside_the_wheels_folder(rendered: Path, tmp_path: Path) -> None:
    """The wheel's folder is copied whole: a uv elsewhere would never reach the hosts."""
    engine = EmbeddedTerraform(rendered)
    engine.init()
    tfvars = rendered / "terraform.tfvars.json"
    values = json.loads(tfvars.read_text())
    values["uv_path"] = str(tmp_path / "elsewhere" / "uv")
    tfvars.write_text(json.dumps(values))
    code, _, err = engine.command(["plan", "-input=false", "-no-color"])
    assert code == 1 and "uv_path must be" in err, err
