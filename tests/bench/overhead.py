"""Figure 2: runtime overhead. The same 2-process Keras-on-JAX job (first_step_entry.py)
launched three ways on this machine, over loopback:

- `skyinfra run` on a 2-node local cluster (copy, launch, plugins, entry);
- `skyinfra-runtime launch` run by hand once per node against a topology file (plugins, entry);
- handwritten_job.py: two plain Python processes doing the distributed set-up themselves
  (jax.distributed.initialize with gloo, Keras DataParallel) and the same fit.

Each is timed from its start to the last process's end; the entries record when they were
entered, when keras was imported, when fit started, the first step and the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import HERE, VENV_BIN, BenchError, base_env, cli, free_port_pair, project, stats
from local_cluster import KERAS, head_breakdown, worker_values

PHASES = ("entered", "imported", "fit_start", "first_step", "done")


def _phases(started: float, values: dict[str, float]) -> dict[str, float]:
    return {name: values[name] - started for name in PHASES if name in values}


def _topology(port: int) -> dict[str, Any]:
    return {
        "schema": 1,
        "cluster": "bench",
        "provider": "local",
        "head_addr": "127.0.0.2",
        "head_port": port,
        "procs_per_node": 1,
        "plugins": [
            {"name": "jax", "options": {}},
            {"name": "keras", "options": {"backend": "jax"}},
        ],
        "nodes": [
            {
                "index": i,
                "name": f"node-{i}",
                "private_ip": f"127.0.0.{2 + i}",
                "public_ip": None,
                "instance_id": f"local-bench-{i}",
                "accelerator": None,
            }
            for i in range(2)
        ],
    }


def _two(argvs: list[list[str]], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            a, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for a in argvs
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    elapsed = time.perf_counter() - started
    for p, out in zip(procs, outs, strict=True):
        if p.returncode != 0:
            raise BenchError(f"{p.args} failed ({p.returncode}):\n{out}")
    return elapsed


def overhead(reps: int) -> dict[str, Any]:
    env = base_env()
    skyinfra_s, launch_s, hand_s = [], [], []
    skyinfra_parts: list[dict[str, float]] = []
    launch_phases: list[dict[str, float]] = []
    hand_phases: list[dict[str, float]] = []
    with project(2, KERAS) as root:
        cli(["up", "--yes"], root, env)
        try:
            for _ in range(reps):
                started = time.time()
                elapsed, out = cli(["run", "first_step_entry.py:main"], root, env)
                skyinfra_s.append(elapsed)
                parts = head_breakdown(out)
                values = worker_values(root)[0]
                parts.update({f"entry {k}": v for k, v in _phases(started, values).items()})
                skyinfra_parts.append(parts)
        finally:
            cli(["down", "--yes"], root, env)
    for _ in range(reps):
        with tempfile.TemporaryDirectory(prefix="skyinfra-bench-launch-") as tmp:
            work = Path(tmp)
            (work / "topology.json").write_text(json.dumps(_topology(free_port_pair())))
            (work / "first_step_entry.py").write_text((HERE / "first_step_entry.py").read_text())
            topology = str(work / "topology.json")
            launcher = str(VENV_BIN / "skyinfra-runtime")
            argvs = [
                [launcher, "launch", "--topology", topology, "--node", str(i),
                 "--result", str(work / f"result-{i}.json"), "first_step_entry.py:main"]
                for i in range(2)
            ]  # fmt: skip
            started = time.time()
            launch_s.append(_two(argvs, work, env))
            result = json.loads((work / "result-0.json").read_text())
            launch_phases.append(_phases(started, result["workers"][0]["value"]))
    for _ in range(reps):
        with tempfile.TemporaryDirectory(prefix="skyinfra-bench-hand-") as tmp:
            work = Path(tmp)
            port = free_port_pair()
            job = str(HERE / "handwritten_job.py")
            argvs = [
                [sys.executable, job, str(i), str(port), str(work / f"t-{i}.json")]
                for i in range(2)
            ]
            started = time.time()
            hand_s.append(_two(argvs, work, env))
            hand_phases.append(_phases(started, json.loads((work / "t-0.json").read_text())))

    def median_parts(samples: list[dict[str, float]]) -> dict[str, float]:
        keys = {k for s in samples for k in s}
        return {k: stats([s[k] for s in samples if k in s])["median"] for k in sorted(keys)}

    runs = stats(skyinfra_s)
    launches = stats(launch_s)
    hands = stats(hand_s)
    return {
        "skyinfra_run_s": runs,
        "runtime_launch_s": launches,
        "handwritten_s": hands,
        "ratio_run_to_handwritten": round(runs["median"] / hands["median"], 2),
        "ratio_launch_to_handwritten": round(launches["median"] / hands["median"], 2),
        "skyinfra_run_parts_s": median_parts(skyinfra_parts),
        "runtime_launch_parts_s": median_parts(launch_phases),
        "handwritten_parts_s": median_parts(hand_phases),
    }
