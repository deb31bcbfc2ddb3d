"""A refused command leaves the workspace byte-identical: every refusal path of `up`, `plan`,
`apply` and `down`, on one running 2-node local cluster (real Terraform, real node
processes), snapshotted (every file's bytes and mode) before and after.

Before this, `up` with fewer nodes off a terminal said "nothing was changed" (exit 2) but had
rewritten spec.json and terraform.tfvars.json; and `up` with another provider exited 1.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from skyinfra import exitcodes
from tests.conftest import skyinfra_argv
from tests.support.snapshot import differences, snapshot

pytestmark = pytest.mark.slow

NAME = "still"
SPEC = f'name = "{NAME}"\nnodes = 2\nhead_port = 31850\n'
AWS_TABLE = (
    '[aws]\nregion = "us-east-1"\ninstance_type = "g5.xlarge"\n'
    'ssh_cidrs = ["203.0.113.4/32"]\nssh_key = "keys/id"\n'
)


@dataclass
class Project:
    root: Path
    env: dict[str, str]
    plans: Path  # plans made outside the workspace, for the `apply` cases

    @property
    def ws(self) -> Path:
        return self.root / ".skyinfra/clusters" / NAME

    def spec(self, text: str = SPEC) -> None:
        (self.root / "skyinfra.toml").write_text(text)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*skyinfra_argv(), *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,  # off a terminal: nothing is confirmed without --yes
        )

    def plan(self, out: str, nodes: int) -> Path:
        self.spec(SPEC.replace("nodes = 2", f"nodes = {nodes}"))
        proc = self.run("plan", "--out", str(self.plans / out))
        assert proc.returncode == exitcodes.PLAN_CHANGES, proc.stdout + proc.stderr
        return self.plans / out / "skyinfra.tfplan"


@pytest.fixture(scope="module")
def project(
    tmp_path_factory: pytest.TempPathFactory, minimal_runtime_dir: Path
) -> Iterator[Project]:
    import os

    base = tmp_path_factory.mktemp("refusals")
    root = base / "project"
    (root / "keys").mkdir(parents=True)
    (root / "keys/id").write_text("a private key\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SKYINFRA_", "AWS_"))}
    env.update(
        SKYINFRA_RUNTIME_DIR=str(minimal_runtime_dir),
        SKYINFRA_CACHE=str(base / "cache"),
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
        AWS_EC2_METADATA_DISABLED="true",
    )
    made = Project(root, env, base / "plans")
    made.spec()
    up = made.run("up")
    assert up.returncode == 0, up.stdout + up.stderr
    yield made
    made.spec()
    made.run("down", "--yes", "--cluster", NAME)


# Each case: what it sets up (before the snapshot) -> the command; its exit code; its words.
Setup = Callable[[Project], list[str]]


def shrink(p: Project) -> list[str]:
    p.spec(SPEC.replace("nodes = 2", "nodes = 1"))
    return ["up"]


def other_provider(p: Project) -> list[str]:
    p.spec(SPEC + 'provider = "aws"\n' + AWS_TABLE)
    return ["up", "--yes"]


def other_spec_file(p: Project) -> list[str]:
    (p.root / "other.toml").write_text(SPEC)
    return ["up", "--spec", "other.toml", "--yes"]


def other_targets_flag(p: Project) -> list[str]:
    return ["up", "--skip-preflight"]


def bad_spec(p: Project) -> list[str]:
    p.spec(SPEC.replace("nodes = 2", "nodes = 0"))
    return ["up"]


def plan_other_provider(p: Project) -> list[str]:
    p.spec(SPEC + 'provider = "aws"\n' + AWS_TABLE)
    return ["plan", "--out", str(p.plans / "refused")]


def plan_other_spec_file(p: Project) -> list[str]:
    (p.root / "other.toml").write_text(SPEC)
    return ["plan", "--spec", "other.toml", "--out", str(p.plans / "refused")]


def apply_stale_spec(p: Project) -> list[str]:
    planfile = p.plan("grow", 3)
    p.spec()  # ./skyinfra.toml no longer says what was planned
    return ["apply", str(planfile), "--yes"]


def apply_other_sha256(p: Project) -> list[str]:
    planfile = p.plan("grow-sha", 3)
    return ["apply", str(planfile), "--sha256", "0" * 64, "--yes"]


def apply_unconfirmed(p: Project) -> list[str]:
    planfile = p.plan("shrink", 1)
    return ["apply", str(planfile)]


def down_unconfirmed(p: Project) -> list[str]:
    return ["down", "--cluster", NAME]


CASES: list[tuple[Setup, int, str]] = [
    (shrink, exitcodes.USAGE, "nothing was changed"),
    (other_provider, exitcodes.USAGE, "exists with provider 'local'"),
    (other_spec_file, exitcodes.USAGE, "--adopt"),
    (other_targets_flag, exitcodes.USAGE, "--skip-preflight"),
    (bad_spec, exitcodes.USAGE, "'nodes'"),
    # `plan` exits as `terraform plan -detailed-exitcode`: 1 for any error.
    (plan_other_provider, exitcodes.ERROR, "exists with provider 'local'"),
    (plan_other_spec_file, exitcodes.ERROR, "--adopt"),
    (apply_stale_spec, exitcodes.STALE_PLAN, "nodes"),
    (apply_other_sha256, exitcodes.STALE_PLAN, "sha256"),
    (apply_unconfirmed, exitcodes.USAGE, "nothing was changed"),
    (down_unconfirmed, exitcodes.USAGE, "nothing was changed"),
]


@pytest.mark.parametrize(("setup", "code", "words"), CASES, ids=[c[0].__name__ for c in CASES])
def test_a_refused_command_leaves_the_workspace_byte_identical(
    project: Project, setup: Setup, code: int, words: str
) -> None:
    project.spec()
    args = setup(project)
    before = snapshot(project.ws)
    proc = project.run(*args)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert words in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert differences(before, snapshot(project.ws)) == []
    assert (project.ws / "nodes/node-1/.skyinfra-node").is_file()  # both nodes still run


def test_a_refused_apply_in_a_fresh_workspace_leaves_nothing(project: Project) -> None:
    """`apply` on a machine with no workspace yet (CI) writes the planned root module and runs
    init before it can judge the plan: refused, none of that stays."""
    planfile = project.plan("fresh", 3)
    fresh = project.root.parent / "fresh-clusters"
    proc = project.run("apply", str(planfile), "--sha256", "0" * 64, "--dir", str(fresh))
    assert proc.returncode == exitcodes.STALE_PLAN, proc.stdout + proc.stderr
    assert not fresh.exists()
