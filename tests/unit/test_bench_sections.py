"""`make bench` rewrites BENCHMARKS.md whole from the figures it measures; the figures measured
by their own scripts (tests/bench/*.py run by hand) are kept, in number order, not dropped."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# tests/bench's scripts import each other as top-level modules (common, report, jobs, ...):
# loaded by path, under a name of its own, so that none of them goes on the workers' sys.path.
_spec = importlib.util.spec_from_file_location(
    "bench_common", Path(__file__).resolve().parents[1] / "bench" / "common.py"
)
assert _spec is not None and _spec.loader is not None
bench_common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_common)
keep_unmeasured = bench_common.keep_unmeasured

OLD = """# Benchmarks

## 1. First step

old one

## 12. Checkpoints in S3

by hand, twelve

## 19. Warm workers

old nineteen

## 20. The ssh target

by hand, twenty

## What holds the AWS node count (2026-11-23)

limits
"""

NEW = """# Benchmarks

## 1. First step

new one

## 19. Warm workers

new nineteen

## What holds the AWS node count (2026-11-23)

limits
"""


def test_hand_run_figures_are_kept_in_number_order_and_measured_ones_replaced() -> None:
    text = keep_unmeasured(OLD, NEW)
    heads = [line for line in text.splitlines() if line.startswith("## ")]
    assert heads == [
        "## 1. First step",
        "## 12. Checkpoints in S3",
        "## 19. Warm workers",
        "## 20. The ssh target",
        "## What holds the AWS node count (2026-11-23)",
    ]
    assert "new one" in text and "old one" not in text
    assert "new nineteen" in text and "old nineteen" not in text
    assert "by hand, twelve" in text and "by hand, twenty" in text


def test_a_first_bench_keeps_what_it_wrote() -> None:
    assert keep_unmeasured("", NEW) == NEW


def test_the_real_file_loses_no_section_when_rewritten_from_itself() -> None:
    real = (Path(__file__).resolve().parents[2] / "BENCHMARKS.md").read_text()
    assert keep_unmeasured(real, real) == real
    numbered = [
        line
        for line in real.splitlines()
        if line.startswith("## ") and line[3:].partition(".")[0].isdigit()
    ]
    assert len(numbered) >= 20  # every figure up to the newest has its section


def test_an_at_most_ratio_goal_is_judged_on_the_unrounded_ratios() -> None:
    """Figures 18 and 20 judged "at most 1.5x" on ratios rounded to 2 decimals: 1.504 met it."""
    fig = bench_common.ratios([2.0, 2.0, 2.0], [3.008, 3.008, 3.008])
    assert fig["ratio_of_medians"] == 1.5  # the text's
    assert bench_common.ratio_verdict(fig, 1.5) == "missed by the median, by 0.00x"
    mixed = bench_common.ratios([2.0, 2.0, 2.0], [2.0, 2.4, 3.008])
    assert bench_common.ratio_verdict(mixed, 1.5).startswith("met by the median, not in every")
    # Results written before the unrounded ratios were kept: judged on the rounded ones.
    older = {"ratio_of_medians": 1.5, "ratio_per_pair": {"max": 1.5}}
    assert bench_common.ratio_verdict(older, 1.5) == "met in every repetition"
