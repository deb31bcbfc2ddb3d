"""What every benchmark shares: the CLI as a user runs it, scratch projects, statistics, the
machine. Not tests: nothing here asserts a time (timing goals go in BENCHMARKS.md)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV_BIN = Path(sys.executable).parent


class BenchError(RuntimeError):
    pass


def base_env() -> dict[str, str]:
    """The user's environment without skyinfra settings; this checkout's skyinfra first (the
    runtime stays the installed one: on PYTHONPATH it would shadow the nodes' own wheel)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")}
    env["PYTHONPATH"] = str(REPO)
    return env


def cli(args: Sequence[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """Run `skyinfra ARGS`; (wall seconds, stdout). A failure stops the benchmark."""
    argv = [str(VENV_BIN / "skyinfra"), *args]
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise BenchError(
            f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return elapsed, proc.stdout


def free_port_pair(nodes: int = 4) -> int:
    """A base port P with P to P + 2 * nodes - 1 free (the jobs' coordinator and rendezvous
    ports a cluster of ``nodes`` hands out, which `up` claims whole), below the ephemeral
    range: the suite's own choice (tests/support/ports.py). A port the kernel hands out (bind
    to port 0) is one it also gives to the next outgoing connection, which could take one of
    them before the cluster listens there."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.support.ports import free_port_pair as below_ephemeral

    try:
        return below_ephemeral(nodes)
    except RuntimeError as e:
        raise BenchError(str(e)) from e


@contextmanager
def project(nodes: int, plugins: Sequence[str] = ()) -> Iterator[Path]:
    """A scratch project with a skyinfra.toml (its own free ports) and the bench entries."""
    with tempfile.TemporaryDirectory(prefix="skyinfra-bench-") as tmp:
        root = Path(tmp)
        plugin_list = ", ".join(f'"{p}"' for p in plugins)
        (root / "skyinfra.toml").write_text(
            f'name = "bench"\nnodes = {nodes}\nhead_port = {free_port_pair(nodes)}\n'
            f"plugins = [{plugin_list}]\n"
        )
        for name in ("first_step_entry.py", "trivial_entry.py"):
            shutil.copy(HERE / name, root / name)
        yield root


def wait_for_standbys(root: Path, cluster: str, nodes: int = 2, timeout_s: float = 300) -> None:
    """Until each local node of ``cluster`` has a standby waiting for a job (worker slot 0):
    a run measured while they import would share the cores with them."""
    folders = [root / ".skyinfra" / "clusters" / cluster / "nodes" / f"node-{i}" / "standby"
               for i in range(nodes)]  # fmt: skip
    until = time.monotonic() + timeout_s
    while not all(list(folder.glob("w0-*.sock")) for folder in folders):
        if time.monotonic() > until:
            raise BenchError(f"the standbys never became ready in {folders}")
        time.sleep(0.2)


def stats(values: Sequence[float]) -> dict[str, Any]:
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
        "n": len(values),
        "values": [round(v, 2) for v in values],
    }


def ratios(base: Sequence[float], other: Sequence[float]) -> dict[str, Any]:
    """``other`` against ``base``, repetition by repetition: the ratio of the medians and each
    pair's, rounded for the text, and the unrounded ones a goal is judged on (rounded first,
    1.504 would read as 1.50 and meet "at most 1.5x")."""
    per_pair = [b / a for a, b in zip(base, other, strict=True)]
    of_medians = statistics.median(other) / statistics.median(base)
    return {
        "ratio_of_medians": round(of_medians, 2),
        "ratio_per_pair": stats(per_pair),
        "ratio_exact": {"of_medians": round(of_medians, 6), "worst_pair": round(max(per_pair), 6)},
    }


def ratio_verdict(fig: dict[str, Any], goal: float) -> str:
    """An "at most GOAL x" goal's verdict on ``ratios()``' fields: the ratio of the medians and
    the worst pair's, unrounded (results written before they were kept: the rounded ones)."""
    exact = fig.get("ratio_exact", {})
    ratio = exact.get("of_medians", fig["ratio_of_medians"])
    worst = exact.get("worst_pair", fig["ratio_per_pair"]["max"])
    if ratio > goal:
        return f"missed by the median, by {ratio - goal:.2f}x"
    if worst > goal:
        return f"met by the median, not in every repetition (up to {worst:.2f}x)"
    return "met in every repetition"


def machine() -> dict[str, Any]:
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "processor": platform.processor() or platform.machine(),
        "cpu_model": cpu_model,
        "load_average_at_start": [round(x, 2) for x in load],
    }


def splice_figure(markdown: str, number: int, lines: list[str]) -> str:
    """BENCHMARKS.md with the section "## NUMBER. ..." replaced by ``lines`` (or, where it is
    not there yet, put before the closing notes), the other sections as they were measured."""
    text = "\n".join(lines).rstrip() + "\n\n"
    head = f"## {number}. "
    if head in markdown:
        start = markdown.index(head)
        rest = markdown.find("\n## ", start + 1)
        return markdown[:start] + text + (markdown[rest + 1 :] if rest != -1 else "")
    anchor = markdown.find("\n## What holds")
    if anchor == -1:
        return markdown.rstrip() + "\n\n" + text
    return markdown[: anchor + 1] + text + markdown[anchor + 1 :]


def keep_unmeasured(old: str, new: str) -> str:
    """``new`` (a whole BENCHMARKS.md that `make bench` wrote) with every numbered section of
    ``old`` that ``new`` lacks put back in number order: the figures measured by hand
    (their own scripts) stay as they were measured, rather than vanishing from the file."""
    for number, section in sorted(_numbered_sections(old).items()):
        if f"\n## {number}. " in "\n" + new:
            continue
        later = [n for n in _numbered_sections(new) if n > number]
        at = new.find(f"\n## {min(later)}. ") if later else new.find("\n## What holds")
        new = (
            new.rstrip() + "\n\n" + section if at == -1 else new[: at + 1] + section + new[at + 1 :]
        )
    return new


def _numbered_sections(markdown: str) -> dict[int, str]:
    """Each "## N. ..." section of ``markdown`` (its heading to the next "## "), by N."""
    sections: dict[int, str] = {}
    starts = [m.start() for m in re.finditer(r"^## ", markdown, flags=re.MULTILINE)]
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(markdown)
        number, dot, _ = markdown[start + 3 : end].partition(".")
        if dot and number.isdigit():
            sections[int(number)] = markdown[start:end].rstrip() + "\n\n"
    return sections


def figure_script(
    splice: Callable[[str, dict[str, Any]], str],
    measure: Callable[[argparse.Namespace], dict[str, Any]],
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    reps_help: str | None = None,
) -> None:
    """The command line of a figure measured by a script of its own: --reps and --notes,
    --out (the results' JSON), --markdown (splice its section into that file), --from-json
    (only write --markdown again, from an earlier run's results). ``measure`` gets the
    parsed arguments (``add_arguments`` adds the script's own)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3, help=reps_help)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--notes", default="", help="a line on the conditions, for the file")
    parser.add_argument("--markdown", type=Path, default=None, help="splice into this file")
    parser.add_argument("--from-json", type=Path, default=None, help="only write --markdown")
    if add_arguments is not None:
        add_arguments(parser)
    ns = parser.parse_args()
    if ns.from_json and ns.markdown:  # the section again from a run's results
        result = json.loads(ns.from_json.read_text())
        ns.markdown.write_text(splice(ns.markdown.read_text(), result))
        return
    date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    result = {"date": date, "notes": ns.notes, **measure(ns)}
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(result, indent=2)
    print(text)
    if ns.out:
        ns.out.write_text(text + "\n")
    if ns.markdown:
        ns.markdown.write_text(splice(ns.markdown.read_text(), result))
