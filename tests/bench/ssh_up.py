"""Figure 20, the ssh target's enrolment (issue 45): `skyinfra up` of 2 and of 8 stand-in hosts
(tests/support/ssh_hosts.py: each a real sshd in a network namespace of its own, reached over
veth links; real Terraform with no provider enrols them), then `down`. Goal: `up` of 8 at most
1.5x `up` of 2 (the hosts are contacted at once and Terraform enrols them in parallel). Both
clusters use the same 8 stand-ins (node folders of their own: one cluster is up at a time);
each side is brought up and down once before timing (Terraform's init, the runtime wheel's
build), then the two alternate.

Measured in three settings. Shared: all 8 stand-ins draw on this machine's cores, so 8
enrolments cost 4 times the CPU of 2 on the same cores, which no concurrency can hide. A share
each: every stand-in's sshd, and so everything a login starts there, in a CPU cgroup of its own
limited to cores/8 (the share each would have if the 8 split the machine evenly), in both runs:
2 and 8 hosts of the same size, as 8 real machines each bring their own CPU. The control: a
share each, with Terraform applying one resource at a time, which this setting must show far
above the goal (8 enrolments in a row against 2: up to 4x). The operator's side (the CLI and
Terraform) is never limited.

    tests/loopback-only.sh .venv/bin/python tests/bench/ssh_up.py [--reps N] [--out FILE]
        [--markdown BENCHMARKS.md]

It makes network namespaces, a bridge and routing rules: run it as root, inside a namespace of
its own (tests/loopback-only.sh), never in the machine's network. Not part of `make test` or
`make bench`; nothing here asserts a time.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

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

from tests.support.ssh_hosts import Hosts, stand_in_hosts

SIDES = {"two": 2, "eight": 8}
GOAL_RATIO = 1.5
CPU_PERIOD_US = 100_000
CONTROL_REPS = 2


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


def _cpu_controller() -> tuple[Path, str] | None:
    """Where CPU cgroups are made and how a limit is written: cgroup v2's cpu.max where the
    root delegates the cpu controller, else v1's cpu hierarchy; None without either. (The
    figures in BENCHMARKS.md come from a machine with v1.)"""
    unified = Path("/sys/fs/cgroup")
    controllers = unified / "cgroup.controllers"
    if controllers.is_file() and "cpu" in controllers.read_text().split():
        return unified, "v2"
    if (unified / "cpu" / "cpu.cfs_quota_us").is_file():
        return unified / "cpu", "v1"
    return None


@contextlib.contextmanager
def cpu_share_each(hosts: Hosts, cores: float) -> Iterator[None]:
    """Each stand-in's sshd (and what its logins start) in a cgroup of its own, limited to
    ``cores`` CPUs; the sshds back in the root cgroup and the cgroups removed at the end."""
    found = _cpu_controller()
    if found is None:
        raise BenchError("no CPU cgroup controller (cgroup v2 cpu.max or v1 cpu) to limit hosts")
    root, version = found
    parent = root / f"skyinfra-bench-ssh-{os.getpid()}"
    parent.mkdir()
    quota = int(cores * CPU_PERIOD_US)
    groups = []
    try:
        if version == "v2":
            (root / "cgroup.subtree_control").write_text("+cpu")
            (parent / "cgroup.subtree_control").write_text("+cpu")
        for k, host in enumerate(hosts.hosts):
            if host.sshd is None:
                raise BenchError(f"stand-in {host.address} has no sshd to limit")
            group = parent / f"host-{k}"
            group.mkdir()
            groups.append(group)
            if version == "v2":
                (group / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")
            else:
                (group / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
                (group / "cpu.cfs_quota_us").write_text(str(quota))
            (group / "cgroup.procs").write_text(str(host.sshd.pid))
        yield
    finally:
        for group in [*groups, parent]:
            # Whatever still runs there (the sshds) goes back to the root, then the group.
            for _ in range(50):
                pids = (group / "cgroup.procs").read_text().split()
                for pid in pids:
                    with contextlib.suppress(OSError):
                        (root / "cgroup.procs").write_text(pid)
                try:
                    group.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


def _sides(roots: dict[str, Path], env: dict[str, str], reps: int) -> dict[str, Any]:
    """Both sides up and down once (not timed), then ``reps`` alternating pairs."""
    ups: dict[str, list[float]] = {side: [] for side in SIDES}
    downs: dict[str, list[float]] = {side: [] for side in SIDES}
    stages: dict[str, dict[str, float]] = {}
    for root in roots.values():  # warm: Terraform's init, the wheel, outside timing
        _cli(["up", "--yes"], root, env)
        _cli(["down", "--yes"], root, env)
    for _ in range(reps):
        for side, root in roots.items():
            ups[side].append(_cli(["up", "--yes"], root, env))
            stages[side] = _stages(root, side)
            downs[side].append(_cli(["down", "--yes"], root, env))
    return {
        "up_2_hosts_s": stats(ups["two"]),
        "up_8_hosts_s": stats(ups["eight"]),
        "down_2_hosts_s": stats(downs["two"]),
        "down_8_hosts_s": stats(downs["eight"]),
        **ratios(ups["two"], ups["eight"]),
        "last_up_stages_s": stages,
    }


def measure(reps: int) -> dict[str, Any]:
    at_start = machine()
    share = (os.cpu_count() or 1) / max(SIDES.values())
    modes: dict[str, dict[str, Any]] = {}
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
        modes["shared"] = _sides(roots, env, reps)
        with cpu_share_each(hosts, share):
            modes["a share each"] = _sides(roots, env, reps)
            # The control: the same hosts enrolled one at a time (Terraform applies one
            # resource at a time) must land far above the goal, or this setting could not tell.
            one_at_a_time = {**env, "TF_CLI_ARGS_apply": "-parallelism=1"}
            modes["one at a time"] = _sides(roots, one_at_a_time, min(reps, CONTROL_REPS))
        left = [hosts.home_listing(h) for h in hosts.hosts]
        if any(left):
            raise BenchError(f"`down` left files on the stand-ins: {left}")
    return {
        "machine": at_start,
        "cpu_share_each_cores": round(share, 3),
        "modes": modes,
        "goal_ratio": GOAL_RATIO,
    }


def _row(what: str, v: dict[str, Any]) -> str:
    return f"| {what} | {v['median']:.2f} s | {v['min']:.2f} s | {v['max']:.2f} s |"


def _mode_lines(title: str, fig: dict[str, Any], *, judged: bool = True) -> list[str]:
    pair = fig["ratio_per_pair"]
    verdict = ratio_verdict(fig, GOAL_RATIO)
    goal = f"Goal (at most {GOAL_RATIO}x): {verdict}." if judged else "Not judged."
    stage_rows = [
        f"| {name} | {fig['last_up_stages_s']['two'].get(name, 0.0):.2f} s | {seconds:.2f} s |"
        for name, seconds in fig["last_up_stages_s"]["eight"].items()
    ]
    return [
        f"{title}:",
        "",
        "| | median | min | max |",
        "|---|---|---|---|",
        _row("`up`, 2 hosts", fig["up_2_hosts_s"]),
        _row("`up`, 8 hosts", fig["up_8_hosts_s"]),
        _row("`down`, 2 hosts", fig["down_2_hosts_s"]),
        _row("`down`, 8 hosts", fig["down_8_hosts_s"]),
        "",
        f"Ratio of the `up` medians: {fig['ratio_of_medians']:.2f}x; each repetition's own "
        f"pair: {pair['median']:.2f}x (min {pair['min']:.2f}, max {pair['max']:.2f}). {goal}",
        "",
        "The last repetition's `up`, stage by stage (skyinfra's timeline.json; the node "
        "applies are the longest of the hosts' resources):",
        "",
        "| stage | 2 hosts | 8 hosts |",
        "|---|---|---|",
        *stage_rows,
        "",
    ]


def section(fig: dict[str, Any], date: str, notes: str = "") -> list[str]:
    out = ["## 20. The ssh target: `up` of 2 and of 8 hosts (stand-in sshds)", ""]
    if "error" in fig:
        return [*out, f"failed: `{fig['error'][:300]}`", ""]
    m, modes = fig["machine"], fig["modes"]
    share = fig["cpu_share_each_cores"]
    return [
        *out,
        f"Measured {date}, {modes['shared']['up_8_hosts_s']['n']} repetition(s) a side in "
        "each setting (`tests/loopback-only.sh python tests/bench/ssh_up.py`, not part of "
        f"`make bench`), on {m['cpus']} cores ({m['processor']}, {m['cpu_model']}), "
        f"{m['memory_gib']} GiB, Python {m['python']}; load average at start "
        f"{m['load_average_at_start']}, at end {fig.get('load_average_at_end', '?')}.",
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
        "Three settings. Shared: the 8 stand-ins draw on this machine's cores, so 8 enrolments "
        "cost 4 times the CPU of 2 on the same cores, which no concurrency hides. A share "
        f"each: every stand-in's sshd, and everything its logins start, in a CPU cgroup of its "
        f"own limited to {share:g} of a core (the cores split evenly among the 8), in both runs: "
        "2 and 8 hosts of the same size, each bringing its own CPU as real hosts do, so the "
        "ratio shows whether `up` enrols them at once. The control: a share each, the hosts "
        "enrolled one at a time, which the setting must tell from the rest (8 enrolments in "
        "a row against 2: up to 4x). The "
        "operator's side (the CLI, Terraform) is never limited.",
        "",
        *_mode_lines("Shared", modes["shared"]),
        *_mode_lines(f"A share each ({share:g} of a core a host)", modes["a share each"]),
        *_mode_lines(
            "The control, a share each with the hosts enrolled one at a time (Terraform's "
            "`-parallelism=1` through TF_CLI_ARGS_apply): what the setting shows of an `up` "
            "that does not enrol at once",
            modes["one at a time"],
            judged=False,
        ),
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
