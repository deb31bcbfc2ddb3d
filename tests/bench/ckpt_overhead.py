"""Figure 14, checkpoint overhead (issue 25): the demo's model (examples/keras_digits.py) on 2
local nodes, Keras on JAX, its epoch wall time with `keras.callbacks.BackupAndRestore` writing
a checkpoint per epoch into $SKYINFRA_CHECKPOINT_DIR against the same run without (goal: at
most 1.05x). The two runs alternate, each rep on a new checkpoint set; the first epochs (JIT
compilation) are left out. Not part of `make test`; nothing here asserts a time.

    python tests/bench/run.py --only 14 [--reps N]     (or: make bench ONLY=14)
"""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path
from typing import Any

from common import HERE, REPO, base_env, cli, machine, project, splice_figure, stats

KERAS = ("jax", "keras:backend=jax")
EPOCHS = 22
WARM_EPOCHS = 2  # left out: the first epochs compile
GOAL = 1.05


def _epochs(root: Path) -> list[float]:
    """Node 0's epoch times of the newest run, warm-up left out (process 0 writes the
    checkpoint; the others wait for it in the next epoch's first all-reduce)."""
    run = max((root / ".skyinfra" / "clusters" / "bench" / "runs").iterdir())
    summary = json.loads((run / "summary.json").read_text())
    value = summary["nodes"][0]["result"]["workers"][0]["value"]
    return [float(s) for s in value["epoch_s"][WARM_EPOCHS:]]


def checkpoint_overhead(reps: int) -> dict[str, Any]:
    env = base_env()
    host = machine()  # its load average: at the start, as the other figures'
    without, with_ckpt, ratio = [], [], []
    steps = 0
    with project(2, KERAS) as root:
        shutil.copy(HERE / "ckpt_overhead_entry.py", root / "ckpt_overhead_entry.py")
        shutil.copy(REPO / "examples" / "keras_digits.py", root / "keras_digits.py")
        shutil.copy(REPO / "examples" / "digits.csv.gz", root / "digits.csv.gz")
        entry = "ckpt_overhead_entry.py:main"
        args = ["--", "--epochs", str(EPOCHS)]
        cli(["up", "--yes"], root, env)
        try:
            cli(["run", entry, *args], root, env)  # the nodes' caches
            for rep in range(reps):
                cli(["run", entry, *args], root, env)
                plain = statistics.median(_epochs(root))
                cli(["run", "--checkpoints", f"ovh-{rep}", entry, *args, "--checkpoint"], root, env)
                ckpt = statistics.median(_epochs(root))
                run = max((root / ".skyinfra" / "clusters" / "bench" / "runs").iterdir())
                value = json.loads((run / "summary.json").read_text())["nodes"][0]["result"]
                steps = int(value["workers"][0]["value"]["steps_per_epoch"])
                without.append(plain * 1000)  # ms: an epoch of the demo is tens of ms
                with_ckpt.append(ckpt * 1000)
                ratio.append(ckpt / plain)
            sets = root / ".skyinfra" / "clusters" / "bench" / "checkpoints" / "ovh-0"
            size = sum(p.stat().st_size for p in sets.rglob("*") if p.is_file())
        finally:
            cli(["down", "--yes"], root, env)
    return {
        "machine": host,
        "epochs_timed": EPOCHS - WARM_EPOCHS,
        "steps_per_epoch": steps,
        "checkpoint_set_bytes": size,
        "epoch_without_ms": stats(without),
        "epoch_with_checkpoint_ms": stats(with_ckpt),
        "ratio": stats(ratio),
    }


def _ms(stat: dict[str, Any]) -> str:
    return f"{stat['median']:.1f} ms (min {stat['min']:.1f}, max {stat['max']:.1f}, n={stat['n']})"


def section(fig: dict[str, Any] | None, date: str) -> list[str]:
    out = ["## 14. Checkpoint overhead: epoch wall time with a checkpoint per epoch (issue 25)", ""]
    if fig is None:
        return [*out, "not run this time", ""]
    if "error" in fig:
        return [*out, f"failed: `{fig['error'][:300]}`", ""]
    m = fig["machine"]
    r = fig["ratio"]
    cost = fig["epoch_with_checkpoint_ms"]["median"] - fig["epoch_without_ms"]["median"]
    met = "met" if r["median"] <= GOAL else f"**not met** ({r['median']:.2f}x)"
    return [
        *out,
        f"Measured {date} on {m['cpus']} cores ({m['processor']}, {m['cpu_model']}), "
        f"{m['memory_gib']} GiB, Python {m['python']}; load average at start "
        f"{m['load_average_at_start']}.",
        "",
        "The demo's model and data (examples/keras_digits.py) on 2 local nodes, Keras on JAX, "
        f"{fig['steps_per_epoch']} steps per epoch; node 0's median epoch over epochs "
        f"{WARM_EPOCHS + 1}-{EPOCHS} of each run (the first {WARM_EPOCHS} compile), with "
        "`keras.callbacks.BackupAndRestore` on `$SKYINFRA_CHECKPOINT_DIR` (one checkpoint "
        "per epoch: process 0 copies its replica of every variable to memory, a thread "
        "writes the step folder and its commit mark while training goes on, two steps kept) "
        "against the same run without; the two runs alternate. A set holds "
        f"{fig['checkpoint_set_bytes']:,} B at the end.",
        "",
        "| | epoch wall time |",
        "|---|---|",
        f"| without checkpoints | {_ms(fig['epoch_without_ms'])} |",
        f"| a checkpoint per epoch | {_ms(fig['epoch_with_checkpoint_ms'])} |",
        f"| the checkpoint's cost per epoch | {cost:.1f} ms |",
        f"| ratio (goal: at most {GOAL}x) | {r['median']:.2f}x (min {r['min']:.2f}, "
        f"max {r['max']:.2f}) |",
        "",
        f"Goal: {met}.",
        "",
    ]


def splice(markdown: str, lines: list[str]) -> str:
    """BENCHMARKS.md with figure 14's section replaced (or put before the closing notes)."""
    return splice_figure(markdown, 14, lines)
