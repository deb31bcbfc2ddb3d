"""`make bench`: time to first training step on the local target, through the CLI.

Runs what a user runs (`skyinfra up`, `run`, `up` again, `down`) as subprocesses in a
scratch project and reports, per phase, wall-clock seconds; for `run`, the time from the
command's start until each node's first Keras training step (plugins set up, keras imported,
one jitted step done). Results go to stdout and to tests/bench/results/<host>-<date>.json,
with the machine they ran on. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent


def skyinfra(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    argv = [str(VENV_BIN / "skyinfra"), *args]
    started = time.time()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.time() - started
    if proc.returncode != 0:
        sys.exit(
            f"bench: {' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return elapsed, proc.stdout


def machine() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
    }


def run_once(project: Path, env: dict[str, str]) -> dict[str, Any]:
    started = time.time()
    elapsed, _ = skyinfra(["run", "--cluster", "bench", "entry.py:main"], project, env)
    runs = sorted((project / ".skyinfra" / "clusters" / "bench" / "runs").iterdir())
    nodes = {}
    for result in sorted(runs[-1].glob("node-*.result.json")):
        data = json.loads(result.read_text())
        (worker,) = data["workers"]
        times = worker["value"]
        nodes[data["node"]] = {
            "entered_s": round(times["entered"] - started, 2),
            "first_step_s": round(times["first_step"] - started, 2),
        }
    return {"run_total_s": round(elapsed, 2), "nodes": nodes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3, help="`skyinfra run` repetitions")
    ns = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")}
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "nodes": ns.nodes,
        "plugins": ["jax", "keras:backend=jax"],
    }
    with tempfile.TemporaryDirectory(prefix="skyinfra-bench-") as tmp:
        project = Path(tmp)
        shutil.copy(HERE / "first_step_entry.py", project / "entry.py")
        up = ["up", "--name", "bench", "--nodes", str(ns.nodes)]
        up += ["--plugin", "jax", "--plugin", "keras:backend=jax"]
        try:
            report["up_cold_s"] = round(skyinfra(up, project, env)[0], 2)
            report["up_again_no_changes_s"] = round(skyinfra(up, project, env)[0], 2)
            report["runs"] = [run_once(project, env) for _ in range(ns.runs)]
        finally:
            report["down_s"] = round(
                skyinfra(["down", "--yes", "--cluster", "bench"], project, env)[0], 2
            )
    firsts = [max(n["first_step_s"] for n in r["nodes"].values()) for r in report["runs"]]
    report["first_step_all_nodes_median_s"] = round(statistics.median(firsts), 2)
    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    out = out_dir / f"{report['machine']['host']}-{report['date'][:10]}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    print(f"bench: written to {out}")


if __name__ == "__main__":
    main()
