"""Figures 1, 3 and 4 on the local target, through the CLI as a user runs it:

1. time to first step: `up` of 2 nodes, then `run` of the Keras-on-JAX entry until its first
   training step on every node; and the whole `up + run + down`;
3. fan-out: `run` of a trivial entry on 1, 2, 4 and 8 nodes;
4. `up` and `down` of 1, 2, 4 and 8 nodes, the nodes installed with uv and with pip.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from common import base_env, cli, project, stats

SIZES = (1, 2, 4, 8)
KERAS = ("jax", "keras:backend=jax")
# `run`'s own account of the head's way to its entrypoint (skyinfra/run/startup.py).
HEAD_LINE = re.compile(r"node-0 reached its entrypoint ([0-9.]+) s after `run` began: (.*)$", re.M)


def worker_values(root: Path) -> dict[int, dict[str, float]]:
    runs = sorted((root / ".skyinfra" / "clusters" / "bench" / "runs").iterdir())
    values = {}
    for result in sorted(runs[-1].glob("node-*.result.json")):
        data = json.loads(result.read_text())
        values[int(data["node"])] = data["workers"][0]["value"]
    return values


def head_breakdown(stdout: str) -> dict[str, float]:
    """``{"entry": s, "copy": s, "launch": s, "plugin jax": s, ...}`` from `run`'s output."""
    match = HEAD_LINE.search(stdout)
    if not match:
        return {}
    parts: dict[str, float] = {"entry": float(match.group(1))}
    for part in match.group(2).split(", "):
        words = part.split()  # "plugin jax 2.6 s"
        parts[" ".join(words[:-2])] = float(words[-2])
    return parts


def first_step(reps: int) -> dict[str, Any]:
    """Figure 1."""
    env = base_env()
    to_first, whole, up_s, run_s = [], [], [], []
    for _ in range(reps):
        with project(2, KERAS) as root:
            started = time.time()
            up, _ = cli(["up", "--yes"], root, env)
            run_started = time.time()
            cli(["run", "first_step_entry.py:main"], root, env)
            firsts = [v["first_step"] for v in worker_values(root).values()]
            cli(["down", "--yes"], root, env)
            to_first.append(max(firsts) - started)
            whole.append(time.time() - started)
            up_s.append(up)
            run_s.append(max(firsts) - run_started)
    return {
        "up_to_first_step_all_nodes_s": stats(to_first),
        "up_s": stats(up_s),
        "run_to_first_step_s": stats(run_s),
        "up_run_down_s": stats(whole),
    }


def up_down(reps: int, installer: str, sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    """Figure 4 (and figure 3 on the uv clusters: one trivial `run` per cycle)."""
    env = {**base_env(), "SKYINFRA_NODE_INSTALLER": installer}
    out: dict[str, Any] = {}
    for n in sizes:
        ups, downs, runs = [], [], []
        for _ in range(reps):
            with project(n) as root:
                ups.append(cli(["up", "--yes"], root, env)[0])
                try:
                    if installer == "uv":
                        runs.append(cli(["run", "trivial_entry.py:main"], root, env)[0])
                finally:
                    downs.append(cli(["down", "--yes"], root, env)[0])
        out[str(n)] = {"up_s": stats(ups), "down_s": stats(downs)}
        if runs:
            out[str(n)]["run_trivial_s"] = stats(runs)
    return out
