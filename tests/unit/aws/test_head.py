"""aws.recover's pure parts (skyinfra/targets/aws/head.py, skyinfra/terraform/plan.py): the
cluster's own key, the kit node 0 gets, the command node 0 runs, and the plan check that
keeps node 0 from applying anything but the lost nodes' resources."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import paramiko
import pytest
from skyinfra_runtime.rundirs import NODE_DIR_FIELD

from skyinfra.targets.aws import head
from skyinfra.targets.aws.reach import HEAD_MARKER
from skyinfra.terraform.plan import changes_beyond_nodes
from skyinfra.wheel import build_operator_wheel
from skyinfra.workspace import Workspace


def _change(address: str, index: str | None, *actions: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"address": address, "change": {"actions": list(actions)}}
    if index is not None:
        entry["index"] = index
    return entry


def test_the_plan_may_only_create_the_lost_nodes_resources() -> None:
    plan = {
        "resource_changes": [
            _change('module.nodes.aws_instance.this["node-1"]', "node-1", "create"),
            _change('module.nodes.aws_network_interface.efa["node-1/0"]', "node-1/0", "create"),
            _change('module.nodes.aws_instance.this["node-0"]', "node-0", "no-op"),
            _change("data.aws_partition.current", None, "read"),
        ]
    }
    assert changes_beyond_nodes(plan, {"node-1"}) == []
    plan["resource_changes"] += [
        _change("module.security.aws_security_group.this", None, "update"),
        _change('module.nodes.aws_instance.this["node-0"]', "node-0", "delete", "create"),
        _change('module.nodes.aws_instance.this["node-2"]', "node-2", "create"),
        _change('module.nodes.aws_instance.this["node-1"]', "node-1", "delete"),
    ]
    assert changes_beyond_nodes(plan, {"node-1"}) == [
        "update module.security.aws_security_group.this",
        'delete+create module.nodes.aws_instance.this["node-0"]',
        'create module.nodes.aws_instance.this["node-2"]',
        'delete module.nodes.aws_instance.this["node-1"]',
    ]


def test_the_clusters_key_is_made_once_private_and_loads_as_openssh(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "c1")
    public = head.head_key_public(ws)
    assert public.startswith("ssh-ed25519 ") and public.endswith(" skyinfra-head@c1")
    private = ws.path / head.HEAD_KEY_FILE
    assert private.stat().st_mode & 0o777 == 0o600
    loaded = paramiko.Ed25519Key.from_private_key_file(str(private))
    assert public.split()[1] == loaded.get_base64()
    assert head.head_key_public(ws) == public  # the same pair on every render
    line = head.authorized_key_line(public, "10.42.0.0/24")
    options = "no-agent-forwarding,no-port-forwarding,no-X11-forwarding"
    assert line == f'from="10.42.0.0/24",{options} {public}'


def test_the_kit_is_the_root_module_spec_and_settings_never_the_state(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "c1")
    names = [
        "spec.json", "aws-target.json", "workspace-id.json", "topology.json", "known_hosts",
        ".terraform.lock.hcl", "terraform.tfvars.json", "main.tf", "backend.tf",
        "modules/aws/nodes/main.tf",
        # Left out:
        "terraform.tfstate", "terraform.tfstate.backup", "copy-cache.json", "timeline.json",
        "head_key", "head_key.pub", ".skyinfra.lock", "runs/j1/node-0.log",
        ".terraform/terraform.tfstate", "skyinfra.tfplan", "origin.json",
    ]  # fmt: skip
    for name in names:
        (ws.path / name).parent.mkdir(parents=True, exist_ok=True)
        (ws.path / name).write_text("x")
    assert sorted(head.kit_files(ws)) == sorted(names[:10])
    files = head.kit_destinations(ws, "/opt/skyinfra/node")
    assert files["/opt/skyinfra/node/head/head_key"] == ws.path / "head_key"
    assert "/opt/skyinfra/node/head/clusters/c1/modules/aws/nodes/main.tf" in files
    assert json.loads(head.head_marker("/opt/skyinfra/node")) == {
        "ssh_key": "/opt/skyinfra/node/head/head_key"
    }


def test_node_0s_command_from_the_operator_and_from_node_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "the-operators-own-secret")
    monkeypatch.delenv("SKYINFRA_AWS_ENDPOINT_URL", raising=False)
    ws = Workspace(tmp_path / "c1")
    assert head.head_recovery(ws, False, "us-east-1") is None
    mine = head.head_recovery(ws, True, "us-east-1")
    assert mine is not None and mine.prepare is not None and mine.attached_run_waits
    assert mine.argv[0] == f"{NODE_DIR_FIELD}/head/venv/bin/skyinfra"
    assert mine.argv[-2:] == ("recover", "--unattended")
    assert dict(mine.env) == {"AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}
    # Emulated: the emulator's settings and placeholder credentials, never the operator's.
    monkeypatch.setenv("SKYINFRA_AWS_ENDPOINT_URL", "http://127.0.0.1:5000")
    emulated = head.head_recovery(ws, True, "us-east-1")
    assert emulated is not None
    assert emulated.env["AWS_SECRET_ACCESS_KEY"] == head.EMULATED_ROLE["AWS_SECRET_ACCESS_KEY"]
    assert "the-operators-own-secret" not in json.dumps(emulated.private())
    # Node 0's own copy copies nothing to itself.
    ws.path.mkdir(parents=True, exist_ok=True)
    (ws.path / HEAD_MARKER).write_text(head.head_marker("/opt/skyinfra/node"))
    on_node_0 = head.head_recovery(ws, True, "us-east-1")
    assert on_node_0 is not None and on_node_0.prepare is None


def test_node_0s_skyinfra_wheel_carries_the_modules_and_the_command() -> None:
    import zipfile

    wheel = build_operator_wheel()
    with zipfile.ZipFile(wheel.path) as archive:
        names = set(archive.namelist())
        entry_points = archive.read("skyinfra-0.1.0.dist-info/entry_points.txt").decode()
    assert "skyinfra/_infra/modules/aws/nodes/main.tf" in names
    assert "skyinfra/_infra/templates/aws/root/main.tf.j2" in names
    assert "skyinfra/cli/main.py" in names
    assert "skyinfra = skyinfra.cli:main" in entry_points
    assert build_operator_wheel().sha256 == wheel.sha256  # the same bytes every time
