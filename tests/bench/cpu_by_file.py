"""Where the suite's CPU goes, test file by test file (`make bench-suite-cpu`).

`make test`'s wall time on a 2-core machine is its CPU time over two cores: five workers keep
both cores busy, so a file that sleeps on the AWS provider's waits costs little and a file
that starts JAX on two nodes costs much, whatever their durations say. This measures the CPU.

Each pytest-xdist worker runs in a network namespace of its own (tests/loopback-only.sh), and
everything a test starts stays in it: Terraform, the provider, local nodes that daemonized,
their workers. So a sampler outside reads every process's CPU ticks and network namespace
every SAMPLE_S, and the workers write when each file's phases ran (SKYINFRA_CPU_PROFILE, a
folder: tests/support/timings.py); the CPU a namespace used while a file ran is that file's.
A process that lives less than SAMPLE_S is missed; the total beside the machine's (from
/proc/stat) says how much was caught.

    python tests/bench/cpu_by_file.py sample FOLDER   # until killed; make does it
    python tests/bench/cpu_by_file.py report FOLDER [--json OUT]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import signal
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

SAMPLE_S = 0.2
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _machine_ticks() -> int:
    """All CPUs' busy ticks (user, nice, system, irq, softirq, steal) from /proc/stat."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return user + nice + system + irq + softirq + steal


def _processes() -> dict[tuple[int, int], tuple[int, int]]:
    """(pid, start tick) -> (network namespace inode, CPU ticks so far) for every process."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            netns = os.readlink(f"{entry.path}/ns/net")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        # After the command name: state is field 3, so utime (14) is [11], stime [12],
        # starttime (22) [19].
        ticks = int(fields[11]) + int(fields[12])
        found[(int(entry.name), int(fields[19]))] = (int(netns[5:-1]), ticks)
    return found


def sample(folder: Path) -> None:
    """Until SIGTERM/SIGINT: per second, the CPU ticks each network namespace used."""
    folder.mkdir(parents=True, exist_ok=True)
    stop = False

    def end(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, end)
    signal.signal(signal.SIGINT, end)
    seen = _processes()  # what ran before the suite is not the suite's
    machine_start = _machine_ticks()
    started = time.time()
    with (folder / "samples.jsonl").open("w") as out:
        while not stop:
            time.sleep(SAMPLE_S)
            now = time.time()
            current = _processes()
            used: dict[int, int] = defaultdict(int)
            for key, (netns, ticks) in current.items():
                before = seen.get(key, (netns, 0))[1]
                if ticks > before:
                    used[netns] += ticks - before
            seen = current
            if used:
                out.write(json.dumps({"t": now, "ticks": used}) + "\n")
    (folder / "machine.json").write_text(
        json.dumps(
            {
                "seconds": time.time() - started,
                "cpu_s": (_machine_ticks() - machine_start) * TICK_S,
                "cores": os.cpu_count(),
            }
        )
    )


def _phases(folder: Path) -> dict[int, tuple[list[float], list[tuple[float, str]]]]:
    """netns -> (sorted phase starts, [(stop, file)]) from the workers' phase files."""
    by_netns: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    for path in folder.glob("phases-*.jsonl"):
        for line in path.read_text().splitlines():
            phase = json.loads(line)
            by_netns[phase["netns"]].append((phase["start"], phase["stop"], phase["file"]))
    out = {}
    for netns, phases in by_netns.items():
        phases.sort()
        out[netns] = ([p[0] for p in phases], [(p[1], p[2]) for p in phases])
    return out


def report(folder: Path) -> dict[str, Any]:
    phases = _phases(folder)
    per_file: dict[str, float] = defaultdict(float)
    outside = 0.0
    for line in (folder / "samples.jsonl").read_text().splitlines():
        sampled = json.loads(line)
        for netns_text, ticks in sampled["ticks"].items():
            netns = int(netns_text)
            if netns not in phases:
                outside += ticks * TICK_S
                continue
            starts, ends = phases[netns]
            # The phase running at the sample (or the one before it: between phases the
            # ticks are the previous file's teardown tail or the next one's collection).
            i = max(bisect.bisect_right(starts, sampled["t"] - SAMPLE_S / 2) - 1, 0)
            per_file[ends[i][1]] += ticks * TICK_S
    machine = json.loads((folder / "machine.json").read_text())
    files = dict(sorted(per_file.items(), key=lambda item: -item[1]))
    return {
        "cpu_s_by_file": {f: round(s, 1) for f, s in files.items()},
        "cpu_s_in_tests": round(sum(files.values()), 1),
        "cpu_s_elsewhere": round(outside, 1),
        "machine": machine,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("mode", choices=("sample", "report"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--json", type=Path, help="write the report here too")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    if args.mode == "sample":
        sample(args.folder)
        return 0
    found = report(args.folder)
    machine = found["machine"]
    print(
        f"CPU seconds by test file (sampled every {SAMPLE_S} s in the workers' namespaces): "
        f"{found['cpu_s_in_tests']} s in tests, {found['cpu_s_elsewhere']} s in other "
        f"namespaces; the machine: {machine['cpu_s']:.0f} s busy over "
        f"{machine['seconds']:.0f} s on {machine['cores']} cores"
    )
    total = found["cpu_s_in_tests"] or 1.0
    for file, seconds in list(found["cpu_s_by_file"].items())[: args.top]:
        print(f"{seconds:8.1f} {100 * seconds / total:5.1f}%  {file}")
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
