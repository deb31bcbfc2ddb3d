"""Where the suite's CPU goes, by what ran (`make bench-suite-processes`).

cpu_by_file.py says which test files cost the most; this says which programs: the standby and
cold workers (framework imports and training), Terraform and the AWS provider, the skyinfra
CLI calls, the runtime's short processes (launch, supervise, jobs, logs), installs. The kernel's
process accounting (acct(2), root only) writes every process's exact CPU time as it ends, short
ones included; it has no command line, so a sampler reads each process's from /proc every
SAMPLE_S (a process that lives less than that is grouped by its command name only).

    python tests/bench/cpu_by_process.py on FILE        # acct(2) into FILE (root)
    python tests/bench/cpu_by_process.py sample OUT     # command lines, until killed
    python tests/bench/cpu_by_process.py off
    python tests/bench/cpu_by_process.py report FILE CMDLINES [--json J]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import struct
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SAMPLE_S = 0.2
# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime,
# etime (float), then 8 comp_t (utime, stime, ...) and the 16-byte command name.
ACCT_V3 = struct.Struct("<bbHIIIIIIf8H16s")
AHZ = 100  # comp_t times are in 1/AHZ s

# (family, pattern over "COMM\tCMDLINE"), the first match wins.
FAMILIES = (
    ("standby workers (their imports, then the job each took)", r"skyinfra_runtime\.standby "),
    ("cold workers, torchrun, node checks", r"skyinfra_runtime\.worker |torchrun|check-node|Facts"),
    ("Terraform (embedded and binary)", r"_embedded\.py|^terraform\t"),
    ("the AWS provider", r"^terraform-provi"),
    ("the runtime's other processes (launch, supervise, jobs, logs)", r"skyinfra[-_]runtime"),
    ("skyinfra CLI calls", r"bin/skyinfra "),
    ("pytest and its workers", r"-m pytest|exec\(eval\(sys\.stdin"),
    ("uv and pip installs", r"\buv\b|-m pip|pip install"),
    ("sshd and ssh", r"^sshd|^ssh\t|^scp\t"),
    ("checkov", r"checkov"),
)


def _comp(value: int) -> float:
    """A comp_t (13-bit mantissa, 3-bit base-8 exponent) in seconds."""
    return ((value & 0x1FFF) << (3 * ((value >> 13) & 7))) / AHZ


def records(path: Path) -> Iterator[tuple[int, float, str]]:
    """(pid, CPU seconds, command name) of every process accounted in ``path``."""
    data = path.read_bytes()
    for offset in range(0, len(data) - ACCT_V3.size + 1, ACCT_V3.size):
        fields = ACCT_V3.unpack_from(data, offset)
        pid, utime, stime, comm = fields[6], fields[10], fields[11], fields[-1]
        yield pid, _comp(utime) + _comp(stime), comm.split(b"\0")[0].decode("latin-1")


def _acct(path: bytes | None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(path) != 0:
        raise SystemExit(f"acct: {os.strerror(ctypes.get_errno())} (root only)")


def sample(out: Path) -> None:
    seen: set[tuple[str, str]] = set()
    with out.open("a") as file:
        while True:
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                try:
                    start = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[19]
                    if (entry.name, start) in seen:
                        continue
                    raw = Path(entry.path, "cmdline").read_bytes()
                except OSError:
                    continue
                if raw:
                    seen.add((entry.name, start))
                    line = raw.replace(b"\0", b" ").replace(b"\n", b" ").decode("latin-1")
                    file.write(f"{entry.name} {line[:300]}\n")
            file.flush()
            time.sleep(SAMPLE_S)


REST = "the rest"


def family(comm: str, cmdline: str) -> str:
    text = f"{comm}\t{cmdline}"
    for name, pattern in FAMILIES:
        if re.search(pattern, text):
            return name
    return REST


def _program(comm: str, cmdline: str) -> str:
    """What a process of the rest was: its program and first argument, or its command name."""
    words = [w.rsplit("/", 1)[-1] for w in cmdline.split()[:2]]
    return re.sub(r"\d+", "N", " ".join(words)) if words else f"[{comm}]"


def report(acct_file: Path, cmdlines: Path) -> dict[str, Any]:
    lines: dict[int, str] = {}
    for line in cmdlines.read_text(errors="replace").splitlines():
        pid, _, rest = line.partition(" ")
        if pid.isdigit():
            lines[int(pid)] = rest  # a pid used twice keeps its last command line
    cpu: Counter[str] = Counter()
    count: Counter[str] = Counter()
    rest: Counter[str] = Counter()
    for pid, seconds, comm in records(acct_file):
        cmdline = lines.get(pid, "")
        name = family(comm, cmdline)
        cpu[name] += seconds
        count[name] += 1
        if name == REST:
            rest[_program(comm, cmdline)] += seconds
    total = sum(cpu.values()) or 1.0
    return {
        "cpu_s": round(total, 1),
        "processes": sum(count.values()),
        "families": [
            {"family": n, "cpu_s": round(s, 1), "share": round(s / total, 3), "processes": count[n]}
            for n, s in cpu.most_common()
        ],
        "rest_by_program": {p: round(s, 1) for p, s in rest.most_common(10)},
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="cpu_by_process.py")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("on").add_argument("file", type=Path)
    sub.add_parser("off")
    sub.add_parser("sample").add_argument("out", type=Path)
    rep = sub.add_parser("report")
    rep.add_argument("file", type=Path)
    rep.add_argument("cmdlines", type=Path)
    rep.add_argument("--json", type=Path)
    ns = parser.parse_args(argv)
    if ns.command == "on":
        ns.file.touch()
        _acct(os.fsencode(ns.file.resolve()))
    elif ns.command == "off":
        _acct(None)
    elif ns.command == "sample":
        sample(ns.out)
    else:
        result = report(ns.file, ns.cmdlines)
        print(f"{result['cpu_s']} CPU-s in {result['processes']} processes")
        for row in result["families"]:
            share = f"{100 * row['share']:5.1f}%"
            print(f"{row['cpu_s']:8.1f} {share} {row['processes']:6d}  {row['family']}")
        print("the rest, by program:", result["rest_by_program"])
        if ns.json:
            ns.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
