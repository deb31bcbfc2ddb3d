"""Figure 19: warm workers. `run` start to the first training step on every node, the same
Keras-on-JAX job (first_step_entry.py) on 2 local nodes started warm (each node's worker is
its standby, jax and keras already imported) and cold (`--env KERAS_BACKEND=jax`: a job
that sets a framework variable starts cold), side by side in one cluster, the two taking
turns so that both see the same load; then a torch DDP job (torch_first_step_entry.py, the
torch plugin, gloo) likewise on a cluster of its own, cold with `--env
TORCH_SHOW_CPP_STACKTRACES=0` (torch's default, but a TORCH_ variable: cold). Each
cluster's first job, on the standbys `up` started (warm: issue 48), is shown on its own;
before each run the benchmark waits until both nodes' standbys are ready (a run right after a
warm one would share the cores with the refills' imports). The Keras job
runs a third way too: cold with each node's JAX compilation cache emptied first (what the
jax plugin's persistent cache saves of the first compile).
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from common import (
    HERE,
    BenchError,
    base_env,
    cli,
    machine,
    project,
    splice_figure,
    stats,
    wait_for_standbys,
)

GOAL = 0.4
NAME = "bench"
KERAS = ("jax", "keras:backend=jax")
TORCH = ("torch",)
KERAS_JOB = ("first_step_entry.py:main", ("--env", "KERAS_BACKEND=jax"))
TORCH_JOB = ("torch_first_step_entry.py:main", ("--env", "TORCH_SHOW_CPP_STACKTRACES=0"))


def _nodes(root: Path) -> Path:
    return root / ".skyinfra" / "clusters" / NAME / "nodes"


def _wait_for_standbys(root: Path) -> None:
    wait_for_standbys(root, NAME)


def _empty_compilation_caches(root: Path) -> None:
    """Each node's JAX compilation cache (the jax plugin's, $SKYINFRA_NODE_DIR/cache/jax)
    removed: the next job compiles everything again."""
    for i in (0, 1):
        cache = _nodes(root) / f"node-{i}" / "cache" / "jax"
        if not cache.is_dir():  # a moved cache would make the uncached runs cached ones
            raise BenchError(f"no compilation cache at {cache}")
        shutil.rmtree(cache)


def _run(root: Path, env: dict[str, str], entry: str, *flags: str) -> dict[str, Any]:
    started = time.time()
    cli(["run", *flags, entry], root, env)
    runs = root / ".skyinfra" / "clusters" / NAME / "runs"
    summary = json.loads((max(runs.iterdir()) / "summary.json").read_text())
    values = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]
    job = summary["run_id"]
    starts = [
        json.loads((_nodes(root) / f"node-{i}" / "runs" / job / "timeline.json").read_text())[
            "attempts"
        ][-1]["workers"][0]["start"]
        for i in (0, 1)
    ]
    return {
        "first_step_s": max(v["first_step"] for v in values) - started,
        "entered_s": max(v["entered"] for v in values) - started,
        "imports_s": max(v["imported"] - v["entered"] for v in values),
        "model_s": max(v["fit_start"] - v["imported"] for v in values),
        "compile_s": max(v["first_step"] - v["fit_start"] for v in values),
        "starts": starts,
    }


def _stats_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {k: stats([r[k] for r in runs]) for k in runs[0] if k != "starts"}


def _side_by_side(
    plugins: tuple[str, ...], job: tuple[str, tuple[str, ...]], reps: int
) -> dict[str, Any]:
    env = base_env()
    entry, cold_flags = job
    warm: list[dict[str, Any]] = []
    cold: list[dict[str, Any]] = []
    uncached: list[dict[str, Any]] = []  # cold, each node's JAX compilation cache emptied
    with project(2, plugins) as root:
        shutil.copy(HERE / "torch_first_step_entry.py", root)
        cli(["up", "--yes"], root, env)
        try:
            _wait_for_standbys(root)  # `up` started them: the first job is warm too
            first = _run(root, env, entry)
            for _ in range(reps):
                # Each run once the standbys wait: a cold run right after a warm one would
                # share the cores with the refills' imports.
                _wait_for_standbys(root)
                warm.append(_run(root, env, entry))
                _wait_for_standbys(root)
                cold.append(_run(root, env, entry, *cold_flags))
                if "jax" in plugins:
                    _empty_compilation_caches(root)
                    uncached.append(_run(root, env, entry, *cold_flags))
        finally:
            cli(["down", "--yes"], root, env)
    if any(s != "warm" for r in [first, *warm] for s in r["starts"]) or any(
        s != "cold" for r in [*cold, *uncached] for s in r["starts"]
    ):
        raise BenchError(
            f"a run did not start as meant: warm {warm}, cold {cold}, uncached {uncached}"
        )
    ratios = [w["first_step_s"] / c["first_step_s"] for w, c in zip(warm, cold, strict=True)]
    return {
        "warm": _stats_of(warm),
        "cold": _stats_of(cold),
        # Judged unrounded: stats() rounds each ratio to 2 decimals, and 0.403 is not 0.4.
        "ratio": {**stats(ratios), "exact_median": round(statistics.median(ratios), 4)},
        **({"cold_uncached": _stats_of(uncached)} if uncached else {}),
        "first_after_up": {k: v for k, v in first.items() if k != "starts"},
    }


def measure(reps: int) -> dict[str, Any]:
    """Keras on JAX (the figure's first table, its keys at the top), then torch DDP."""
    keras = _side_by_side(KERAS, KERAS_JOB, reps)
    return {**keras, "torch": _side_by_side(TORCH, TORCH_JOB, reps), "machine": machine()}


def _verdict(ratio: dict[str, Any]) -> str:
    """The goal's verdict on the median of the unrounded ratios (older results: the rounded)."""
    exact = ratio.get("exact_median", ratio["median"])
    return "met" if exact <= GOAL else f"missed ({exact:.3f}x)"


def section(fig: dict[str, Any] | None, date: str) -> list[str]:
    if not fig:
        return []
    if "error" in fig:
        return ["## 19. Warm workers: `run` start to the first step, warm and cold", "",
                f"Not measured: {fig['error']}", ""]  # fmt: skip
    m, w, c, r = fig["machine"], fig["warm"], fig["cold"], fig["ratio"]

    def s(x: dict[str, Any]) -> str:
        return f"{x['median']:.2f} s (min {x['min']:.2f}, max {x['max']:.2f}, n={x['n']})"

    met = _verdict(r)
    u = fig.get("cold_uncached")
    later = u["first_step_s"]["median"] - c["first_step_s"]["median"] if u else 0.0
    rows = [
        ("`run` start → first step on every node", "first_step_s"),
        ("`run` start → entry entered (plugins set up)", "entered_s"),
        ("the entry's imports (keras, numpy)", "imports_s"),
        ("fit start → first step (the first compile)", "compile_s"),
    ]
    return [
        "## 19. Warm workers: `run` start to the first step, warm and cold",
        "",
        f"Measured {date} on {m['cpus']} cores ({m['cpu_model'] or m['processor']}),"
        f" Python {m['python']};"
        f" load average at start {m['load_average_at_start']} (the machine is shared with"
        " other work: the cold start, all CPU, stretches most).",
        "",
        "The Keras-on-JAX entry of figure 1 on 2 local nodes, one cluster: warm (each node's"
        " standby, jax and keras imported, takes the job) and cold (`--env KERAS_BACKEND=jax`"
        " makes the job start cold) take turns; the cluster's first job (warm on the standbys"
        " `up` started) is shown apart"
        " (tests/bench/warm.py, `make bench ONLY=19`).",
        "",
        "| | warm | cold |" + (" cold, each node's compilation cache emptied first |" if u else ""),
        "|---|---|---|" + ("---|" if u else ""),
        *[
            f"| {label} | {s(w[key])} | {s(c[key])} |" + (f" {s(u[key])} |" if u else "")
            for label, key in rows
        ],
        f"| ratio warm / cold, first step (goal: at most {GOAL}x) |"
        f" {r['median']:.2f}x (min {r['min']:.2f}, max {r['max']:.2f}) | |" + (" |" if u else ""),
        *(
            [
                "| the cluster's first job, on the standbys `up` started: `run` start → first"
                f" step | {fig['first_after_up']['first_step_s']:.2f} s (n=1) | |"
                + (" |" if u else "")
            ]
            if "first_after_up" in fig
            else []
        ),
        "",
        f"Goal: {met}. A standby saves the interpreter's start and the imports (the time to"
        " the entry); what a warm start leaves is the job's own work: the distributed set-up"
        " (`jax.distributed`, Keras' DataParallel), the entry's model and the first compile."
        " JAX's persistent compilation cache on the node (the jax plugin's; every node's"
        " first worker writes its own node's) serves"
        " the warm and the cold runs here (every one follows a run of the same program)"
        + (
            f": with each node's cache emptied first, building the model (its initializers"
            f" are compiled programs too) and the first compile take"
            f" {u['model_s']['median'] + u['compile_s']['median']:.2f} s instead of"
            f" {c['model_s']['median'] + c['compile_s']['median']:.2f} s"
            f" (medians), and the first step on every node comes"
            f" {u['first_step_s']['median']:.2f} s after `run` started instead of"
            f" {c['first_step_s']['median']:.2f} s ({later:+.2f} s): what the cache saves a"
            " restart, a resumed job or the next job on a node, warm or cold."
            if u
            else "."
        )
        + (
            " On this 2-core machine the warm run's compile is the slower one: the two"
            " standbys that replace the taken ones import jax and keras on the same cores"
            " meanwhile (a node with more cores than worker slots does not pay that)."
            if w["compile_s"]["median"] > 1.2 * c["compile_s"]["median"]
            else ""
        ),
        "",
        *_torch_section(fig.get("torch"), s),
    ]


# Measured by hand (tests/bench/torch_warm_stress.py), kept with the figure it explains.
TORCH_HANG = (
    "The hang that kept `torch._dynamo` out of the standby (issue 48): at the end of a torchrun"
    " script whose DDP model outlived `destroy_process_group()`, DDP's Reducer was the gloo"
    " group's last holder and destroyed it with the GIL held, joining gloo's thread while that"
    " thread waited for the GIL (to drop the Python context autograd had stashed in the last"
    " all-reduce's thread state). The torch plugin now holds every group of the job until its"
    " teardown. `tests/bench/torch_warm_stress.py` (2 nodes of 2 workers,"
    " examples/torchrun_ddp.py as `-m`, each job on the standbys), 2026-11-27, load 8-9: with"
    " the fix 10 of 10 warm jobs ended (exit 0, 1.8-3.3 s each); without it (standbys"
    " importing torch._dynamo) the 5th job hung (no end in 120 s)."
)


def _torch_section(torch: dict[str, Any] | None, s: Any) -> list[str]:
    if not torch:
        return []
    w, c, r = torch["warm"], torch["cold"], torch["ratio"]
    met = _verdict(r)
    rows = [
        ("`run` start → first step on every node", "first_step_s"),
        ("`run` start → entry entered (torch imported, gloo group made)", "entered_s"),
        ("the entry's model, DDP and optimizer built", "model_s"),
        ("first step (DDP's first all-reduce)", "compile_s"),
    ]
    return [
        "A torch DDP job likewise (torch_first_step_entry.py: the torch plugin's gloo group,"
        " a small MLP, Adam) on 2 local nodes of one worker each, a cluster of its own:"
        " warm (each node's standby, torch and torch._dynamo imported) and cold (`--env"
        " TORCH_SHOW_CPP_STACKTRACES=0`, torch's own default, starts it cold) take turns.",
        "",
        "| | warm | cold |",
        "|---|---|---|",
        *[f"| {label} | {s(w[key])} | {s(c[key])} |" for label, key in rows],
        f"| ratio warm / cold, first step (goal: at most {GOAL}x) |"
        f" {r['median']:.2f}x (min {r['min']:.2f}, max {r['max']:.2f}) | |",
        "",
        f"Goal (torch): {met}. What the standby saves is the interpreter's start,"
        " `import torch` and `torch._dynamo` (which building DDP imports, about 1 s of CPU);"
        " what is left is the launcher's and the plugin's own work (the rendezvous store,"
        " `init_process_group` and its barrier), building the model and DDP, and the first"
        " step."
        " torch compiles nothing here (no `torch.compile`), so a compilation cache on the"
        " node would save nothing more.",
        "",
        TORCH_HANG,
        "",
    ]


def splice(markdown: str, lines: list[str]) -> str:
    return splice_figure(markdown, 19, lines)


if __name__ == "__main__":
    import sys

    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 3), indent=2))
