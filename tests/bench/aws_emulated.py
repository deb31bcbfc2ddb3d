"""Figures 5 and 6 on the AWS target against moto's server (this process, loopback only):

5. engine overhead: `skyinfra up` + `down` (the CLI: preflight, wheel staging, render, the
   embedded Terraform) of a 2-node cluster, against the `terraform` binary applying and
   destroying the same rendered root module (goal: at most 1.10 times as long);
6. scale: render and `terraform plan` (no apply) of 8, 64 and 256 nodes; where a size is
   refused, what refused it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import REPO, BenchError, base_env, cli, stats

REGION = "us-east-1"
UBUNTU_DLAMI = "ami-dca37ea5"  # one of moto's built-in AMIs, as the e2e tests use


@contextmanager
def emulator() -> Iterator[dict[str, str]]:
    """moto's server on 127.0.0.1 with the Deep Learning AMI parameter seeded; the
    environment (dummy credentials, endpoint, provider mirror) skyinfra runs with."""
    import sys

    sys.path.insert(0, str(REPO))
    from moto.server import ThreadedMotoServer

    from tests.support.aws import DUMMY_AWS_ENV, find_plugin_mirror
    from tests.support.aws_fixtures import free_port, seed_dlami

    mirror = find_plugin_mirror()
    if mirror is None:
        raise BenchError("no Terraform provider mirror (SKYINFRA_TF_PROVIDER_MIRROR)")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    seed_dlami(UBUNTU_DLAMI)
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="skyinfra-bench-aws-") as tmp:
        env = {
            **base_env(),
            **DUMMY_AWS_ENV,
            "SKYINFRA_AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "SKYINFRA_TF_PROVIDER_MIRROR": str(mirror),
            "SKYINFRA_TF_PLUGIN_CACHE": str(Path(tmp) / "tf-plugins"),
        }
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            env.pop(name, None)
        key = Path(tmp) / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        env["BENCH_SSH_KEY"] = str(key)
        os.environ.clear()
        os.environ.update(env)
        try:
            yield env
        finally:
            os.environ.clear()
            os.environ.update(saved)
            server.stop()


def spec_text(name: str, nodes: int, key: str) -> str:
    return (
        f'name = "{name}"\nprovider = "aws"\nnodes = {nodes}\n[aws]\n'
        f'region = "{REGION}"\ninstance_type = "t3.micro"\nssh_cidrs = ["203.0.113.7/32"]\n'
        f'ssh_key = "{key}"\nplacement_group = false\nidle_shutdown_minutes = 0\n'
    )


def engine_overhead(reps: int) -> dict[str, Any]:
    """Figure 5."""
    from skyinfra.terraform.config import terraform_env

    terraform = shutil.which("terraform")
    if terraform is None:
        return {"skipped": "no terraform binary on PATH"}
    ours, raw = [], []
    with emulator() as env:
        for i in range(reps):
            with tempfile.TemporaryDirectory(prefix="skyinfra-bench-eng-") as tmp:
                root = Path(tmp)
                (root / "skyinfra.toml").write_text(spec_text(f"eng{i}", 2, env["BENCH_SSH_KEY"]))
                up, _ = cli(["up", "--yes"], root, env)
                down, _ = cli(["down", "--yes"], root, env)
                ours.append(up + down)
                ws = root / ".skyinfra" / "clusters" / f"eng{i}"
                tf_env = terraform_env(ws, env)
                started = time.perf_counter()
                for argv in (
                    ["apply", "-auto-approve", "-input=false"],
                    ["destroy", "-auto-approve"],
                ):
                    proc = subprocess.run(
                        [terraform, *argv], cwd=ws, env=tf_env, capture_output=True, text=True
                    )
                    if proc.returncode != 0:
                        raise BenchError(f"terraform {argv[0]}: {proc.stdout}\n{proc.stderr}")
                raw.append(time.perf_counter() - started)
    a, b = stats(ours), stats(raw)
    return {
        "skyinfra_up_down_s": a,
        "terraform_apply_destroy_s": b,
        "ratio": round(a["median"] / b["median"], 2),
        "terraform_version": subprocess.run(
            [terraform, "version"], capture_output=True, text=True
        ).stdout.splitlines()[0],
    }


def scale(reps: int, sizes: tuple[int, ...] = (8, 64, 256)) -> dict[str, Any]:
    """Figure 6: in this process (render_files, then the embedded Terraform's init + plan)."""
    from skyinfra.errors import SkyinfraError
    from skyinfra.render import OWNED_DIRS, RETIRED_FILES
    from skyinfra.spec import validate_spec
    from skyinfra.targets.aws.cluster_files import render_files
    from skyinfra.terraform import EmbeddedTerraform
    from skyinfra.workspace import Workspace

    out: dict[str, Any] = {}
    with emulator() as env:
        for n in sizes:
            renders, plans, inits = [], [], []
            refused = None
            raw = {
                "name": f"scale{n}",
                "provider": "aws",
                "nodes": n,
                "aws": {
                    "region": REGION,
                    "instance_type": "t3.micro",
                    "ssh_cidrs": ["203.0.113.7/32"],
                    "ssh_key": env["BENCH_SSH_KEY"],
                    "idle_shutdown_minutes": 0,
                },
            }
            try:
                spec = validate_spec(raw)
            except SkyinfraError as err:
                # Past our own validation: what else holds this size (render, Terraform)?
                refused = f"spec: {err}"
                spec = dataclasses.replace(validate_spec({**raw, "nodes": 1}), nodes=n)
            for _ in range(reps):
                with tempfile.TemporaryDirectory(prefix="skyinfra-bench-scale-") as tmp:
                    ws = Workspace(Path(tmp) / f"scale{n}")
                    ws.ensure()
                    try:
                        started = time.perf_counter()
                        files = render_files(spec, ws)
                        renders.append(time.perf_counter() - started)
                        ws.write_files(files, owned_dirs=OWNED_DIRS, retired=RETIRED_FILES)
                        engine = EmbeddedTerraform(ws.path, env=env)
                        started = time.perf_counter()
                        engine.init()
                        inits.append(time.perf_counter() - started)
                        started = time.perf_counter()
                        summary = engine.plan(out="bench.tfplan")
                        plans.append(time.perf_counter() - started)
                    except SkyinfraError as err:
                        refused = (
                            refused + "; then " if refused else ""
                        ) + f"{type(err).__name__}: {err}"
                        break
            entry: dict[str, Any] = {}
            if renders:
                entry["render_s"] = stats(renders)
                tfvars = json.loads(files.get("terraform.tfvars.json", "{}"))
                encoded = tfvars.get("user_data", {})
                sizes_ = [len("".join(v.values())) for v in encoded.values()]
                if sizes_:
                    entry["user_data_bytes_max"] = max(sizes_)
            if inits:
                entry["init_s"] = stats(inits)
            if plans:
                entry["plan_s"] = stats(plans)
                entry["planned_to_add"] = summary.add
            if refused:
                entry["refused"] = refused[:600]
            out[str(n)] = entry
    return out
