"""Checkpoints on AWS, the node side, against moto over loopback with real processes: every
node uploads its files, a fresh (replacement) node dir gets the union back, a node killed in
the middle of an upload leaves nothing half restored, and a job's agent restores before its
entry starts and uploads at its end; big files go up as multipart uploads, aborted when a
part fails."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from skyinfra_runtime.ckptsync import sha256_file
from skyinfra_runtime.s3 import (
    MIN_PART_SIZE,
    PART_SIZE_ENV,
    THRESHOLD_ENV,
    Bucket,
    CredentialSource,
    MiB,
    S3Error,
)

from tests.conftest import REPO_ROOT
from tests.support.aws import REGION, emptied_bucket

BUCKET = "ckpt-bucket"
RUNTIME_SRC = REPO_ROOT / "runtime" / "src"


@pytest.fixture
def s3(aws_env: str) -> Iterator[Any]:
    with emptied_bucket(aws_env, BUCKET) as client:
        yield client


def node_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(RUNTIME_SRC), **extra}
    env.pop("AWS_SESSION_TOKEN", None)
    return env


def sync_cmd(moto: str, folder: Path, node: int, name: str, *more: str) -> list[str]:
    return [
        sys.executable, "-m", "skyinfra_runtime", "checkpoint-sync",
        "--dir", str(folder), "--url", f"s3://{BUCKET}/team/ckpts/{name}",
        "--bucket-url", f"{moto}/{BUCKET}", "--region", REGION, "--node", str(node), *more,
    ]  # fmt: skip


def run_once(moto: str, folder: Path, node: int, name: str = "job1") -> dict[str, Any]:
    out = subprocess.run(
        sync_cmd(moto, folder, node, name, "--once"),
        env=node_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return dict(json.loads(out.stdout.splitlines()[-1]))


def keys(s3: Any, prefix: str = "") -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def manifest(s3: Any, name: str, node: int) -> dict[str, Any]:
    key = f"team/ckpts/{name}/nodes/node-{node}/manifest.json"
    return dict(json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()))


def write(folder: Path, rel: str, data: bytes) -> None:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.slow
def test_every_node_uploads_and_a_replacement_node_gets_the_union(
    s3: Any, aws_env: str, tmp_path: Path
) -> None:
    node0, node1 = tmp_path / "node-0", tmp_path / "node-1"
    write(node0, "step_1/model.bin", os.urandom(200_000))
    write(node0, "step_1/COMMIT", b"ok")
    write(node1, "step_1/shard-1.bin", os.urandom(50_000))
    procs = [
        subprocess.Popen(sync_cmd(aws_env, d, i, "job1", "--once"), env=node_env())
        for i, d in enumerate((node0, node1))
    ]
    assert [p.wait(120) for p in procs] == [0, 0]
    assert sorted(manifest(s3, "job1", 0)["files"]) == ["step_1/COMMIT", "step_1/model.bin"]
    assert sorted(manifest(s3, "job1", 1)["files"]) == ["step_1/shard-1.bin"]
    assert len(keys(s3, "team/ckpts/job1/nodes/node-0/objects/")) == 2

    # Node 1 is lost; its replacement starts from an empty directory.
    fresh = tmp_path / "node-1-replacement"
    done = run_once(aws_env, fresh, 1)
    assert files_of(fresh) == {**files_of(node0), **files_of(node1)}
    mtime = (node0 / "step_1/model.bin").stat().st_mtime_ns
    assert (fresh / "step_1/model.bin").stat().st_mtime_ns == mtime
    # Nothing new was written: no upload, and node 0's files stay node 0's.
    assert done["rounds"] == []
    assert sorted(manifest(s3, "job1", 1)["files"]) == ["step_1/shard-1.bin"]

    # Another set name is another prefix: nothing of job1 there.
    run_once(aws_env, tmp_path / "other", 0, "job2")
    assert files_of(tmp_path / "other") == {}


@pytest.mark.slow
def test_a_node_killed_midway_through_an_upload_is_not_restored_half(
    s3: Any, aws_env: str, tmp_path: Path
) -> None:
    node0 = tmp_path / "node-0"
    write(node0, "step_1/weights.bin", b"one" * 1000)
    write(node0, "step_1/COMMIT", b"1")
    run_once(aws_env, node0, 0)
    committed = manifest(s3, "job1", 0)
    for i in range(3):
        write(node0, f"step_2/part-{i}.bin", os.urandom(10_000))
    write(node0, "step_2/COMMIT", b"2")
    proc = subprocess.Popen(
        sync_cmd(aws_env, node0, 0, "job1", "--once"),
        env=node_env(SKYINFRA_CHECKPOINT_UPLOAD_DELAY_S="60"),
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "uploaded object 1" in line:
            break
    proc.send_signal(signal.SIGKILL)  # the node dies between two objects
    proc.wait(30)
    objects = keys(s3, "team/ckpts/job1/nodes/node-0/objects/")
    assert len(objects) == 3  # step 1's two files and one of step 2's
    assert manifest(s3, "job1", 0)["files"] == committed["files"]

    fresh = tmp_path / "replacement"
    run_once(aws_env, fresh, 0)
    assert sorted(files_of(fresh)) == ["step_1/COMMIT", "step_1/weights.bin"]
    # The replacement's restore deleted what the cut upload left (no manifest named it).
    assert len(keys(s3, "team/ckpts/job1/nodes/node-0/objects/")) == 2

    # The node comes back (its directory kept): the next round uploads step 2 whole.
    run_once(aws_env, node0, 0)
    assert len(manifest(s3, "job1", 0)["files"]) == 6


@pytest.mark.slow
def test_only_settled_files_go_up_while_running_and_everything_on_sigterm(
    s3: Any, aws_env: str, tmp_path: Path
) -> None:
    node0 = tmp_path / "node-0"
    node0.mkdir()
    proc = subprocess.Popen(
        sync_cmd(aws_env, node0, 0, "job1", "--poll", "0.3"), env=node_env(), text=True,
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    assert "restored" in proc.stdout.readline()
    write(node0, "epoch-1.ckpt", b"a" * 1000)
    until = time.monotonic() + 30
    while not keys(s3, "team/ckpts/job1/nodes/node-0/manifest.json"):
        assert time.monotonic() < until, "the settled file was never uploaded"
        time.sleep(0.1)
    assert list(manifest(s3, "job1", 0)["files"]) == ["epoch-1.ckpt"]
    write(node0, "epoch-2.ckpt", b"b" * 1000)  # just written: only the final round takes it
    write(node0, "epoch-3.ckpt", b"c" * 1000)
    # A file deleted on the node (a framework keeping its last N) leaves the set, object too.
    (node0 / "epoch-1.ckpt").unlink()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert sorted(manifest(s3, "job1", 0)["files"]) == ["epoch-2.ckpt", "epoch-3.ckpt"]
    assert len(keys(s3, "team/ckpts/job1/nodes/node-0/objects/")) == 2


@pytest.mark.slow
def test_a_jobs_agent_restores_before_the_entry_and_uploads_at_its_end(
    s3: Any, aws_env: str, tmp_path: Path
) -> None:
    earlier = tmp_path / "earlier"
    write(earlier, "step-1/state.bin", b"from an earlier attempt")
    run_once(aws_env, earlier, 0, "run-a")

    node_dir = tmp_path / "node"
    node_dir.mkdir()
    (node_dir / "checkpoints.json").write_text(
        json.dumps(
            {
                "url": f"s3://{BUCKET}/team/ckpts",
                "region": REGION,
                "bucket_url": f"{aws_env}/{BUCKET}",
            }
        )
    )
    entry = (
        "import os, pathlib\n"
        "d = pathlib.Path(os.environ['SKYINFRA_CHECKPOINT_DIR'])\n"
        "print('restored:', (d / 'step-1/state.bin').read_text(), flush=True)\n"
        "(d / 'step-2').mkdir()\n"
        "(d / 'step-2/state.bin').write_text('written by this attempt')\n"
    )
    argv = [
        sys.executable, "-m", "skyinfra_runtime", "supervise", "--job", "job-1",
        "--node-dir", str(node_dir), "--node", "0", "--nodes", "1", "--checkpoints", "run-a",
        "--", sys.executable, "-c", entry,
    ]  # fmt: skip
    out = subprocess.run(
        argv,
        env=node_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    state = node_dir / "runs" / "job-1" / "node.json"
    until = time.monotonic() + 60
    while json.loads(state.read_text() if state.is_file() else "{}").get("state") != "ended":
        assert time.monotonic() < until, "the agent did not end"
        time.sleep(0.2)
    log = (node_dir / "runs" / "job-1" / "output.log").read_text()
    assert "restored: from an earlier attempt" in log
    assert sorted(manifest(s3, "run-a", 0)["files"]) == ["step-1/state.bin", "step-2/state.bin"]


def two_node_job(tmp_path: Path, aws_env: str, job: str, entry: str) -> list[Path]:
    """Job ``job`` of ``entry`` (Python source) started by both nodes' agents, as `run -d`
    starts one: node 0's agent listens for node 1's, each node with a folder of its own and the
    checkpoint store in moto. The node folders."""
    settings = {"url": f"s3://{BUCKET}/team/ckpts", "region": REGION}
    settings["bucket_url"] = f"{aws_env}/{BUCKET}"
    dirs = [tmp_path / f"node-{i}" for i in range(2)]
    head = ""
    for i, node_dir in enumerate(dirs):
        node_dir.mkdir()
        (node_dir / "checkpoints.json").write_text(json.dumps(settings))
        where = ["--nodes", "2", "--listen", "127.0.0.1"] if i == 0 else ["--head", head]
        argv = [
            sys.executable, "-m", "skyinfra_runtime", "supervise", "--job", job,
            "--node-dir", str(node_dir), "--node", str(i), *where,
            "--", sys.executable, "-c", entry,
        ]  # fmt: skip
        env = node_env(NODE=str(i))  # the set: the job's own (its id), as the agent names it
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        if i == 0:
            said = json.loads(out.stdout.strip().splitlines()[-1])
            head = f"{said['host']}:{said['port']}"
    return dirs


@pytest.mark.slow
def test_a_cancelled_two_node_job_uploads_from_every_node_before_its_record_ends(
    s3: Any, aws_env: str, tmp_path: Path
) -> None:
    """SIGTERM (here `cancel`, later a Spot notice) ends the launchers; each node's agent
    then makes its final upload, of a file written a moment before (so no poll took it),
    before it reports its exit: once the head's record is final, every node's files are in."""
    entry = (
        "import os, pathlib, sys, time\n"
        "d = pathlib.Path(os.environ['SKYINFRA_CHECKPOINT_DIR'])\n"
        "(d / f\"rank-{os.environ['NODE']}.bin\").write_bytes(os.urandom(4096))\n"
        "print('written', flush=True)\n"
        "time.sleep(120)\n"
    )
    dirs = two_node_job(tmp_path, aws_env, "job-2", entry)
    logs = [d / "runs" / "job-2" / "output.log" for d in dirs]
    until = time.monotonic() + 60
    while not all(log.is_file() and "written" in log.read_text() for log in logs):
        assert time.monotonic() < until, "the entries did not start"
        time.sleep(0.2)
    cancel = [sys.executable, "-m", "skyinfra_runtime", "cancel", "--job", "job-2"]
    out = subprocess.run(
        [*cancel, "--node-dir", str(dirs[0])], env=node_env(), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    record = json.loads((dirs[0] / "jobs" / "job-2.json").read_text())
    assert record["state"] == "cancelled"
    for i in range(2):
        assert list(manifest(s3, "job-2", i)["files"]) == [f"rank-{i}.bin"]


@pytest.mark.slow
def test_a_node_that_writes_no_checkpoint_leaves_no_set_on_the_node_nor_in_s3(
    s3: Any, aws_env: str, tmp_path: Path
) -> None:
    """Two nodes, each with a folder of its own: node 1 writes a checkpoint, node 0 none.
    Node 1's set and its upload stay; node 0's folder goes at its agent's end and nothing of
    it is in S3 (a job that writes nothing leaves no set)."""
    entry = (
        "import os, pathlib\n"
        "d = pathlib.Path(os.environ['SKYINFRA_CHECKPOINT_DIR'])\n"
        "if os.environ['NODE'] == '1':\n"
        "    (d / 'step-1').mkdir()\n"
        "    (d / 'step-1/state.bin').write_bytes(b'node 1')\n"
    )
    dirs = two_node_job(tmp_path, aws_env, "job-3", entry)
    states = [d / "runs" / "job-3" / "node.json" for d in dirs]
    until = time.monotonic() + 60
    while not all(
        json.loads(p.read_text() if p.is_file() else "{}").get("state") == "ended" for p in states
    ):
        assert time.monotonic() < until, "the agents did not end"
        time.sleep(0.2)
    assert json.loads((dirs[0] / "jobs" / "job-3.json").read_text())["state"] == "succeeded"
    assert not (dirs[0] / "checkpoints" / "job-3").exists()
    assert files_of(dirs[1] / "checkpoints" / "job-3") == {"step-1/state.bin": b"node 1"}
    assert keys(s3, "team/ckpts/job-3/nodes/node-0/") == []
    assert list(manifest(s3, "job-3", 1)["files"]) == ["step-1/state.bin"]


@pytest.mark.slow
def test_a_restore_that_fails_fails_the_node_instead_of_starting_from_scratch(
    s3: Any, aws_env: str, tmp_path: Path
) -> None:
    node_dir = tmp_path / "node"
    node_dir.mkdir()
    settings = {"url": "s3://no-such-bucket/team", "region": REGION}
    settings["bucket_url"] = f"{aws_env}/no-such-bucket"
    (node_dir / "checkpoints.json").write_text(json.dumps(settings))
    argv = [
        sys.executable, "-m", "skyinfra_runtime", "supervise", "--job", "job-3",
        "--node-dir", str(node_dir), "--node", "0", "--nodes", "1",
        "--", sys.executable, "-c", "print('the entry ran')",
    ]  # fmt: skip
    env = node_env()
    assert subprocess.run(argv, env=env, capture_output=True, timeout=60).returncode == 0
    record = node_dir / "jobs" / "job-3.json"
    until = time.monotonic() + 60
    while json.loads(record.read_text() if record.is_file() else "{}").get("state") in (
        None,
        "starting",
        "running",
    ):
        assert time.monotonic() < until, "the job did not end"
        time.sleep(0.2)
    job = json.loads(record.read_text())
    assert job["state"] == "failed" and job["nodes"][0]["exit_code"] == 3
    log = (node_dir / "runs" / "job-3" / "output.log").read_text()
    assert "could not restore the checkpoints" in log and "NoSuchBucket" in log
    assert "the entry ran" not in log


# Multipart uploads (files from the threshold up; S3 holds at most 5 GiB in one PUT), against
# moto's server over HTTP: a threshold and parts of S3's smallest size keep the files small.
PARTS_OF_5_MIB = {"multipart_threshold": 6 * MiB, "part_size": MIN_PART_SIZE}


def bucket_at(moto: str, **settings: int) -> Bucket:
    return Bucket(f"{moto}/{BUCKET}", REGION, CredentialSource(), **settings)


def put(bucket: Bucket, key: str, path: Path, sha256: str, size: int | None = None) -> None:
    with path.open("rb") as handle:
        bucket.put_file(key, handle, path.stat().st_size if size is None else size, sha256)


def uploads_in_progress(s3: Any) -> list[str]:
    return [u["Key"] for u in s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])]


def test_a_file_over_the_threshold_goes_up_in_parts_and_round_trips(
    s3: Any, aws_env: str, tmp_path: Path
) -> None:
    big, small = tmp_path / "big.bin", tmp_path / "small.bin"
    big.write_bytes(os.urandom(11 * MiB + 12345))  # 5 MiB, 5 MiB and the rest
    small.write_bytes(os.urandom(6 * MiB - 1))  # one byte under the threshold
    bucket = bucket_at(aws_env, **PARTS_OF_5_MIB)
    for path in (big, small):
        put(bucket, f"objects/{path.name}", path, sha256_file(path))
    for path in (big, small):
        got = s3.get_object(Bucket=BUCKET, Key=f"objects/{path.name}")
        assert got["Body"].read() == path.read_bytes()
    # A multipart object's ETag ends with its number of parts; one PUT's is the MD5.
    assert s3.head_object(Bucket=BUCKET, Key="objects/big.bin")["ETag"].endswith('-3"')
    assert "-" not in s3.head_object(Bucket=BUCKET, Key="objects/small.bin")["ETag"]
    assert uploads_in_progress(s3) == []
    # Each byte went once; beside them only the list of parts that completes the upload.
    extra = bucket.sent_bytes - big.stat().st_size - small.stat().st_size
    assert 0 < extra < 1024


@pytest.mark.parametrize(
    ("change", "said"),
    [
        # The same size, other bytes in part 2: every part is whole, the object is not the
        # content the manifest will name.
        ("rewrite", "no longer the content hashed before"),
        # Shorter than the size given: part 3 cannot be read whole.
        ("truncate", "the file ended 1048576 B before part 3's end"),
    ],
)
def test_a_file_that_changed_after_it_was_hashed_aborts_the_upload(
    s3: Any, aws_env: str, tmp_path: Path, change: str, said: str
) -> None:
    path = tmp_path / "ckpt.bin"
    path.write_bytes(os.urandom(11 * MiB))
    size, sha256 = path.stat().st_size, sha256_file(path)
    with path.open("r+b") as handle:
        if change == "rewrite":
            handle.seek(6 * MiB)
            handle.write(os.urandom(4096))
        else:
            handle.truncate(10 * MiB)
    with pytest.raises(OSError, match=said):
        put(bucket_at(aws_env, **PARTS_OF_5_MIB), "objects/ckpt", path, sha256, size)
    assert keys(s3, "objects/") == []
    assert uploads_in_progress(s3) == []  # aborted: no parts left stored (and billed)


def test_parts_that_s3_refuses_abort_the_upload(s3: Any, aws_env: str, tmp_path: Path) -> None:
    """S3 (moto too) refuses to complete an upload whose parts but the last are under 5 MiB
    (EntityTooSmall). Our own setting refuses such a part size; it is stepped past here to
    get S3's refusal."""
    path = tmp_path / "ckpt.bin"
    path.write_bytes(os.urandom(3 * MiB))
    bucket = bucket_at(aws_env, multipart_threshold=1)
    bucket.part_size = MiB
    with pytest.raises(S3Error, match="EntityTooSmall"):
        put(bucket, "objects/ckpt", path, sha256_file(path))
    assert keys(s3, "objects/") == []
    assert uploads_in_progress(s3) == []


@pytest.mark.slow
def test_checkpoint_sync_uploads_a_big_file_in_parts_and_restores_it_whole(
    s3: Any, aws_env: str, tmp_path: Path
) -> None:
    """The nodes' process, the threshold and part size set in its environment."""
    node0 = tmp_path / "node-0"
    write(node0, "step_1/weights.bin", os.urandom(11 * MiB))
    env = node_env(**{THRESHOLD_ENV: str(6 * MiB), PART_SIZE_ENV: str(MIN_PART_SIZE)})
    done = subprocess.run(
        sync_cmd(aws_env, node0, 0, "big", "--once"), env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    entry = manifest(s3, "big", 0)["files"]["step_1/weights.bin"]
    key = f"team/ckpts/big/nodes/node-0/objects/{entry['sha256']}"
    assert s3.head_object(Bucket=BUCKET, Key=key)["ETag"].strip('"').endswith("-3")
    fresh = tmp_path / "replacement"
    run_once(aws_env, fresh, 0, "big")
    assert files_of(fresh) == files_of(node0)
    assert uploads_in_progress(s3) == []
