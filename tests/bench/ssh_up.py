"""Figure 20, the ssh target's enrolment (issue 45): `skyinfra up` of 2 and of 8 stand-in hosts
(tests/support/ssh_hosts.py: each a real sshd in a network namespace of its own, reached over
veth links; real Terraform with no provider enrols them), then `down`. Goal: `up` of 8 at most
1.5x `up` of 2 (the hosts are contacted at once and Terraform enrols them in parallel). Both
clusters use the same 8 stand-ins (node folders of their own: one cluster is up at a time);
each side is brought up and down once before timing (Terraform's init, the runtime wheel's
build), then the two alternate.

    tests/loopback-only.sh .venv/bin/python tests/bench/ssh_up.py [--reps N] [--out FILE]
        [--markdown BENCHMARKS.md]

It makes network namespaces, a bridge and routing rules: run it as root, inside a namespace of
its own (tests/loopback-only.sh), never in the machine's network. Not part of `make test` or
`make bench`; nothing here asserts a time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from common import VENV_BIN, BenchError, figure_script, machine, splice_figure, stats

from tests.support.ssh_hosts import Hosts, stand_in_hosts

SIDES = {"two": 2, "eight": 8}
GOAL_RATIO = 1.5


def _cli(args: list[str], root: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(
        [str(VENV_BIN / "skyinfra"), *args], cwd=root, env=env, capture_output=True, text=True
    )
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise BenchError(
            f"{args} in {root} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return took


def _project(base: Path, side: str, hosts: Hosts) -> Path:
    root = base / side
    root.mkdir()
    chosen = ", ".join(f'"{a}"' for a in hosts.addresses[: SIDES[side]])
    root.joinpath("skyinfra.toml").write_text(
        f'name = "{side}"\nprovider = "ssh"\nnodes = {SIDES[side]}\n\n[ssh]\n'
        f'hosts = [{chosen}]\nuser = "{hosts.user}"\nkey = "{hosts.key}"\n'
    )
    return root


def _stages(root: Path, side: str) -> dict[str, float]:
    """The last `up`'s timeline (skyinfra.timeline): seconds per stage, the per-node
    resources' applies summed under one name."""
    timeline = json.loads((root / ".skyinfra" / "clusters" / side / "timeline.json").read_text())
    out: dict[str, float] = {}
    for stage in timeline["stages"]:
        name = "node applies (longest)" if 'node["node-' in stage["name"] else stage["name"]
        took = float(stage["seconds"])
        out[name] = round(max(out.get(name, 0.0), took), 2)
    return out


def measure(reps: int) -> dict[str, Any]:
    at_start = machine()
    ups: dict[str, list[float]] = {side: [] for side in SIDES}
    downs: dict[str, list[float]] = {side: [] for side in SIDES}
    stages: dict[str, dict[str, float]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="skyinfra-bench-ssh-") as tmp,
        stand_in_hosts(max(SIDES.values())) as hosts,
    ):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")}
        env["HOME"] = str(Path(tmp) / "operator-home")  # no known_hosts of this machine's
        env["SKYINFRA_CACHE"] = str(Path(tmp) / "cache")
        env["SKYINFRA_TF_PLUGIN_CACHE"] = str(Path(tmp) / "tf-plugins")
        Path(env["HOME"]).mkdir()
        roots = {side: _project(Path(tmp), side, hosts) for side in SIDES}
        for root in roots.values():  # warm: Terraform's init, the wheel, outside timing
            _cli(["up", "--yes"], root, env)
            _cli(["down", "--yes"], root, env)
        for _ in range(reps):
            for side, root in roots.items():
                ups[side].append(_cli(["up", "--yes"], root, env))
                stages[side] = _stages(root, side)
                downs[side].append(_cli(["down", "--yes"], root, env))
        left = [hosts.home_listing(h) for h in hosts.hosts]
        if any(left):
            raise BenchError(f"`down` left files on the stand-ins: {left}")
    two, eight = stats(ups["two"]), stats(ups["eight"])
    ratios = [b / a for a, b in zip(ups["two"], ups["eight"], strict=True)]
    return {
        "machine": at_start,
        "up_2_hosts_s": two,
        "up_8_hosts_s": eight,
        "down_2_hosts_s": stats(downs["two"]),
        "down_8_hosts_s": stats(downs["eight"]),
        "ratio_of_medians": round(eight["median"] / two["median"], 2),
        "ratio_per_pair": stats(ratios),
        "goal_ratio": GOAL_RATIO,
        "last_up_stages_s": stages,
    }


def _row(what: str, v: dict[str, Any]) -> str:
    return f"| {what} | {v['median']:.2f} s | {v['min']:.2f} s | {v['max']:.2f} s |"


def section(fig: dict[str, Any], date: str, notes: str = "") -> list[str]:
    out = ["## 20. The ssh target: `up` of 2 and of 8 hosts (stand-in sshds)", ""]
    if "error" in fig:
        return [*out, f"failed: `{fig['error'][:300]}`", ""]
    m, eight = fig["machine"], fig["up_8_hosts_s"]
    ratio, worst = fig["ratio_of_medians"], fig["ratio_per_pair"]["max"]
    if ratio > GOAL_RATIO:
        verdict = f"missed by the median, by {ratio - GOAL_RATIO:.2f}x"
    elif worst > GOAL_RATIO:
        verdict = f"met by the median, not in every repetition (up to {worst:.2f}x)"
    else:
        verdict = "met in every repetition"
    stage_rows = [
        f"| {name} | {fig['last_up_stages_s']['two'].get(name, 0.0):.2f} s | {seconds:.2f} s |"
        for name, seconds in fig["last_up_stages_s"]["eight"].items()
    ]
    return [
        *out,
        f"Measured {date}, {eight['n']} repetition(s) a side (`tests/loopback-only.sh "
        "python tests/bench/ssh_up.py`, not part of `make bench`), on "
        f"{m['cpus']} cores ({m['processor']}, {m['cpu_model']}), {m['memory_gib']} GiB, "
        f"Python {m['python']}; load average at start {m['load_average_at_start']}, at end "
        f"{fig.get('load_average_at_end', '?')}.",
        *([notes] if notes else []),
        "",
        "`skyinfra up --yes` (the CLI, first contact over SSH, the embedded Terraform with no "
        "provider: one `terraform_data` per host whose provisioners copy the runtime wheel and "
        "uv and run the bootstrap) of a cluster of 2 and of 8 stand-in hosts: each a real sshd "
        "in a network namespace of its own behind a veth link, on this machine "
        "(tests/support/ssh_hosts.py). No python_packages: each host's venv gets the runtime "
        "wheel only. Each side brought up and down once first, then the two alternate, each "
        "`up` followed by its `down`.",
        "",
        "| | median | min | max |",
        "|---|---|---|---|",
        _row("`up`, 2 hosts", fig["up_2_hosts_s"]),
        _row("`up`, 8 hosts", eight),
        _row("`down`, 2 hosts", fig["down_2_hosts_s"]),
        _row("`down`, 8 hosts", fig["down_8_hosts_s"]),
        "",
        f"Ratio of the `up` medians: {ratio:.2f}x; each repetition's own pair: "
        f"{fig['ratio_per_pair']['median']:.2f}x (min {fig['ratio_per_pair']['min']:.2f}, "
        f"max {worst:.2f}). Goal (at most {GOAL_RATIO}x): {verdict}.",
        "",
        "The last repetition's `up`, stage by stage (skyinfra's timeline.json; the node "
        "applies are the longest of the hosts' resources):",
        "",
        "| stage | 2 hosts | 8 hosts |",
        "|---|---|---|",
        *stage_rows,
        "",
    ]


def splice(markdown: str, result: dict[str, Any]) -> str:
    """BENCHMARKS.md with figure 20's section replaced (or put before the closing notes)."""
    return splice_figure(
        markdown, 20, section(result, result.get("date", "?"), result.get("notes", ""))
    )


def main() -> None:
    figure_script(splice, lambda ns: measure(ns.reps))


if __name__ == "__main__":
    main()
