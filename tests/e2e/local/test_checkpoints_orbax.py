"""JAX with orbax-checkpoint on $SKYINFRA_CHECKPOINT_DIR, end to end on one 2-node local
cluster (jax plugin, gloo on CPU, shared by the module): examples/jax_orbax_resume.py; node 1's
worker is SIGKILLed in the middle of epoch 3, a fresh job on the same `--checkpoints` set
resumes from the end of epoch 2 and ends with a state bit-identical (sha256) to an
uninterrupted run's; a half-written step (orbax's temporary folder, renamed into place only
once complete) is ignored. orbax-checkpoint is optional: skipped where it is not installed.
Real processes only."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.local_jobs import cli, cluster_up, module_env
from tests.support.resume_proof import (
    kill_node_1_in_epoch_3,
    pausing_entry,
    reference_sha256,
    results,
    wait_for_path,
)

# Found, not imported: every pytest worker collects this file, and orbax imports jax.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("orbax.checkpoint") is None,
        reason="orbax-checkpoint not installed",
    ),
]

NAME = "ckpt-orbax"
SPEC = f"""\
name = "{NAME}"
nodes = 2
plugins = ["jax"]
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> dict[str, str]:
    return module_env(tmp_path_factory, tf_plugin_cache, "ckpt-orbax")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Path]:
    proj = tmp_path_factory.mktemp("ckpt-orbax-project")
    (proj / "skyinfra.toml").write_text(SPEC)
    (proj / "train.py").write_text(pausing_entry("jax_orbax_resume"))
    shutil.copy(REPO_ROOT / "examples" / "jax_orbax_resume.py", proj / "jax_orbax_resume.py")
    with cluster_up(proj, env, NAME):
        yield proj


def workspace(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME


@pytest.fixture(scope="module")
def reference(project: Path, env: dict[str, str]) -> str:
    """The uninterrupted run's final state."""
    return reference_sha256(project, env, workspace(project))


def test_a_killed_run_resumes_from_its_last_epoch_bit_identical(
    project: Path, env: dict[str, str], reference: str
) -> None:
    steps = workspace(project) / "checkpoints" / "resume"
    # orbax saves in the background: epoch 2's step is renamed into place before the kill
    kill_node_1_in_epoch_3(
        project,
        env,
        workspace(project),
        "resume",
        ["train.py:main"],
        before_kill=lambda: wait_for_path(steps / "2"),
    )
    assert sorted(p.name for p in steps.iterdir() if p.name.isdigit()) == ["1", "2"]
    half = steps / "99.orbax-checkpoint-tmp-1764000000000000"  # as orbax leaves one
    (half / "default").mkdir(parents=True)
    (half / "default" / "half-written").write_bytes(b"half")

    run = cli(["run", "--checkpoints", "resume", "train.py:main"], project, env)
    values = results(workspace(project), run)
    assert f"resumed from {steps}/2 (epoch 2)" in run.stdout, run.stdout
    assert "epoch 2 begins" not in run.stdout and "epoch 3 begins" in run.stdout
    assert {v["resumed_epoch"] for v in values} == {2}
    assert {v["weights_sha256"] for v in values} == {reference}
