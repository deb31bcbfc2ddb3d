"""Figure 21, a node's install from the S3 wheelhouse beside one from a package index (issue
46), both on loopback: moto's S3 server (this process) holding a wheelhouse staged as `up`
stages it (targets/aws/wheelhouse_stage.py), and a PEP 503 index folder of the very same wheels
served by http.server (this process). One "node" is what a private node's provision.sh does
(fetch-s3-object.py --wheelhouse: the index object and every wheel, each checked against its
sha256, then `uv pip install --offline --find-links`), or what a public node does in its place
(`uv pip install --index-url`), each into a fresh venv with an empty uv cache. 1 node, then 8
at once (the wheelhouse is staged once for all of them: a second cluster stages nothing).

    python tests/bench/wheelhouse_install.py [--reps N] [--requirements jax keras]
        [--out FILE] [--markdown BENCHMARKS.md] [--from-json FILE]

The wheels come from the suite's dependency wheelhouse (`make wheelhouse`, or
SKYINFRA_WHEELHOUSE): pip downloads nothing from any index. The nodes' platform is this
machine's (this Python's version). Not part of `make test` or `make bench`; nothing here
asserts a time.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import http.server
import importlib.metadata
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, VENV_BIN, BenchError, figure_script, machine, splice_figure, stats

sys.path.insert(0, str(REPO))

REGION = "us-east-1"
OWNER = "123456789012"  # moto's account
NODE_COUNTS = (1, 8)
FETCH_SCRIPT = REPO / "infra" / "scripts" / "fetch-s3-object.py"


def _uv() -> str:
    found = shutil.which("uv", path=str(VENV_BIN)) or shutil.which("uv")
    if found is None:
        raise BenchError("no uv beside this Python")
    return found


class _CountingHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the index folder, counting the bytes of every response body it sends."""

    sent = 0
    lock = threading.Lock()

    def copyfile(self, source: Any, outputfile: Any) -> None:
        sent = 0
        while chunk := source.read(1 << 20):
            outputfile.write(chunk)
            sent += len(chunk)
        with _CountingHandler.lock:
            _CountingHandler.sent += sent

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _index_server(root: Path) -> Iterator[str]:
    handler = functools.partial(_CountingHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()


def _pep503(wheels: Path, root: Path) -> None:
    """root/simple/<project>/index.html linking root/files/<wheel>#sha256=... (PEP 503), each
    wheel's METADATA beside it as <wheel>.metadata (PEP 658, as PyPI serves it: without it uv
    reads a wheel's metadata by downloading the whole wheel, http.server having no ranges)."""
    files = root / "files"
    files.mkdir(parents=True)
    projects: dict[str, list[str]] = {}
    for wheel in sorted(wheels.glob("*.whl")):
        os.link(wheel, files / wheel.name)
        with zipfile.ZipFile(wheel) as archive:
            (entry,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
            metadata = archive.read(entry)
        (files / f"{wheel.name}.metadata").write_bytes(metadata)
        name = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        meta = hashlib.sha256(metadata).hexdigest()
        projects.setdefault(name, []).append(
            f'<a href="../../files/{wheel.name}#sha256={digest}" '
            f'data-core-metadata="sha256={meta}" data-dist-info-metadata="sha256={meta}">'
            f"{wheel.name}</a>"
        )
    for name, links in projects.items():
        page = root / "simple" / name / "index.html"
        page.parent.mkdir(parents=True)
        page.write_text(
            "<!DOCTYPE html><html><body>\n" + "<br>\n".join(links) + "\n</body></html>\n"
        )


def _stage(s3: Any, requirements: tuple[str, ...], work: Path) -> tuple[Any, Path]:
    """The wheelhouse in moto's S3 as `up` stages it, and the folder of its wheels."""
    from skyinfra.targets.aws.staging import default_bucket_name
    from skyinfra.targets.aws.wheelhouse import NodePlatform, wheelhouse_prefix
    from skyinfra.targets.aws.wheelhouse_stage import WheelhouseRequest, stage_wheelhouse
    from tests.conftest import offline_pip_env, require_wheelhouse

    glibc = platform.libc_ver()[1].split(".")
    node = NodePlatform(
        python=f"{sys.version_info[0]}.{sys.version_info[1]}",
        machine=platform.machine(),
        glibc=(2, int(glibc[1])),
    )
    request = WheelhouseRequest(
        bucket=default_bucket_name(OWNER, REGION),
        region=REGION,
        owner=OWNER,
        requirements=requirements,
        platform=node,
        fields={r: "python_packages" for r in requirements},
        python=sys.executable,
    )
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(offline_pip_env(saved))
    os.environ["PIP_FIND_LINKS"] = str(require_wheelhouse())
    try:
        staged = stage_wheelhouse(s3, request)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    wheels = work / "wheels"
    wheels.mkdir()
    prefix = wheelhouse_prefix(staged.index.key)
    for f in staged.index.files:
        s3.download_file(request.bucket, prefix + f.name, str(wheels / f.name))
    return staged, wheels


def _node_command(side: str, node: Path, source: dict[str, str]) -> list[str]:
    venv, reqs = node / "venv", source["requirements_file"]
    make_venv = f"{_uv()} venv --quiet --python {sys.executable} {venv}"
    install = f"{_uv()} pip install --quiet --python {venv}/bin/python -r {reqs}"
    if side == "s3":
        fetch = (
            f"{sys.executable} {FETCH_SCRIPT} --wheelhouse {source['index_url']} {REGION} "
            f"{source['index_sha256']} {node}/wheelhouse"
        )
        steps = [fetch, make_venv, f"{install} --offline --find-links {node}/wheelhouse"]
    else:
        steps = [make_venv, f"{install} --index-url {source['index']}"]
    return ["bash", "-c", " && ".join(steps)]


def _nodes(
    side: str, count: int, work: Path, source: dict[str, str], env: dict[str, str]
) -> list[float]:
    """``count`` nodes installing at once; each one's wall seconds."""
    took: list[float] = [0.0] * count
    errors: list[str] = []

    def one(i: int) -> None:
        node = work / f"{side}-{count}-{i}"
        node.mkdir()
        node_env = {**env, "UV_CACHE_DIR": str(node / "uv-cache")}
        started = time.perf_counter()
        done = subprocess.run(
            _node_command(side, node, source), env=node_env, capture_output=True, text=True
        )
        took[i] = time.perf_counter() - started
        if done.returncode != 0:
            errors.append(f"{side} node {i}: {done.stdout}\n{done.stderr}")
        shutil.rmtree(node, ignore_errors=True)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise BenchError(errors[0][-3000:])
    return took


def measure(reps: int, packages: list[str]) -> dict[str, Any]:
    import boto3
    from moto.server import ThreadedMotoServer

    from skyinfra.targets.aws.endpoints import Emulator, boto3_client_kwargs
    from skyinfra.targets.aws.wheelhouse import requirement_set
    from tests.support.aws import DUMMY_AWS_ENV
    from tests.support.aws_fixtures import free_port

    at_start = machine()
    os.environ.update(DUMMY_AWS_ENV)  # moto's dummies, for the client here and the nodes' fetch
    uv_version = importlib.metadata.version("uv")
    requirements = requirement_set(None, packages, uv_version)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        with tempfile.TemporaryDirectory(prefix="skyinfra-bench-wheelhouse-") as tmp:
            work = Path(tmp)
            s3 = boto3.client(
                "s3", **boto3_client_kwargs(REGION, Emulator(url=f"http://127.0.0.1:{port}"))
            )
            staged, wheels = _stage(s3, requirements, work)
            _pep503(wheels, work / "index")
            reqs = work / "requirements.txt"
            reqs.write_text("\n".join(requirements) + "\n")
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "AWS_"))}
            env.update(DUMMY_AWS_ENV)
            env.pop("PYTHONPATH", None)
            index_json = len(staged.index.to_json().encode())
            with _index_server(work / "index") as index:
                source = {
                    "index_url": staged.index_url,
                    "index_sha256": staged.index_sha256,
                    "index": index,
                    "requirements_file": str(reqs),
                }
                seconds: dict[str, dict[int, list[float]]] = {"s3": {}, "index": {}}
                served: dict[int, list[int]] = {}
                for _ in range(reps):
                    for count in NODE_COUNTS:
                        for side in ("s3", "index"):
                            before = _CountingHandler.sent
                            took = _nodes(side, count, work, source, env)
                            seconds[side].setdefault(count, []).extend(took)
                            if side == "index":
                                served.setdefault(count, []).append(
                                    (_CountingHandler.sent - before) // count
                                )
    finally:
        server.stop()
    return {
        "machine": at_start,
        "requirements": list(requirements),
        "wheels": len(staged.index.files),
        "wheel_bytes": staged.index.total_bytes,
        "s3_bytes_per_node": staged.index.total_bytes + index_json,
        "index_bytes_per_node": {str(c): max(v) for c, v in served.items()},
        "seconds_per_node": {
            side: {str(c): stats(v) for c, v in by_count.items()}
            for side, by_count in seconds.items()
        },
    }


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def section(fig: dict[str, Any], date: str, notes: str = "") -> list[str]:
    out = ["## 21. A node's install: the S3 wheelhouse beside a package index (loopback)", ""]
    if "error" in fig:
        return [*out, f"failed: `{fig['error'][:300]}`", ""]
    m, per = fig["machine"], fig["seconds_per_node"]
    rows = []
    for count in (str(c) for c in NODE_COUNTS):
        for side, what in (("s3", "S3 wheelhouse (moto)"), ("index", "PEP 503 index")):
            v = per[side][count]
            got = fig["s3_bytes_per_node"] if side == "s3" else fig["index_bytes_per_node"][count]
            rows.append(
                f"| {count} | {what} | {v['median']:.2f} s | {v['min']:.2f} s | "
                f"{v['max']:.2f} s | {_mb(got)} |"
            )
    reps = per["s3"]["1"]["n"]
    return [
        *out,
        f"Measured {date}, {reps} repetition(s) (`python tests/bench/wheelhouse_install.py`, "
        f"not part of `make bench`), on {m['cpus']} cores ({m['processor']}, {m['cpu_model']}), "
        f"{m['memory_gib']} GiB, Python {m['python']}; load average at start "
        f"{m['load_average_at_start']}, at end {fig.get('load_average_at_end', '?')}.",
        *([notes] if notes else []),
        "",
        f"One node installs {', '.join(f'`{r}`' for r in fig['requirements'])} "
        f"({fig['wheels']} wheels, {_mb(fig['wheel_bytes'])}) into a fresh venv with an empty "
        "uv cache. From the S3 wheelhouse, as a private node's provision.sh does: "
        "fetch-s3-object.py --wheelhouse (SigV4-signed GETs of the index object and every "
        "wheel, each checked against its sha256) from moto's S3 on 127.0.0.1, then "
        "`uv pip install --offline --find-links`. From an index, as a public node does: "
        "`uv pip install --index-url` against a PEP 503 folder of the same wheels served by "
        "http.server on 127.0.0.1. With 8, the nodes start at once; the wheelhouse was "
        "staged once before (a second cluster with the same requirements stages nothing: "
        "tests/integration/aws/test_wheelhouse.py).",
        "",
        "| nodes | from | seconds per node, median | min | max | bytes fetched per node |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        "Bytes: the S3 side fetches every wheel of the index and the index object (its sizes, "
        "from the index); the index side, what http.server sent (its pages, each wheel's "
        "METADATA file as PyPI serves it (PEP 658) and the wheels uv chose), per node. On "
        "loopback neither side waits on a network: the seconds are the "
        "CPU of fetching (Python's SigV4 and sha256 on the S3 side, uv's own client on the "
        "other), unpacking and linking, on a shared 2-core machine, so 8 nodes at once share "
        "those two cores. Against EC2 the S3 side reads through the subnet's gateway endpoint "
        "with no NAT charge; the index side needs NAT on a private network.",
        "",
    ]


def splice(markdown: str, result: dict[str, Any]) -> str:
    return splice_figure(
        markdown, 21, section(result, result.get("date", "?"), result.get("notes", ""))
    )


def main() -> None:
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--requirements", nargs="+", default=["jax", "keras"])

    figure_script(splice, lambda ns: measure(ns.reps, ns.requirements), add_arguments)


if __name__ == "__main__":
    main()
