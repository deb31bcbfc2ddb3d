"""Facts about this node, printed as one JSON line (`skyinfra verify`'s checks read them).

Usage: python probe.py CONFIG_JSON where CONFIG_JSON holds node_dir, node (index),
topology (path), frameworks ([[name, keras backend or null], ...]) and gpu (bool).
Never raises: every fact that cannot be had is reported with the error.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import io
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from typing import Any


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def runtime(node_dir: str) -> dict[str, Any]:
    script = os.path.join(node_dir, "venv", "bin", "skyinfra-runtime")
    out: dict[str, Any] = {"launcher": script, "launcher_exists": os.path.isfile(script)}
    try:
        import importlib.metadata

        import skyinfra_runtime

        out["version"] = getattr(skyinfra_runtime, "__version__", None)
        out["file"] = skyinfra_runtime.__file__
        try:
            out["dist_version"] = importlib.metadata.version("skyinfra-runtime")
        except importlib.metadata.PackageNotFoundError:
            out["dist_version"] = None
    except Exception as exc:
        out["error"] = _error(exc)
    return out


def framework(name: str, keras_backend: str | None) -> dict[str, Any]:
    if keras_backend:
        os.environ["KERAS_BACKEND"] = keras_backend
    try:
        # Frameworks print banners and warnings at import: keep this script's one JSON line.
        with contextlib.redirect_stdout(io.StringIO()):
            module = __import__(name)
        return {"version": str(getattr(module, "__version__", "")), "file": module.__file__}
    except Exception as exc:
        return {"error": _error(exc)}


def topology(path: str, node: int) -> dict[str, Any]:
    out: dict[str, Any] = {"path": path, "present": os.path.isfile(path)}
    if not out["present"]:
        return out
    try:
        from skyinfra_runtime.topology import load_topology, node_index

        topo = load_topology(path)
        index = node_index(topo, str(node))
        me = topo.nodes[index]
        out["topology"] = topo.to_dict()
        out["index"] = index
        out["private_ip"] = me.private_ip
        out["digest"] = hashlib.sha256(
            json.dumps(topo.to_dict(), sort_keys=True).encode()
        ).hexdigest()
        try:  # an address of this machine can be bound; another machine's cannot
            with socket.socket() as probe:
                probe.bind((me.private_ip, 0))
            out["address_is_mine"] = True
        except OSError as exc:
            out["address_is_mine"] = False
            out["address_error"] = _error(exc)
    except Exception as exc:
        out["error"] = _error(exc)
    return out


def gpus(frameworks: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    smi = shutil.which("nvidia-smi")
    if smi is None:
        out["driver_error"] = "nvidia-smi is not on PATH (no NVIDIA driver?)"
    else:
        try:
            listing = subprocess.run(
                [smi, "-L"], capture_output=True, text=True, timeout=60, check=False
            )
            lines = [ln for ln in listing.stdout.splitlines() if ln.startswith("GPU ")]
            out["driver_count"] = len(lines)
            if listing.returncode != 0:
                out["driver_error"] = (listing.stderr or listing.stdout).strip()[-300:]
        except (OSError, subprocess.SubprocessError) as exc:
            out["driver_error"] = _error(exc)
    seen: dict[str, Any] = {}
    if "torch" in frameworks:
        try:
            import torch

            seen["torch"] = int(torch.cuda.device_count())
        except Exception as exc:
            seen["torch"] = _error(exc)
    if "jax" in frameworks:
        try:
            import jax

            seen["jax"] = len([d for d in jax.devices() if d.platform == "gpu"])
        except Exception as exc:
            seen["jax"] = _error(exc)
    out["frameworks"] = seen
    # EFA devices show up as RDMA devices (rdmap*) of the efa driver.
    out["efa_devices"] = sorted(
        os.path.basename(p)
        for p in glob.glob("/sys/class/infiniband/*")
        if os.path.realpath(os.path.join(p, "device", "driver")).endswith("/efa")
    )
    return out


def main() -> None:
    config = json.loads(sys.argv[1])
    # jax would take 75% of each GPU's memory just to list its devices.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    node_dir = config["node_dir"]
    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "runtime": runtime(node_dir),
        "topology": topology(config["topology"], int(config["node"])),
    }
    try:
        facts["disk_free"] = shutil.disk_usage(node_dir).free
    except OSError as exc:
        facts["disk_error"] = _error(exc)
    facts["frameworks"] = {
        name: framework(name, backend) for name, backend in config.get("frameworks", [])
    }
    if config.get("gpu"):
        facts["gpu"] = gpus([name for name, _ in config.get("frameworks", [])])
    print("skyinfra-verify-facts " + json.dumps(facts), flush=True)


if __name__ == "__main__":
    main()
