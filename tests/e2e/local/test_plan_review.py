"""`skyinfra render / plan / apply` on a real local cluster (real Terraform, real node
processes): golden plan.md for create, no changes, scale 2 -> 4 and destroy; the reviewed
planfile is applied verbatim and a stale one is refused; `up`'s confirmation shows plan.md's
warning block; render twice gives the same bytes, fmt-clean."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyinfra import exitcodes
from skyinfra.terraform import EmbeddedTerraform
from tests.conftest import skyinfra_argv
from tests.support.golden_plans import check_golden

pytestmark = pytest.mark.slow

SPEC = 'name = "review"\nnodes = 2\nhead_port = 31710\n'


@pytest.fixture
def project(
    tmp_path: Path, clean_env: dict[str, str], minimal_runtime_dir: Path
) -> Iterator[tuple[Path, dict[str, str]]]:
    root = tmp_path / "project"
    root.mkdir()
    (root / "skyinfra.toml").write_text(SPEC)
    env = {**clean_env, "SKYINFRA_RUNTIME_DIR": str(minimal_runtime_dir)}
    yield root, env
    if (root / ".skyinfra/clusters/review/terraform.tfstate").is_file():
        skyinfra(["down", "--yes", "--cluster", "review"], root, env)


def skyinfra(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*skyinfra_argv(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def plan(project: Path, env: dict[str, str], out: str, *args: str) -> tuple[int, str]:
    proc = skyinfra(["plan", "--out", out, *args], project, env)
    assert proc.returncode in (0, 2, exitcodes.GUARDRAIL), proc.stdout + proc.stderr
    return proc.returncode, (project / out / "plan.md").read_text()


def test_plan_apply_and_stale_plans(project: tuple[Path, dict[str, str]]) -> None:
    root, env = project
    ws = root / ".skyinfra/clusters/review"
    code, text = plan(root, env, "p-create")
    assert code == exitcodes.PLAN_CHANGES
    check_golden("local-create", text)
    assert not (ws / "spec.json").exists()  # planning changes nothing of the cluster
    meta = json.loads((root / "p-create/plan-meta.json").read_text())
    assert meta["spec"]["nodes"] == 2 and meta["state"] is None
    assert os.stat(root / "p-create/skyinfra.tfplan").st_mode & 0o077 == 0

    # A planfile whose bytes changed since the review is refused before Terraform runs.
    planfile = root / "p-create/skyinfra.tfplan"
    wrong = skyinfra(["apply", str(planfile), "--sha256", "0" * 64], root, env)
    assert wrong.returncode == exitcodes.STALE_PLAN, wrong.stdout + wrong.stderr
    assert "is not the reviewed plan" in wrong.stderr

    applied = skyinfra(["apply", str(planfile), "--sha256", meta["planfile_sha256"]], root, env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "is up: 2 node(s)" in applied.stdout
    assert json.loads((ws / "spec.json").read_text())["nodes"] == 2
    assert (ws / "nodes/node-1/.skyinfra-node").is_file()

    # Applied once: the state moved on, so the same planfile is stale now.
    again = skyinfra(["up", "--plan", str(planfile)], root, env)
    assert again.returncode == exitcodes.STALE_PLAN, again.stdout + again.stderr
    assert "state changed since the plan (no state then, serial" in again.stderr

    same = skyinfra(["plan", "--out", "p-same", "--json"], root, env)
    assert same.returncode == exitcodes.OK, same.stdout + same.stderr
    summary = json.loads(same.stdout)  # stdout holds the JSON summary only
    assert summary["plan"]["no_changes"] is True and summary["passed"] is True
    assert summary["topology"]["after"]["nodes"] == 2
    check_golden("local-no-changes", (root / "p-same/plan.md").read_text())
    # A job's env and secrets change no infrastructure: the reviewed plan still applies, and
    # the workspace's spec holds them as they are now.
    (root / "skyinfra.toml").write_text(
        SPEC + 'env = { NCCL_DEBUG = "INFO" }\nsecrets = ["WANDB_API_KEY"]\n'
    )
    same_applied = skyinfra(["apply", "p-same/skyinfra.tfplan"], root, env)
    assert same_applied.returncode == 0, same_applied.stdout + same_applied.stderr
    applied_spec = json.loads((ws / "spec.json").read_text())
    assert (applied_spec["env"], applied_spec["secrets"]) == (
        {"NCCL_DEBUG": "INFO"},
        ["WANDB_API_KEY"],
    )
    (root / "skyinfra.toml").write_text(SPEC)

    code, text = plan(root, env, "p-scale", "--nodes", "4")
    assert code == exitcodes.PLAN_CHANGES
    check_golden("local-scale-2-to-4", text)
    # Planning applied nothing: the workspace still holds the 2-node root module.
    assert json.loads((ws / "terraform.tfvars.json").read_text())["node_count"] == 2
    # The spec file still says 2 nodes: applying the 4-node plan is refused, naming the field.
    stale = skyinfra(["apply", "p-scale/skyinfra.tfplan"], root, env)
    assert stale.returncode == exitcodes.STALE_PLAN, stale.stdout + stale.stderr
    assert "the spec changed since the plan (nodes (4 -> 2))" in stale.stderr

    code, text = plan(root, env, "p-destroy", "--nodes", "1")
    assert code == exitcodes.PLAN_CHANGES
    check_golden("local-destroy", text)

    # `up`'s confirmation tells the same story as plan.md's warning block.
    (root / "skyinfra.toml").write_text(SPEC.replace("nodes = 2", "nodes = 1"))
    refused = skyinfra(["up"], root, env)
    assert refused.returncode == exitcodes.USAGE, refused.stdout + refused.stderr
    assert "1 node(s) will be DESTROYED" in refused.stdout
    node_1 = 'module.nodes.terraform_data.node["node-1"]'
    assert (
        f"destroy {node_1}: the cluster no longer has it (fewer nodes) [delete_because_each_key]"
        in refused.stdout
    )
    assert (ws / "nodes/node-1/.skyinfra-node").is_file()


def test_render_is_self_contained_byte_identical_and_fmt_clean(
    project: tuple[Path, dict[str, str]],
) -> None:
    root, env = project
    first = skyinfra(["render", "--out", "r1"], root, env)
    assert first.returncode == 0, first.stdout + first.stderr
    second = skyinfra(["render", "--out", "r2"], root, env)
    assert second.returncode == 0, second.stdout + second.stderr

    def files(folder: Path) -> dict[str, bytes]:
        return {
            p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }

    r1, r2 = files(root / "r1"), files(root / "r2")
    assert r1 == r2
    assert {"main.tf", "terraform.tfvars.json", "README.md", "scripts/bootstrap-node.sh"} <= set(r1)
    assert any(name.startswith("modules/local/") for name in r1)
    assert b"skyinfra render --out" in r1["README.md"]
    # Module sources point inside the folder, never at where skyinfra is installed.
    assert b'source = "./modules/local"' in r1["main.tf"]
    assert b"site-packages" not in r1["main.tf"]
    assert not (root / ".skyinfra/clusters/review").exists()  # render applies nothing
    code, out, err = EmbeddedTerraform(root / "r1").command(["fmt", "-check", "-recursive"])
    assert code == 0, out + err

    # One spec field changed: only the lines that carry it change.
    (root / "skyinfra.toml").write_text(SPEC.replace("nodes = 2", "nodes = 3"))
    third = skyinfra(["render", "--out", "r1"], root, env)
    assert third.returncode == 0, third.stdout + third.stderr
    r3 = files(root / "r1")
    assert {name for name in r1 if r1[name] != r3[name]} == {"terraform.tfvars.json"}
    old = r1["terraform.tfvars.json"].decode().splitlines()
    new = r3["terraform.tfvars.json"].decode().splitlines()
    assert [(a, b) for a, b in zip(old, new, strict=True) if a != b] == [
        ('  "node_count": 2,', '  "node_count": 3,')
    ]

    # `plan --from` plans the rendered folder.
    code, text = plan(root, env, "p-from", "--from", "r1")
    assert code == exitcodes.PLAN_CHANGES
    assert "**Plan: 3 to add, 0 to change, 0 to destroy.**" in text


def test_plan_errors_exit_1_like_terraform(project: tuple[Path, dict[str, str]]) -> None:
    """`plan`'s 2 means "changes": a bad spec there exits 1, naming the field."""
    root, env = project
    (root / "skyinfra.toml").write_text(SPEC + "[guardrails]\nmax_hourly_usd = -5\n")
    proc = skyinfra(["plan"], root, env)
    assert proc.returncode == exitcodes.ERROR, proc.stdout + proc.stderr
    assert "invalid spec field 'guardrails.max_hourly_usd'" in proc.stderr
    assert not (root / ".skyinfra").exists()
    mixed = skyinfra(["up", "--plan", "p/skyinfra.tfplan", "--nodes", "3"], root, env)
    assert mixed.returncode == exitcodes.USAGE, mixed.stdout + mixed.stderr
    assert "--nodes cannot change it" in mixed.stderr
    missing = skyinfra(["apply", "nowhere/skyinfra.tfplan"], root, env)
    assert missing.returncode == exitcodes.USAGE, missing.stdout + missing.stderr
    assert "nowhere/skyinfra.tfplan: no such file" in missing.stderr
