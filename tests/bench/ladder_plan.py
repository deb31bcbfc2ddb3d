"""Figure 18, the ladder's review (issue 44): `skyinfra plan` of a six-rung ladder (two
instance types x three regions) beside `plan` of one rung (the first of them), the CLI as a
user runs it against moto's server (this process, loopback only; aws_emulated.emulator), with
the embedded Terraform. Goal: the six rungs' plan at most 1.5x the one rung's (the lookups per
rung run concurrently). Each side planned once before timing (Terraform's init, the provider
from the mirror), then the two alternate in their own projects.

    python tests/bench/ladder_plan.py [--reps N] [--out FILE]

Not part of `make test` or `make bench`; nothing here asserts a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from aws_emulated import UBUNTU_DLAMI, emulator
from common import (
    VENV_BIN,
    BenchError,
    figure_script,
    machine,
    ratio_verdict,
    ratios,
    splice_figure,
    stats,
)

TYPES = ("p5en.48xlarge", "p5.48xlarge")
REGIONS = ("us-east-1", "us-west-2", "us-east-2")
GOAL_RATIO = 1.5


def _spec(name: str, key: str, types: tuple[str, ...], regions: tuple[str, ...]) -> str:
    return (
        f'name = "{name}"\nprovider = "aws"\nnodes = 2\n[aws]\n'
        f"instance_types = {json.dumps(list(types))}\nregions = {json.dumps(list(regions))}\n"
        f'ami = "{UBUNTU_DLAMI}"\nssh_cidrs = ["203.0.113.7/32"]\nssh_key = "{key}"\n'
        "max_lifetime_hours = 8\nplacement_group = false\n"
    )


def _plan(root: Path, env: dict[str, str]) -> float:
    argv = [str(VENV_BIN / "skyinfra"), "plan"]
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if proc.returncode != 2:  # 2: a plan with changes (a cluster to create)
        raise BenchError(f"plan in {root} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return took


def _rungs(root: Path, name: str) -> list[list[str]]:
    meta = root / ".skyinfra" / "clusters" / name / "plan" / "plan-meta.json"
    ladder = json.loads(meta.read_text()).get("ladder")
    if ladder is None:  # a plan of before one-rung plans kept their rung
        return []
    rungs = ladder["rungs"]
    return [[r["instance_type"], r["region"], r["verdict"]] for r in rungs]


def measure(reps: int) -> dict[str, Any]:
    sides = {
        "one_rung": (TYPES[:1], REGIONS[:1]),
        "six_rungs": (TYPES, REGIONS),
    }
    at_start = machine()
    times: dict[str, list[float]] = {side: [] for side in sides}
    ladders: dict[str, list[list[str]]] = {}
    with emulator() as env, tempfile.TemporaryDirectory(prefix="skyinfra-bench-ladder-") as tmp:
        roots = {}
        for side, (types, regions) in sides.items():
            root = Path(tmp) / side
            root.mkdir()
            root.joinpath("skyinfra.toml").write_text(
                _spec(side.replace("_", "-"), env["BENCH_SSH_KEY"], types, regions)
            )
            roots[side] = root
            _plan(root, env)  # warm: Terraform's init and the provider, outside the timing
            ladders[side] = _rungs(root, side.replace("_", "-"))
        for _ in range(reps):
            for side, root in roots.items():
                times[side].append(_plan(root, env))
    return {
        "machine": at_start,
        "one_rung_plan_s": stats(times["one_rung"]),
        "six_rungs_plan_s": stats(times["six_rungs"]),
        **ratios(times["one_rung"], times["six_rungs"]),
        "goal_ratio": GOAL_RATIO,
        "ladders": ladders,
    }


def _row(what: str, v: dict[str, Any]) -> str:
    return f"| {what} | {v['median']:.2f} s | {v['min']:.2f} s | {v['max']:.2f} s |"


def section(fig: dict[str, Any], date: str, notes: str = "") -> list[str]:
    out = ["## 18. The ladder's review: `plan` of six rungs beside one (AWS, moto)", ""]
    if "error" in fig:
        return [*out, f"failed: `{fig['error'][:300]}`", ""]
    m, six = fig["machine"], fig["six_rungs_plan_s"]
    ratio = fig["ratio_of_medians"]
    verdict = ratio_verdict(fig, GOAL_RATIO)
    added = six["median"] - fig["one_rung_plan_s"]["median"]
    rungs = ", ".join(f"{t} in {r} ({v})" for t, r, v in fig["ladders"]["six_rungs"])
    return [
        *out,
        f"Measured {date}, {six['n']} repetition(s) a side (`python tests/bench/ladder_plan.py`, "
        f"not part of `make bench`), on {m['cpus']} cores ({m['processor']}, {m['cpu_model']}), "
        f"{m['memory_gib']} GiB, Python {m['python']}; load average at start "
        f"{m['load_average_at_start']}, at end {fig.get('load_average_at_end', '?')}.",
        *([notes] if notes else []),
        "",
        "`skyinfra plan` (the CLI, the embedded Terraform and the AWS provider) of a 2-node "
        f"cluster against moto's server on 127.0.0.1: a ladder of six rungs ({rungs}) beside "
        f"one rung ({TYPES[0]} in {REGIONS[0]}). Each side planned once first (Terraform's "
        "init), then the two alternate.",
        "",
        "| | median | min | max |",
        "|---|---|---|---|",
        _row("`plan`, one rung", fig["one_rung_plan_s"]),
        _row("`plan`, six rungs", six),
        "",
        f"Ratio of the medians: {ratio:.2f}x; each repetition's own pair: "
        f"{fig['ratio_per_pair']['median']:.2f}x (min {fig['ratio_per_pair']['min']:.2f}, "
        f"max {fig['ratio_per_pair']['max']:.2f}). Goal (at most {GOAL_RATIO}x): {verdict}.",
        "",
        "Both plans render and plan one rung (the first approved); the ladder adds its "
        "lookups (each rung's zones offering its type, its quota and its image, in a boto3 "
        "session of its own, up to 8 rungs at once: ladder_shell.assess_ladder): "
        f"{added:+.1f} s on the medians here. Against moto on loopback the lookups wait on "
        "nothing, so on two busy cores that is CPU (six sessions and their clients built in "
        "threads under one GIL), not profiled further; against AWS they are round trips, "
        "which the threads overlap. The Terraform plan both sides run moves by seconds from "
        "one run to the next on this machine, so a single pair says little. moto answers no "
        "Service Quotas default-quota call (an error it logs), so each rung's quota headroom "
        "stays unknown.",
        "",
    ]


def splice(markdown: str, result: dict[str, Any]) -> str:
    """BENCHMARKS.md with figure 18's section replaced (or put before the closing notes)."""
    return splice_figure(
        markdown, 18, section(result, result.get("date", "?"), result.get("notes", ""))
    )


def main() -> None:
    figure_script(splice, lambda ns: measure(ns.reps))


if __name__ == "__main__":
    main()
