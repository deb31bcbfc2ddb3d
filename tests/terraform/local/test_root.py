"""The rendered local root module through the embedded Terraform: fmt, validate, and
`up` twice -> the second plan has no changes; down leaves no node directory and empty state.

These tests use a minimal runtime tree (conftest) for the wheel: they check Terraform and the
bootstrap script, not the runtime (tests/e2e run the real one).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from skyinfra.targets.local.target import local_files
from skyinfra.terraform import EmbeddedTerraform
from skyinfra.workspace import Workspace
from tests.conftest import REPO_ROOT, GoldenContext, skyinfra_argv


@pytest.fixture
def rendered(tmp_path: Path, golden_context: GoldenContext) -> Path:
    ws = tmp_path / "clusters" / "demo"
    ws.mkdir(parents=True)
    Workspace(ws).write_files(local_files(golden_context()))
    return ws


def test_rendered_root_and_module_are_fmt_clean(rendered: Path) -> None:
    engine = EmbeddedTerraform(rendered)
    assert engine.raw(["fmt", "-check", "-diff"]) == 0
    module_engine = EmbeddedTerraform(REPO_ROOT / "infra" / "modules" / "local")
    assert module_engine.raw(["fmt", "-check", "-diff", "-recursive"]) == 0


def test_rendered_root_validates(rendered: Path) -> None:
    engine = EmbeddedTerraform(rendered)
    engine.init()
    result = engine.validate()
    assert result["valid"] is True, result["diagnostics"]


def test_module_rejects_bad_variables(rendered: Path) -> None:
    engine = EmbeddedTerraform(rendered)
    engine.init()
    tfvars = rendered / "terraform.tfvars.json"
    values = json.loads(tfvars.read_text())
    assert values["base_address"] == "127.0.0.2"
    tfvars.write_text(json.dumps({**values, "base_address": "10.1.2.3"}))
    code = engine.raw(["plan", "-input=false", "-no-color"])
    assert code == 1


def test_up_twice_is_a_no_op_and_down_cleans_up(
    tmp_path: Path, clean_env: dict[str, str], minimal_runtime_dir: Path
) -> None:
    env = {**clean_env, "SKYINFRA_RUNTIME_DIR": str(minimal_runtime_dir)}
    workdir = tmp_path / "project"
    workdir.mkdir()
    up = [*skyinfra_argv(), "up", "--name", "twice", "--nodes", "2"]

    first = subprocess.run(up, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Creation complete" in first.stdout  # progress came from the JSON event stream
    ws = workdir / ".skyinfra" / "clusters" / "twice"
    topology = json.loads((ws / "topology.json").read_text())
    assert [n["private_ip"] for n in topology["nodes"]] == ["127.0.0.2", "127.0.0.3"]
    for i in range(2):
        node = ws / "nodes" / f"node-{i}"
        assert (node / ".skyinfra-node").is_file()
        node_python = str(node / "venv" / "bin" / "python")
        probe = subprocess.run(
            [node_python, "-c", "import skyinfra_runtime as r; print(r.__file__)"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        # The node's own wheel wins over the operator's (editable) runtime.
        assert str(node / "venv") in probe.stdout
    serial = json.loads((ws / "terraform.tfstate").read_text())["serial"]

    second = subprocess.run(up, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "no changes" in second.stdout
    assert json.loads((ws / "terraform.tfstate").read_text())["serial"] == serial
    plan = subprocess.run(
        [*skyinfra_argv(), "tf", "--cluster", "twice", "--", "plan", "-detailed-exitcode"],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert plan.returncode == 0, plan.stdout + plan.stderr  # 0 = no changes (2 would be changes)

    down = subprocess.run(
        [*skyinfra_argv(), "down", "--yes", "--cluster", "twice"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any((ws / "nodes").iterdir())
    assert not (ws / "topology.json").exists()
    state = subprocess.run(
        [*skyinfra_argv(), "tf", "--cluster", "twice", "--", "state", "list"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert state.returncode == 0
    assert state.stdout.strip() == ""
    assert os.path.isfile(ws / "terraform.tfstate")
