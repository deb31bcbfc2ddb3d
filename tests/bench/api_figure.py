"""Figure 11: the Python API against the CLI. `cluster.run` of a trivial function beside
`skyinfra run` of the same entry (tests/bench/trivial_entry.py:main) on 2 and 8 local nodes,
on one cluster per size, the two interleaved. For the API: the call alone in a warm process
(what a notebook sees), by reference (the project's function) and by value (a lambda:
cloudpickle, the nodes' Python checked), and a fresh process's whole wall (start-up, `import
skyinfra`, the call), which compares with the CLI's wall (start-up, `run`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import BenchError, base_env, cli, machine, project, splice_figure, stats

SIZES = (2, 8)
GOAL_API_OVER_CLI = 1.05

# Run in the project: REPS calls of each kind, their times as JSON on the last line.
SCRIPT = """\
import json, sys, time

import skyinfra
from trivial_entry import main

cluster = skyinfra.Cluster.from_spec("skyinfra.toml")
first = time.perf_counter()
cluster.run(main)
times = {"first_call_s": time.perf_counter() - first, "by_reference": [], "by_value": []}
for _ in range(int(sys.argv[1])):
    t = time.perf_counter()
    cluster.run(main)
    times["by_reference"].append(time.perf_counter() - t)
    t = time.perf_counter()
    cluster.run(lambda: 0)
    times["by_value"].append(time.perf_counter() - t)
print(json.dumps(times))
"""


def _api(root: Path, env: dict[str, str], reps: int) -> tuple[float, dict[str, Any]]:
    (root / "api_bench.py").write_text(SCRIPT)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "api_bench.py", str(reps)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise BenchError(f"api_bench.py failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    data: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return time.perf_counter() - started, data


def api_vs_cli(reps: int, sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    env = base_env()
    out: dict[str, Any] = {"machine": machine()}
    for n in sizes:
        cli_s, ref, val, first, script = [], [], [], [], []
        with project(n) as root:
            cli(["up", "--yes"], root, env)
            try:
                for _ in range(reps):
                    cli_s.append(cli(["run", "trivial_entry.py:main"], root, env)[0])
                    # A fresh process: its first call is the one that compares with the CLI.
                    wall, data = _api(root, env, 1)
                    script.append(wall)
                    first.append(data["first_call_s"])
                    ref += data["by_reference"]
                    val += data["by_value"]
            finally:
                cli(["down", "--yes"], root, env)
        out[str(n)] = {
            "cli_run_s": stats(cli_s),
            "api_call_by_reference_s": stats(ref),
            "api_call_by_value_s": stats(val),
            "api_first_call_s": stats(first),
            # The script's wall holds its first call and one more of each kind.
            "api_script_wall_s": stats(script),
        }
    return out


def section(fig: dict[str, Any] | None, date: str) -> list[str]:
    out = ["## 11. The Python API: `cluster.run` beside `skyinfra run` (a trivial function)", ""]
    if fig is None:
        return [*out, "not run this time", ""]
    if "error" in fig:
        return [*out, f"failed: `{fig['error'][:300]}`", ""]
    m = fig["machine"]
    out += [
        f"Measured {date} on {m['cpus']} cores ({m['processor']}), {m['memory_gib']} GiB, "
        f"Python {m['python']}; load average at start {m['load_average_at_start']}.",
        "",
        "| nodes | `skyinfra run` wall (a fresh process) | `cluster.run`, first call in a "
        "fresh process | `cluster.run` in a warm process, by reference | by value "
        "(cloudpickle) | ratio first call / CLI |",
        "|---|---|---|---|---|---|",
    ]
    verdicts = []
    for n in (k for k in fig if k.isdigit()):
        row = fig[n]
        ratio = row["api_first_call_s"]["median"] / row["cli_run_s"]["median"]
        warm = row["api_call_by_reference_s"]["median"] / row["cli_run_s"]["median"]
        out.append(
            f"| {n} | {_s(row['cli_run_s'])} | {_s(row['api_first_call_s'])} | "
            f"{_s(row['api_call_by_reference_s'])} | {_s(row['api_call_by_value_s'])} | "
            f"{ratio:.2f} (warm: {warm:.2f}) |"
        )
        verdicts.append(f"{n} nodes {ratio:.2f}x")
    worst = max(
        fig[n]["api_first_call_s"]["median"] / fig[n]["cli_run_s"]["median"]
        for n in fig
        if n.isdigit()
    )
    met = "met" if worst <= GOAL_API_OVER_CLI else f"**missed** ({worst:.2f}x)"
    out += [
        "",
        f"Goal (the API at most {GOAL_API_OVER_CLI}x the CLI): {met}: {', '.join(verdicts)} "
        "(first call in a fresh process against the CLI's whole wall, which includes its own "
        "start-up; the script's `import skyinfra` and spec check come before the clock). "
        "A call by value adds the nodes' Python check (their venv's pyvenv.cfg) and the "
        "cloudpickle zip beside the call.",
        "",
    ]
    return out


def _s(stat: dict[str, Any] | None) -> str:
    if not stat:
        return "n/a"
    return f"{stat['median']:.2f} s (min {stat['min']:.2f}, max {stat['max']:.2f}, n={stat['n']})"


def splice(markdown: str, lines: list[str]) -> str:
    """BENCHMARKS.md with figure 11's section replaced (or put before the closing notes)."""
    return splice_figure(markdown, 11, lines)
