"""Figures 16 and 17, the head's queue (issue 47), on the local target through the CLI as a
user runs it, timed from the head's own job records (<head node dir>/jobs/<id>.json):

16. Submit-to-start latency: on a 2-node cluster, two one-node holders (holder_entry.py,
    each holding its node until the benchmark creates a file) and a queued one-node job
    (`run --detach --nodes 1`); the first holder is released. From the holder's record
    ``ended_at`` (its supervisor's last word: every node ended) to the queued job's
    ``queue.left_at`` (the head started it, under its start lock) and to its ``started_at``
    (every node of it reported started). Goal: under 1 s.
17. A sweep's throughput: 32 trivial one-node jobs (trivial_entry.py) on an 8-node cluster,
    submitted with `run --detach --nodes 1` one after another from one shell, and from
    --shells shells at once (as `xargs -P`), against the same 32 jobs run one after another
    (attached `run --nodes 1`, each waiting for the one before it); where a submission's
    time goes, from the head's records.

    python tests/bench/jobqueue.py [--reps N] [--jobs 32] [--nodes 8] [--shells 4]
        [--only 16,17] [--out FILE] [--markdown BENCHMARKS.md] [--from-json FILE]

Not part of `make test` or `make bench`; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    HERE,
    BenchError,
    base_env,
    cli,
    figure_script,
    machine,
    project,
    splice_figure,
    stats,
)

GOAL_LATENCY_S = 1.0
FINAL = ("succeeded", "failed", "cancelled", "timed_out", "lost", "needs_nodes")


def _records_dir(root: Path) -> Path:
    return root / ".skyinfra" / "clusters" / "bench" / "nodes" / "node-0" / "jobs"


def _records(root: Path) -> dict[str, dict[str, Any]]:
    """The head's job records by id (read as `jobs` reads them, without its CLI start-up)."""
    out = {}
    for path in _records_dir(root).glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):  # being replaced this instant: the next look reads it
            continue
        if isinstance(record, dict) and "id" in record:
            out[record["id"]] = record
    return out


def _wait(root: Path, ids: set[str], states: tuple[str, ...], timeout_s: float = 300) -> None:
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        seen = _records(root)
        if all(seen.get(i, {}).get("state") in states for i in ids):
            return
        time.sleep(0.05)
    raise BenchError(f"jobs {sorted(ids)} did not reach {states} within {timeout_s:g} s")


def _submit(
    root: Path, env: dict[str, str], argv: list[str], phases: list[dict[str, float]] | None = None
) -> tuple[float, str]:
    """`run --detach ARGV`: (seconds it took to return, the new job's id). ``phases``: gets
    where the submission's time went, on this machine's clock (the local nodes share it):
    `run` started -> the head's agent created the record -> every node of the job reported
    started -> `run` returned."""
    before = set(_records(root))
    at = time.time()
    took, _ = cli(["run", "--detach", *argv], root, env)
    new = set(_records(root)) - before
    if len(new) != 1:
        raise BenchError(f"expected one new job record, found {sorted(new)}")
    job = new.pop()
    if phases is not None:
        record = _records(root)[job]
        created, started = float(record["created_at"]), record.get("started_at")
        if started is not None and record.get("queue") is None:
            phases.append(
                {
                    "to_head_agent_s": created - at,
                    "head_agent_to_started_s": float(started) - created,
                    "started_to_returned_s": at + took - float(started),
                }
            )
    return took, job


def latency(reps: int) -> dict[str, Any]:
    """Figure 16."""
    env = base_env()
    to_left, to_started, node_to_left, states = [], [], [], []
    with project(2) as root:
        shutil.copy(HERE / "holder_entry.py", root / "holder_entry.py")
        cli(["up", "--yes"], root, env)
        try:
            cli(["run", "--nodes", "1", "trivial_entry.py:main"], root, env)  # the first copy
            for rep in range(reps):
                release = [root / f"release-{rep}-{k}" for k in (0, 1)]
                holders = [
                    _submit(
                        root,
                        env,
                        ["--nodes", "1", "--env", f"BENCH_RELEASE={r}", "holder_entry.py:main"],
                    )[1]
                    for r in release
                ]
                _wait(root, set(holders), ("running",))
                queued = _submit(root, env, ["--nodes", "1", "trivial_entry.py:main"])[1]
                states.append(_records(root)[queued]["state"])
                release[0].touch()
                _wait(root, {queued}, FINAL)
                release[1].touch()
                _wait(root, set(holders), FINAL)
                seen = _records(root)
                holder, job = seen[holders[0]], seen[queued]
                if job["state"] != "succeeded" or job["world"] != holder["world"]:
                    raise BenchError(f"unexpected records: {holder} {job}")
                ended = float(holder["ended_at"])
                left = float(job["queue"]["left_at"])
                to_left.append(left - ended)
                to_started.append(float(job["started_at"]) - ended)
                node_to_left.append(left - max(float(n["ended_at"]) for n in holder["nodes"]))
        finally:
            cli(["down", "--yes"], root, env)
    return {
        "machine": machine(),
        "queued_job_state_when_submitted": states,
        "holder_ended_to_left_queue_s": stats(to_left),
        "holder_ended_to_started_s": stats(to_started),
        "holder_node_ended_to_left_queue_s": stats(node_to_left),
    }


def _most_at_once(records: list[dict[str, Any]]) -> int:
    """The most jobs whose started_at..ended_at spans overlap at one instant."""
    edges = sorted(
        [(float(r["started_at"]), 1) for r in records]
        + [(float(r["ended_at"]), -1) for r in records]
    )
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def _sweep_from_shells(
    root: Path, env: dict[str, str], argv: list[str], jobs: int, shells: int
) -> tuple[float, list[str]]:
    """``jobs`` submissions of `run --detach ARGV` from ``shells`` shells at once (as `xargs
    -P`), then waited for in the head's records: (wall seconds, the jobs' ids)."""
    started = time.perf_counter()

    def submit(_: int) -> str:
        _, out = cli(["run", "--detach", *argv], root, env)
        return out.split("job ", 1)[1].split()[0]

    with ThreadPoolExecutor(max_workers=shells) as pool:
        ids = list(pool.map(submit, range(jobs)))
    _wait(root, set(ids), FINAL)
    return time.perf_counter() - started, ids


def sweep(jobs: int, nodes: int, shells: int = 4) -> dict[str, Any]:
    """Figure 17."""
    env = base_env()
    with project(nodes) as root:
        cli(["up", "--yes"], root, env)
        try:
            one = ["--nodes", "1", "trivial_entry.py:main"]
            cli(["run", *one], root, env)  # the first copy to every node, outside both sides
            before = set(_records(root))
            started = time.perf_counter()
            for _ in range(jobs):
                cli(["run", *one], root, env)
            serial_s = time.perf_counter() - started
            serial = [r for i, r in _records(root).items() if i not in before]
            before = set(_records(root))
            started = time.perf_counter()
            submits, ids, phases = [], set(), []
            for _ in range(jobs):
                took, job = _submit(root, env, one, phases)
                submits.append(took)
                ids.add(job)
            submitted_s = time.perf_counter() - started
            _wait(root, ids, FINAL)
            sweep_s = time.perf_counter() - started
            swept = [r for i, r in _records(root).items() if i in ids]
            shells_s, shell_ids = _sweep_from_shells(root, env, one, jobs, shells)
            from_shells = [_records(root)[i] for i in shell_ids]
        finally:
            cli(["down", "--yes"], root, env)
    failed = [r for r in serial + swept + from_shells if r["state"] != "succeeded"]
    if failed:
        raise BenchError(f"{len(failed)} job(s) did not succeed, the first: {failed[0]}")
    queued = sum(1 for r in swept if r.get("queue"))
    return {
        "machine": machine(),
        "jobs": jobs,
        "nodes": nodes,
        "one_after_another_s": round(serial_s, 2),
        "sweep_s": round(sweep_s, 2),
        "sweep_submitted_s": round(submitted_s, 2),
        "run_detach_s": stats(submits),
        "run_detach_phases_s": {
            k: stats([p[k] for p in phases]) for k in (phases[0] if phases else {})
        },
        "speedup": round(serial_s / sweep_s, 2),
        "shells": shells,
        "sweep_from_shells_s": round(shells_s, 2),
        "speedup_from_shells": round(serial_s / shells_s, 2),
        "jobs_per_minute": {
            "one_after_another": round(60 * jobs / serial_s, 1),
            "sweep": round(60 * jobs / sweep_s, 1),
            "sweep_from_shells": round(60 * jobs / shells_s, 1),
        },
        "most_at_once": {
            "one_after_another": _most_at_once(serial),
            "sweep": _most_at_once(swept),
            "sweep_from_shells": _most_at_once(from_shells),
        },
        "sweep_jobs_queued": queued,
        "sweep_from_shells_jobs_queued": sum(1 for r in from_shells if r.get("queue")),
        "job_start_to_end_s": {
            "one_after_another": stats([r["ended_at"] - r["started_at"] for r in serial]),
            "sweep": stats([r["ended_at"] - r["started_at"] for r in swept]),
            "sweep_from_shells": stats([r["ended_at"] - r["started_at"] for r in from_shells]),
        },
    }


def _row(what: str, v: dict[str, Any]) -> str:
    return f"| {what} | {v['median']:.2f} s | {v['min']:.2f} s | {v['max']:.2f} s |"


def _measured(m: dict[str, Any], date: str, how: str) -> str:
    return (
        f"Measured {date}, {how}, on {m['cpus']} cores ({m['processor']}, {m['cpu_model']}), "
        f"{m['memory_gib']} GiB, Python {m['python']}; load average at start "
        f"{m['load_average_at_start']}."
    )


def latency_section(fig: dict[str, Any], date: str, notes: str = "") -> list[str]:
    out = ["## 16. The queue: submit-to-start latency when a node frees (2 local nodes)", ""]
    if "error" in fig:
        return [*out, f"failed: `{fig['error'][:300]}`", ""]
    left = fig["holder_ended_to_left_queue_s"]
    started = fig["holder_ended_to_started_s"]
    verdict = (
        f"met: {started['max']:.2f} s at worst to started, {left['max']:.2f} s to leaving the queue"
        if started["max"] < GOAL_LATENCY_S
        else f"missed at worst by {started['max'] - GOAL_LATENCY_S:.2f} s (median "
        f"{started['median']:.2f} s)"
    )
    return [
        *out,
        _measured(
            fig["machine"],
            date,
            f"{left['n']} repetition(s) (`python "
            "tests/bench/jobqueue.py`, not part of `make bench`)",
        ),
        *([notes] if notes else []),
        "",
        "Two one-node holders (`run --detach --nodes 1`, each holding its node until the "
        "benchmark creates a file) and a third one-node job, queued behind them; the first "
        "holder is released. Times from the head's job records: the holder's `ended_at` (its "
        "supervisor's last word, every node of it ended) to the queued job's `queue.left_at` "
        "(the head started it, under its start lock) and to its `started_at` (every node of it "
        "reported started).",
        "",
        "| | median | min | max |",
        "|---|---|---|---|",
        _row("the holder ended -> the queued job left the queue", left),
        _row("the holder ended -> the queued job started (state running)", started),
        _row(
            "the holder's node ended -> the queued job left the queue",
            fig["holder_node_ended_to_left_queue_s"],
        ),
        "",
        f"Goal (under {GOAL_LATENCY_S:.0f} s): {verdict}.",
        "",
        "Where it goes: a queued job's supervisor looks, under the head's start lock, whether "
        "its turn came every 0.2 s (QUEUE_POLL_S in skyinfra_runtime/jobs/records.py), so it "
        "leaves the queue up to one poll after the holder's record ended; then its node's "
        "launcher starts and reports in (the second row less the first). A shorter poll, or a "
        "wake-up from the ending job, would cut the first part; both are under the goal.",
        "",
    ]


def sweep_section(fig: dict[str, Any], date: str, notes: str = "") -> list[str]:
    out = [
        f"## 17. The queue: a sweep of {fig.get('jobs', 32)} one-node jobs on "
        f"{fig.get('nodes', 8)} local nodes"
    ]
    out.append("")
    if "error" in fig:
        return [*out, f"failed: `{fig['error'][:300]}`", ""]
    rate, most = fig["jobs_per_minute"], fig["most_at_once"]
    spans, shells = fig["job_start_to_end_s"], fig.get("shells", 4)
    detach = fig["run_detach_s"]
    return [
        *out,
        _measured(
            fig["machine"],
            date,
            "once (`python tests/bench/jobqueue.py`, not part of `make bench`)",
        ),
        *([notes] if notes else []),
        "",
        f"{fig['jobs']} trivial one-node jobs (trivial_entry.py: returns 0; plain Python, no "
        f"framework) on an {fig['nodes']}-node cluster: submitted as a sweep (`run --detach "
        "--nodes 1`), one after another from one shell and from "
        f"{shells} shells at once (as `xargs -P {shells}`), then waited for in the head's "
        "records, against the same jobs run one after another (attached `run --nodes 1`, each "
        "after the one before ended). One warm-up run first (the first copy to every node).",
        "",
        "| | wall time | jobs a minute | most running at once |",
        "|---|---|---|---|",
        f"| one after another (attached `run`) | {fig['one_after_another_s']:.1f} s | "
        f"{rate['one_after_another']:.1f} | {most['one_after_another']} |",
        f"| the sweep from one shell (`run --detach`) | {fig['sweep_s']:.1f} s "
        f"(submitting: {fig['sweep_submitted_s']:.1f} s) | {rate['sweep']:.1f} | "
        f"{most['sweep']} |",
        f"| the sweep from {shells} shells at once | {fig['sweep_from_shells_s']:.1f} s | "
        f"{rate['sweep_from_shells']:.1f} | {most['sweep_from_shells']} |",
        "",
        f"Speed-up over one after another: {fig['speedup']:.2f}x from one shell, "
        f"{fig['speedup_from_shells']:.2f}x from {shells}. `run --detach` returned in "
        f"{detach['median']:.2f} s (median; min {detach['min']:.2f}, max {detach['max']:.2f}); "
        f"a job ran {spans['sweep']['median']:.2f} s from started to ended in the sweep "
        f"({spans['one_after_another']['median']:.2f} s one after another); "
        f"{fig['sweep_jobs_queued']} of the one-shell sweep's jobs and "
        f"{fig['sweep_from_shells_jobs_queued']} of the {shells}-shell sweep's waited in the "
        "queue.",
        "",
        *_phases(fig),
        *_overlap(fig),
    ]


def _phases(fig: dict[str, Any]) -> list[str]:
    phases = fig.get("run_detach_phases_s") or {}
    if not phases:
        return []
    return [
        "Where a one-shell submission's time went (medians, from the head's records on this "
        f"machine's clock): `run` started -> the head's agent made the job's record "
        f"{phases['to_head_agent_s']['median']:.2f} s (the CLI's start, its checks, the copy to "
        "every node); -> every node of the job reported started "
        f"{phases['head_agent_to_started_s']['median']:.2f} s (the head's agent, the node's "
        "launcher); -> `run` returned "
        f"{phases['started_to_returned_s']['median']:.2f} s.",
        "",
    ]


def _overlap(fig: dict[str, Any]) -> list[str]:
    shells = fig.get("shells", 4)
    one_shell = (
        "From one shell a trivial job (about "
        f"{fig['job_start_to_end_s']['sweep']['median']:.1f} s from started to ended) still "
        "ends before the next submission has started its own, so that sweep's rate is the "
        "rate of submissions; jobs that run longer than a submission overlap, up to one a "
        "node. "
        if fig["most_at_once"]["sweep"] < 2
        else ""
    )
    most = fig["most_at_once"]["sweep_from_shells"]
    jobs_too = (
        f"and so do the jobs (up to {most} at once)"
        if most > 1
        else "but the jobs did not: each still ended before the next one started"
    )
    return [
        "Before issue 47's sweep work (2026-11-27T11:18, load 9-12) `run --detach --nodes 1` "
        "took 2.24 s (median) and never overlapped: it started an agent on all 8 nodes "
        '(seven of which the head at once told "done": not in the job). Measured by hand then '
        "on this machine (load 7-8): 0.4 s the CLI's imports (this machine's environment sets "
        "PYTHONDONTWRITEBYTECODE, so every call compiles its modules), 0.45 s its own work "
        "before the first agent (imports again; the copy of the unchanged project to all 8 "
        "nodes took 12 ms: its files are hard-linked from each node's previous copy), 0.35 s "
        "the head's agent, 0.8 s the seven peers' agents started together. Now a job the head "
        "starts at once gets agents on its nodes alone (and node 0's, its supervisor's), and "
        "`run --detach` holds the workspace shared, so that submissions from several shells "
        f"overlap. {one_shell}From {shells} shells the submissions overlap, {jobs_too}.",
        "",
    ]


def splice(markdown: str, result: dict[str, Any], date: str) -> str:
    """BENCHMARKS.md with figures 16 and 17 (those in ``result``) replaced or added."""
    if "queue_latency" in result:
        lines = latency_section(result["queue_latency"], date, result.get("notes", ""))
        markdown = splice_figure(markdown, 16, lines)
    if "sweep" in result:
        markdown = splice_figure(
            markdown, 17, sweep_section(result["sweep"], date, result.get("notes", ""))
        )
    return markdown


def main() -> None:
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--jobs", type=int, default=32)
        parser.add_argument("--nodes", type=int, default=8)
        parser.add_argument("--only", default="16,17")
        parser.add_argument("--shells", type=int, default=4, help="figure 17's submitters")

    def measure(ns: argparse.Namespace) -> dict[str, Any]:
        only = {int(x) for x in ns.only.split(",") if x}
        result: dict[str, Any] = {"machine": machine()}
        if 16 in only:
            result["queue_latency"] = latency(ns.reps)
        if 17 in only:
            result["sweep"] = sweep(ns.jobs, ns.nodes, ns.shells)
        return result

    figure_script(
        lambda markdown, result: splice(markdown, result, result["date"]),
        measure,
        add_arguments,
        reps_help="figure 16's repetitions",
    )


if __name__ == "__main__":
    main()
