"""`make bench`: run the benchmarks of tests/bench/ and rewrite BENCHMARKS.md.

    python tests/bench/run.py [--reps N] [--only 1,2,...] [--notes TEXT]

Each figure is measured --reps times (median, min, max); results also go to
tests/bench/results/<host>-<date>.json. Figures (BENCHMARKS.md says what each measures):
1 time to first step, 2 runtime overhead, 3 fan-out, 4 up/down with uv and pip,
5 engine overhead (AWS target against moto), 6 render + plan scale (AWS, moto), 7 start-up
(`skyinfra --help` beside `import click`), 8 a re-run after a one-line change in a project of
200 MB (bytes sent, start against an empty project's), 9 `run --detach` time to return, 10
`jobs` on 8 nodes, 11 the Python API's `cluster.run` beside `skyinfra run`, 14 checkpoint
overhead (epoch wall time with a checkpoint per epoch against without), 15 the Spot notice
(`skyinfra drill interrupt`: notice to saved checkpoint, and to the first resumed step), 19
warm workers (`run` to the first step on standbys against cold, warm.py). A run
of only figures 9 and 10 replaces their sections of BENCHMARKS.md (each says when and where it
was measured) and leaves the others as they were; figures 11, 14, 15 and 19 alone or
together (`--only 11`, `--only 14,15`) likewise.
Not part of `make test`: nothing here is a test or asserts a time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import HERE, REPO, keep_unmeasured, machine
from report import render_markdown, splice


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--pip-reps", type=int, default=None, help="figure 4's pip runs")
    parser.add_argument(
        "--aws-reps", type=int, default=1, help="figures 5 and 6 (minutes per run against moto)"
    )
    parser.add_argument(
        "--only", default="1,2,3,4,5,6,7,8,9,10,11,14,15,19", help="figures to run, e.g. 1,4"
    )
    parser.add_argument("--notes", default="", help="a line on the conditions, for the file")
    parser.add_argument("--out", type=Path, default=REPO / "BENCHMARKS.md")
    ns = parser.parse_args()
    only = {int(x) for x in ns.only.split(",") if x}
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "reps": ns.reps,
        "aws_reps": ns.aws_reps,
        "notes": ns.notes,
        "figures": {},
    }
    started = time.perf_counter()
    figures = report["figures"]

    def step(number: int, name: str, fn: Any, *args: Any) -> None:
        if number not in only:
            return
        print(f"bench: figure {number} ({name}) ...", flush=True)
        t0 = time.perf_counter()
        try:
            figures[name] = fn(*args)
        except Exception as err:  # one figure failing still writes the others
            figures[name] = {"error": f"{type(err).__name__}: {err}"[:2000]}
        print(f"bench: figure {number} took {time.perf_counter() - t0:.0f} s", flush=True)

    import api_figure
    import aws_emulated
    import ckpt_overhead
    import jobs
    import local_cluster
    import notice
    import overhead
    import rerun
    import startup
    import warm

    step(1, "first_step", local_cluster.first_step, ns.reps)
    step(2, "overhead", overhead.overhead, ns.reps)
    if 3 in only or 4 in only:
        step(3 if 4 not in only else 4, "up_down_uv", local_cluster.up_down, ns.reps, "uv")
        if 4 in only:
            step(4, "up_down_pip", local_cluster.up_down, ns.pip_reps or ns.reps, "pip")
    step(5, "engine_overhead", aws_emulated.engine_overhead, ns.aws_reps)
    step(6, "aws_scale", aws_emulated.scale, ns.aws_reps)
    step(7, "startup", startup.startup, ns.reps)
    step(8, "rerun", rerun.rerun, ns.reps)
    step(9, "detach", jobs.detach, ns.reps)
    step(10, "jobs_list", jobs.jobs_list, ns.reps)
    step(11, "api", api_figure.api_vs_cli, ns.reps)
    step(14, "checkpoint_overhead", ckpt_overhead.checkpoint_overhead, ns.reps)
    step(15, "spot_notice", notice.measure, ns.reps)
    step(19, "warm_workers", warm.measure, ns.reps)
    report["bench_wall_s"] = round(time.perf_counter() - started)
    report["load_average_at_end"] = [round(x, 2) for x in __import__("os").getloadavg()]
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    whole = only >= {*range(1, 12), 14, 15, 19}
    part = "" if whole else "-figures-" + "-".join(map(str, sorted(only)))
    out = results / f"{report['machine']['host']}-{report['date'][:10]}{part}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    section = api_figure.section(figures.get("api"), report["date"])
    ckpt = ckpt_overhead.section(figures.get("checkpoint_overhead"), report["date"])
    spot = notice.section(figures.get("spot_notice"), report["date"])
    warmth = warm.section(figures.get("warm_workers"), report["date"])
    if only <= {11, 14, 15, 19} and ns.out.is_file():  # the other figures stay as measured
        text = ns.out.read_text()
        if 11 in only:
            text = api_figure.splice(text, section)
        if 14 in only:
            text = ckpt_overhead.splice(text, ckpt)
        if 15 in only:
            text = notice.splice(text, spot)
        if 19 in only:
            text = warm.splice(text, warmth)
        ns.out.write_text(text)
    elif only <= {9, 10} and ns.out.is_file():
        ns.out.write_text(splice(ns.out.read_text(), report))
    else:
        text = ckpt_overhead.splice(api_figure.splice(render_markdown(report), section), ckpt)
        text = notice.splice(text, spot) if 15 in only else text
        text = warm.splice(text, warmth) if 19 in only else text
        # The figures measured by their own scripts (12, 13, 16-18, 20, 21) stay as they were.
        old = ns.out.read_text() if ns.out.is_file() else ""
        ns.out.write_text(keep_unmeasured(old, text))
    print(f"bench: {out} and {ns.out} written ({report['bench_wall_s']} s)")


if __name__ == "__main__":
    main()
