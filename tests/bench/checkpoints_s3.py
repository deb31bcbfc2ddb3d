"""Figure 11: bytes and wall time per checkpoint uploaded by a node to S3 (moto on loopback).

A node's checkpoint directory gets one step after another (``step_<k>/weights.bin``,
``step_<k>/optimizer.bin`` (twice the weights, as Adam's two moments), ``step_<k>/COMMIT``),
keeping the last two steps, as orbax's ``max_to_keep=2`` does; after each step one upload
round (skyinfra_runtime.ckptsync, the nodes' code) runs. Then a fresh directory restores the
set. Run once: ``python tests/bench/checkpoints_s3.py [--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "runtime" / "src"))

from skyinfra_runtime.ckptsync import Sync  # noqa: E402
from skyinfra_runtime.s3 import Bucket, CredentialSource  # noqa: E402

BUCKET = "bench-ckpts"
SIZES_MB = (0.5, 64)
STEPS = 4


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpu_model() -> str:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def one_size(url: str, weights_mb: float, workdir: Path) -> dict[str, Any]:
    creds = CredentialSource({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
    prefix = f"bench/{weights_mb:g}mb"
    node = workdir / f"node-{weights_mb:g}"
    sync = Sync(Bucket(f"{url}/{BUCKET}", "us-east-1", creds), prefix, node, 0, say=lambda _: None)
    sync.restore()
    weights = int(weights_mb * 1024 * 1024)
    rounds = []
    for step in range(1, STEPS + 1):
        folder = node / f"step_{step}"
        folder.mkdir(parents=True)
        (folder / "weights.bin").write_bytes(os.urandom(weights))
        (folder / "optimizer.bin").write_bytes(os.urandom(2 * weights))
        (folder / "COMMIT").write_text(str(step))
        if step > 2:
            shutil.rmtree(node / f"step_{step - 2}")
        stats = sync.upload(final=True)
        rounds.append({"step": step, "checkpoint_bytes": 3 * weights + 1, **stats})
    unchanged = sync.upload(final=True)
    fresh = workdir / f"fresh-{weights_mb:g}"
    sync2 = Sync(
        Bucket(f"{url}/{BUCKET}", "us-east-1", creds), prefix, fresh, 1, say=lambda _: None
    )
    started = time.monotonic()
    restored = sync2.restore()
    return {
        "weights_mb": weights_mb,
        "rounds": rounds,
        "unchanged_round": unchanged,
        "restore_s": time.monotonic() - started,
        "restored": restored,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    ns = parser.parse_args()
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    try:
        boto3.client(
            "s3",
            region_name="us-east-1",
            endpoint_url=url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).create_bucket(Bucket=BUCKET)
        with tempfile.TemporaryDirectory() as tmp:
            results = [one_size(url, mb, Path(tmp)) for mb in SIZES_MB]
    finally:
        server.stop()
    report = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "load_average": os.getloadavg(),
        "results": results,
    }
    text = json.dumps(report, indent=1)
    if ns.out:
        ns.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
