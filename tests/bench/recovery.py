"""Recovery time (issue 25): a 2-node Keras-on-JAX (or, --framework torch, torch DDP) job
whose node-1 worker is SIGKILLed after
its second step, restarted by itself (`run --max-restarts 1`): from the worker's death to the
first step of attempt 2 (the latest node's), against a fresh cold `run`'s start to its first
step (the goal: at most 1.2x; with warm workers, 0.4x), and how many nodes' attempt 2 started
on a standby. Also the record's own recovery_s (failure seen by the head -> every node's
launcher of attempt 2 started). Each run starts once both nodes' standbys wait (the last
job's refills would share the cores). Not part of `make test`; nothing here asserts a time.

    python tests/bench/recovery.py [--reps N] [--out FILE] [--kill-after S] [--framework F]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import HERE, base_env, cli, machine, project, stats, wait_for_standbys

# framework -> the cluster's plugins, the entry, and a job env that keeps it off the standbys
# (the cold reference): KERAS_BACKEND, or torch's own default for TORCH_SHOW_CPP_STACKTRACES.
FRAMEWORKS = {
    "keras": (("jax", "keras:backend=jax"), "recovery_entry.py:main", "KERAS_BACKEND=jax"),
    "torch": (("torch",), "recovery_entry.py:torch_main", "TORCH_SHOW_CPP_STACKTRACES=0"),
}


def _summary(root: Path) -> dict[str, Any]:
    runs = sorted((root / ".skyinfra" / "clusters" / "bench" / "runs").iterdir())
    return dict(json.loads((runs[-1] / "summary.json").read_text()))


def _first_steps(summary: dict[str, Any]) -> list[float]:
    return [n["result"]["workers"][0]["value"]["first_step"] for n in summary["nodes"]]


def _warm_nodes(root: Path, job: str, attempt: int) -> int:
    """How many nodes started the attempt's worker 0 on a standby (their timelines)."""
    warm = 0
    for timeline in (root / ".skyinfra/clusters/bench/nodes").glob(
        f"node-*/runs/{job}/timeline.json"
    ):
        said = json.loads(timeline.read_text())["attempts"]
        starts = [a["workers"][0]["start"] for a in said if str(a["attempt"]) == str(attempt)]
        warm += starts[-1:] == ["warm"]
    return warm


def measure(reps: int, kill_after_s: float = 0.0, framework: str = "keras") -> dict[str, Any]:
    plugins, entry, cold_env = FRAMEWORKS[framework]
    env = base_env()
    fresh, recovered, ratio, head_recovery = [], [], [], []
    warm_nodes: list[int] = []  # per repetition: the nodes whose attempt 2 started warm
    parts: dict[str, list[float]] = {
        "death_seen_by_head_s": [],
        "others_ended_s": [],
        "attempt_2_started_s": [],
        "started_to_first_step_s": [],
        "started_to_entered_s": [],
        "entered_to_fit_s": [],
        "fit_to_first_step_s": [],
    }
    with project(2, plugins) as root:
        for name in ("recovery_entry.py", "torch_first_step_entry.py"):
            shutil.copy(HERE / name, root / name)
        cli(["up", "--yes"], root, env)
        try:
            cli(["run", "--checkpoints", "warm", entry], root, env)  # caches
            for rep in range(reps):
                # Each run once both nodes' standbys wait (the last job's refills import
                # jax and keras on the same cores: a cold run beside them would stretch).
                wait_for_standbys(root, "bench")
                started = time.time()
                # The cold reference: a job that sets a framework variable takes no standby.
                argv = ["run", "--env", cold_env, "--checkpoints", f"fresh-{rep}", entry]
                cli(argv, root, env)
                fresh_s = max(_first_steps(_summary(root))) - started
                wait_for_standbys(root, "bench")
                name = f"restart-{rep}"
                argv = [
                    "run",
                    "--max-restarts",
                    "1",
                    "--checkpoints",
                    name,
                    "--env",
                    "KILL_NODE_1=1",
                    "--env",
                    f"KILL_AFTER_S={kill_after_s:g}",
                ]
                cli([*argv, entry], root, env)
                summary = _summary(root)
                died = float((root / ".skyinfra/clusters/bench/checkpoints" / name / "died_at")
                             .read_text())  # fmt: skip
                recovery_s = max(_first_steps(summary)) - died
                first, second = summary["attempts"][:2]
                # Where the time went: the death reaching the head, the others ended, attempt
                # 2's launchers started, then the framework's start to the first step.
                parts["death_seen_by_head_s"].append(first["failed_at"] - died)
                parts["others_ended_s"].append(first["ended_at"] - first["failed_at"])
                parts["attempt_2_started_s"].append(second["started_at"] - first["ended_at"])
                parts["started_to_first_step_s"].append(
                    max(_first_steps(summary)) - second["started_at"]
                )
                # The framework's start, split where the entry notes it (the latest node's).
                values = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]
                entered = max(v["entered"] for v in values)
                fit = max(v["fit_start"] for v in values)
                parts["started_to_entered_s"].append(entered - second["started_at"])
                parts["entered_to_fit_s"].append(fit - entered)
                parts["fit_to_first_step_s"].append(max(_first_steps(summary)) - fit)
                warm_nodes.append(_warm_nodes(root, summary["run_id"], attempt=2))
                fresh.append(fresh_s)
                recovered.append(recovery_s)
                ratio.append(recovery_s / fresh_s)
                head_recovery.append(float(summary["attempts"][1]["recovery_s"]))
        finally:
            cli(["down", "--yes"], root, env)
    return {
        "fresh_run_to_first_step_s": stats(fresh),
        "death_to_first_resumed_step_s": stats(recovered),
        "ratio": stats(ratio),
        "record_recovery_s": stats(head_recovery),
        "attempt_2_warm_nodes": warm_nodes,
        "parts": {name: stats(values) for name, values in parts.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--kill-after", type=float, default=0.0, help="seconds node 1 runs on before its death"
    )
    parser.add_argument("--framework", choices=sorted(FRAMEWORKS), default="keras")
    ns = parser.parse_args()
    recovery = measure(ns.reps, ns.kill_after, ns.framework)
    result = {"machine": machine(), "framework": ns.framework, "recovery": recovery}
    text = json.dumps(result, indent=2)
    print(text)
    if ns.out:
        ns.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
