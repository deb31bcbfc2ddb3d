"""The framework examples' checkpoints as they are on AWS: each node's $SKYINFRA_CHECKPOINT_DIR
its own folder (its own disk there), every node uploading it to S3 and a replacement node
restoring the union (skyinfra_runtime.ckptsync against moto's server over loopback), the
workers real launcher processes (jax and torch on CPU, gloo, loopback). On the local target
the folder is shared by every node, which hides what these show: orbax's multi-host save
waits for files it never sees on a node's own disk (the example saves from process 0 alone),
and DCP puts most of a DDP model in rank 1's file, so a node lost before its upload leaves a
step whose `.metadata` names a file that is not there (the example's resume skips it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.runtime.launch_harness import NodeRun, run_nodes, topology
from tests.support.aws import REGION, emptied_bucket

pytestmark = pytest.mark.slow

BUCKET = "node-local-ckpts"
RUNTIME_SRC = REPO_ROOT / "runtime" / "src"


@pytest.fixture
def bucket(aws_env: str) -> Iterator[str]:
    with emptied_bucket(aws_env, BUCKET):
        yield BUCKET


def sync(moto: str, folder: Path, node: int) -> None:
    """One round of a node's checkpoint sync: restore the set's union into ``folder`` (a
    fresh node's), then upload what the node wrote."""
    subprocess.run(
        [sys.executable, "-m", "skyinfra_runtime", "checkpoint-sync",
         "--dir", str(folder), "--url", f"s3://{BUCKET}/ckpts/set",
         "--bucket-url", f"{moto}/{BUCKET}", "--region", REGION, "--node", str(node), "--once"],
        env={**os.environ, "PYTHONPATH": str(RUNTIME_SRC)},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip


def train(
    tmp_path: Path, example: str, plugin: str, dirs: list[Path], *args: str
) -> list[dict[str, Any]]:
    """The example on 2 nodes, each with its own checkpoint folder; each worker's value."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    shutil.copy(REPO_ROOT / "examples" / example, work / example)
    for folder in dirs:
        folder.mkdir(parents=True, exist_ok=True)
    runs: list[NodeRun] = run_nodes(
        work,
        topology(2, plugins=[{"name": plugin, "options": {}}]),
        f"{example}:main",
        args=args,
        node_env={i: {"SKYINFRA_CHECKPOINT_DIR": str(d)} for i, d in enumerate(dirs)},
    )
    for run in runs:
        assert run.returncode == 0, run.stdout + run.stderr
    return [run.values()[0] for run in runs]


def nodes(tmp_path: Path, name: str) -> list[Path]:
    return [tmp_path / name / f"node-{i}" for i in range(2)]


def reference_and_first_run(tmp_path: Path, example: str, plugin: str) -> tuple[str, list[Path]]:
    """The uninterrupted run's final sha256 (the example's 5 epochs), and the folders of a
    first run that stopped after epoch 3."""
    done = train(tmp_path, example, plugin, nodes(tmp_path, "reference"))
    (reference,) = {v["weights_sha256"] for v in done}
    first = nodes(tmp_path, "first")
    train(tmp_path, example, plugin, first, "--epochs", "3")
    return reference, first


def restored_on_new_nodes(moto: str, first: list[Path], tmp_path: Path) -> list[Path]:
    """Every node uploads its folder; two replacement nodes' empty folders get the union."""
    for i, folder in enumerate(first):
        sync(moto, folder, i)
    fresh = nodes(tmp_path, "replaced")
    for i, folder in enumerate(fresh):
        sync(moto, folder, i)
    return fresh


def test_orbax_saves_on_each_nodes_own_disk_and_resumes_bit_identical_after_s3(
    tmp_path: Path, aws_env: str, bucket: str
) -> None:
    pytest.importorskip("orbax.checkpoint")
    ref, first = reference_and_first_run(tmp_path, "jax_orbax_resume.py", "jax")
    assert sorted(p.name for p in first[0].iterdir()) == ["2", "3"]  # max_to_keep=2
    assert list(first[1].iterdir()) == []  # process 0 saves the replicated state alone
    # Both nodes replaced: fresh folders, restored from the set before the job starts.
    fresh = restored_on_new_nodes(aws_env, first, tmp_path)
    values = train(tmp_path, "jax_orbax_resume.py", "jax", fresh)
    assert [v["resumed_epoch"] for v in values] == [3, 3]
    assert {v["weights_sha256"] for v in values} == {ref}


def test_dcp_skips_a_step_whose_rank_1_file_never_reached_s3_and_ends_bit_identical(
    tmp_path: Path, aws_env: str, bucket: str
) -> None:
    pytest.importorskip("torch")
    ref, first = reference_and_first_run(tmp_path, "torch_resume.py", "torch")
    # Node 1 is lost before it uploaded epoch 3's file; node 0 uploaded its .metadata.
    last = first[1] / "step-00000003"
    assert [p.name for p in last.iterdir()] == ["__1_0.distcp"]
    shutil.rmtree(last)
    fresh = restored_on_new_nodes(aws_env, first, tmp_path)
    step_3 = fresh[0] / "step-00000003"
    assert sorted(p.name for p in step_3.iterdir()) == [".metadata", "__0_0.distcp"]
    values = train(tmp_path, "torch_resume.py", "torch", fresh)
    assert [v["resumed_epoch"] for v in values] == [2, 2]  # not the step missing its part
    assert {v["weights_sha256"] for v in values} == {ref}
