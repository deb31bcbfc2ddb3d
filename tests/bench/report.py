"""BENCHMARKS.md from one `make bench` report (pure: the dict run.py collected)."""

from __future__ import annotations

from typing import Any

GOAL_8_OVER_1 = 1.5
GOAL_FIRST_STEP_S = 10.0
GOAL_ENGINE_RATIO = 1.10
GOAL_HELP_OVER_CLICK = 3.0
GOAL_RERUN_SENT_BYTES = 1_000_000
GOAL_RERUN_START_RATIO = 1.2


def _s(stat: dict[str, Any] | None) -> str:
    if not stat:
        return "n/a"
    return f"{stat['median']:.2f} s (min {stat['min']:.2f}, max {stat['max']:.2f}, n={stat['n']})"


def _err(fig: dict[str, Any] | None) -> str | None:
    if fig is None:
        return "not run this time"
    if "error" in fig:
        return f"failed: `{fig['error'][:300]}`"
    return None


def _machine(report: dict[str, Any]) -> list[str]:
    m = report["machine"]
    return [
        f"- Date: {report['date']}; {report['reps']} repetition(s) per figure "
        f"({report.get('aws_reps', report['reps'])} for the AWS figures 5 and 6)"
        + f"; whole run {report.get('bench_wall_s', '?')} s",
        f"- Machine: {m['cpus']} cores ({m['processor']}), {m['memory_gib']} GiB memory, "
        f"Python {m['python']}, {m['platform']}",
        f"- Load average (1/5/15 min) at start {m['load_average_at_start']}, at end "
        f"{report.get('load_average_at_end', '?')}",
    ] + ([f"- Conditions: {report['notes']}"] if report.get("notes") else [])


def _first_step(fig: dict[str, Any] | None, parts: dict[str, float] | None) -> list[str]:
    out = ["## 1. Time to first step (2 local nodes, Keras on JAX)", ""]
    problem = _err(fig)
    if problem or fig is None:
        return [*out, problem or "", ""]
    total = fig["up_to_first_step_all_nodes_s"]
    out += [
        "| | median (min, max) |",
        "|---|---|",
        f"| `up` | {_s(fig['up_s'])} |",
        f"| `run` start → first step on every node | {_s(fig['run_to_first_step_s'])} |",
        f"| `up` start → first step on every node | {_s(total)} |",
        f"| `up` + `run` + `down` | {_s(fig['up_run_down_s'])} |",
        "",
    ]
    if total["median"] <= GOAL_FIRST_STEP_S:
        out.append(f"Goal (within {GOAL_FIRST_STEP_S:.0f} s): **met** ({total['median']:.1f} s).")
    else:
        out.append(
            f"Goal (within {GOAL_FIRST_STEP_S:.0f} s): **missed by "
            f"{total['median'] - GOAL_FIRST_STEP_S:.1f} s** ({total['median']:.1f} s). `up` is "
            f"{fig['up_s']['median']:.1f} s of it; the rest is `run`, where importing JAX and "
            "Keras and the distributed set-up dominate"
            + (
                f" (figure 2, medians: plugin jax {parts.get('plugin jax', 0):.1f} s, plugin "
                f"keras {parts.get('plugin keras', 0):.1f} s, the entry's own imports and model "
                f"until fit {parts.get('entry fit_start', 0) - parts.get('entry entered', 0):.1f}"
                f" s, fit start to first step (JIT compile) "
                f"{parts.get('entry first_step', 0) - parts.get('entry fit_start', 0):.1f} s)"
                if parts
                else ""
            )
            + ". Each of those is CPU work that a shared 2-core machine stretches."
        )
    return [*out, ""]


def _overhead(fig: dict[str, Any] | None) -> list[str]:
    out = ["## 2. Runtime overhead (the same 2-process Keras-on-JAX job, three launchers)", ""]
    problem = _err(fig)
    if problem or fig is None:
        return [*out, problem or "", ""]
    out += [
        "| launcher | wall, median (min, max) | ratio to hand-written |",
        "|---|---|---|",
        f"| `skyinfra run` (cluster up) | {_s(fig['skyinfra_run_s'])} | "
        f"{fig['ratio_run_to_handwritten']} |",
        f"| `skyinfra-runtime launch` per node | {_s(fig['runtime_launch_s'])} | "
        f"{fig['ratio_launch_to_handwritten']} |",
        f"| hand-written script (own distributed set-up) | {_s(fig['handwritten_s'])} | 1.0 |",
        "",
        "Where the time goes (medians, seconds from each launcher's start; `entry entered` is "
        "when the user's function was called, after plugin set-up; for the hand-written script "
        "`imported` is after `jax.distributed.initialize` and the Keras distribution; for "
        "`skyinfra run`, `entry` and the parts without `entry` in their names are `run`'s own "
        "count from after the CLI's start-up, the `entry ...` ones the entry's clock from the "
        "benchmark's launch of the CLI):",
        "",
    ]
    for key, label in (
        ("skyinfra_run_parts_s", "`skyinfra run`"),
        ("runtime_launch_parts_s", "`skyinfra-runtime launch`"),
        ("handwritten_parts_s", "hand-written"),
    ):
        parts = ", ".join(f"{k} {v:.2f}" for k, v in fig.get(key, {}).items())
        out.append(f"- {label}: {parts}")
    spread = max(
        (fig[k]["max"] - fig[k]["min"]) / fig[k]["median"]
        for k in ("skyinfra_run_s", "runtime_launch_s", "handwritten_s")
    )
    out += [
        "",
        "All three run the same work (JAX and Keras imports, `jax.distributed.initialize`, a "
        "Keras `DataParallel` fit); the launchers add only a process and a few file reads, so "
        "ratios away from 1.0 here measure the machine's noise more than skyinfra "
        f"(the widest min-max spread is {spread:.0%} of its median).",
    ]
    return [*out, ""]


def _fan_out(fig: dict[str, Any] | None) -> list[str]:
    out = ["## 3. Fan-out: `run` of a trivial entry", ""]
    problem = _err(fig)
    if problem or fig is None:
        return [*out, problem or "", ""]
    out += ["| nodes | `run` wall |", "|---|---|"]
    out += [f"| {n} | {_s(v.get('run_trivial_s'))} |" for n, v in fig.items()]
    return [*out, ""]


def _up_down(uv: dict[str, Any] | None, pip: dict[str, Any] | None) -> list[str]:
    out = ["## 4. `up` and `down` of local clusters, nodes installed with uv and with pip", ""]
    problem = _err(uv)
    if problem or uv is None:
        return [*out, problem or "", ""]
    pip_ok = pip is not None and "error" not in pip
    out += [
        "| nodes | `up` (uv) | `down` (uv) | `up` (pip) | `down` (pip) |",
        "|---|---|---|---|---|",
    ]
    for n, v in uv.items():
        p = pip.get(n, {}) if pip_ok and pip else {}
        out.append(
            f"| {n} | {_s(v['up_s'])} | {_s(v['down_s'])} | {_s(p.get('up_s'))} | "
            f"{_s(p.get('down_s'))} |"
        )
    if not pip_ok:
        out.append(f"\npip: {_err(pip)}")
    elif pip:
        faster = ", ".join(
            f"{n} node(s) {pip[n]['up_s']['median'] / v['up_s']['median']:.1f}x"
            for n, v in uv.items()
            if n in pip
        )
        out += ["", f"`up` with uv is faster than with pip by (medians): {faster}."]
    if "1" in uv and "8" in uv:
        ratio = uv["8"]["up_s"]["median"] / uv["1"]["up_s"]["median"]
        verdict = (
            "**met**"
            if ratio <= GOAL_8_OVER_1
            else (
                f"**missed by {ratio - GOAL_8_OVER_1:.2f}x** (8 node bootstraps share 2 cores; "
                "Terraform runs up to 10 provisioners at once, each a bash + uv + Python check)"
            )
        )
        out += [
            "",
            f"Goal (`up` of 8 nodes within {GOAL_8_OVER_1}x of 1 node, uv): "
            f"{ratio:.2f}x — {verdict}.",
        ]
    return [*out, ""]


def _engine(fig: dict[str, Any] | None) -> list[str]:
    out = ["## 5. Engine overhead: AWS target against moto, 2 nodes", ""]
    problem = _err(fig)
    if problem or fig is None:
        return [*out, problem or "", ""]
    if "skipped" in fig:
        return [*out, f"Skipped: {fig['skipped']}", ""]
    ratio = fig["ratio"]
    out += [
        f"- `skyinfra up` + `down` (CLI, embedded Terraform, preflight, staging): "
        f"{_s(fig['skyinfra_up_down_s'])}",
        f"- `terraform apply` + `destroy` of the same rendered root module "
        f"({fig['terraform_version']}): {_s(fig['terraform_apply_destroy_s'])}",
        "",
    ]
    if ratio <= GOAL_ENGINE_RATIO:
        out.append(f"Ratio {ratio:.2f}: goal (≤ {GOAL_ENGINE_RATIO}) **met**.")
    else:
        out.append(
            f"Ratio {ratio:.2f}: goal (≤ {GOAL_ENGINE_RATIO}) **missed by "
            f"{ratio - GOAL_ENGINE_RATIO:.2f}**. What skyinfra does beyond Terraform: the boto3 "
            "preflight and lookups, the wheel build and S3 staging, `init` (raw Terraform reuses "
            "the workspace's), a saved plan shown before apply, the state listing and the "
            "leftover check with EC2 after destroy."
        )
    return [*out, ""]


def _scale(fig: dict[str, Any] | None) -> list[str]:
    out = ["## 6. Scale: render and `terraform plan` of AWS clusters against moto (no apply)", ""]
    problem = _err(fig)
    if problem or fig is None:
        return [*out, problem or "", ""]
    out += [
        "| nodes | render (preflight, staging, user data) | init | plan | resources | refused by |",
        "|---|---|---|---|---|---|",
    ]
    for n, v in fig.items():
        refused = v.get("refused", "").replace("|", "/").replace("\n", " ")
        out.append(
            f"| {n} | {_s(v.get('render_s'))} | {_s(v.get('init_s'))} | {_s(v.get('plan_s'))} "
            f"| {v.get('planned_to_add', 'n/a')} | {refused or '—'} |"
        )
    timed = [n for n, v in fig.items() if "plan_s" in v]
    if len(timed) >= 2:
        a, b = fig[timed[0]], fig[timed[-1]]
        out += [
            "",
            f"From {timed[0]} to {timed[-1]} nodes ({int(timed[-1]) // int(timed[0])}x): render "
            f"{b['render_s']['median'] / a['render_s']['median']:.1f}x, plan "
            f"{b['plan_s']['median'] / a['plan_s']['median']:.2f}x. The plan's time is mostly "
            "fixed (provider start-up, the data sources and lookups against the API); the "
            "per-node part (one instance and its user data each) is small.",
        ]
    return [*out, ""]


def _startup(fig: dict[str, Any] | None) -> list[str]:
    out = ["## 7. Start-up: `skyinfra --help` beside a bare `import click`", ""]
    problem = _err(fig)
    if problem or fig is None:
        return [*out, problem or "", ""]

    def ms(stat: dict[str, Any]) -> str:
        return (
            f"{stat['median']:.0f} ms (min {stat['min']:.0f}, max {stat['max']:.0f}, n={stat['n']})"
        )

    ratio = fig["ratio"]
    verdict = (
        f"goal (≤ {GOAL_HELP_OVER_CLICK:g}x) met"
        if ratio <= GOAL_HELP_OVER_CLICK
        else f"goal (≤ {GOAL_HELP_OVER_CLICK:g}x) **missed by {ratio - GOAL_HELP_OVER_CLICK:.2f}**"
    )
    out += [
        f"- `skyinfra --help`: {ms(fig['help_ms'])}",
        f'- `python -c "import click"`: {ms(fig["import_click_ms"])}',
        "",
        f"Ratio {ratio}: {verdict}. Every command pays this start-up; the commands import what "
        "they drive when they run, and the targets' flags come from their declarations, so "
        "`--help` loads neither boto3 nor paramiko (tests/unit/test_cli_imports.py).",
    ]
    return [*out, ""]


def _ms(stat: dict[str, Any]) -> str:
    return f"{stat['median']:.0f} ms (min {stat['min']:.0f}, max {stat['max']:.0f}, n={stat['n']})"


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n} B"


def _rerun(fig: dict[str, Any] | None) -> list[str]:
    out = [
        "## 8. A re-run after a one-line change, 200 MB of data in the project (2 local nodes)",
        "",
    ]
    problem = _err(fig)
    if problem or fig is None:
        return [*out, problem or "", ""]
    rows = (
        ("empty project (re-run)", "empty_project"),
        ("200 MB project, first run (cold hash cache, full copy)", "first_run_cold_cache"),
        ("200 MB project, full copy (no earlier copy on the nodes)", "full_copy"),
        ("200 MB project, re-run after a one-line change", "rerun_one_line"),
    )
    out += [
        "| run | sent to each node | linked on each node | copy | start (`run` → entry on "
        "every node) | `run` wall |",
        "|---|---|---|---|---|---|",
    ]
    for label, key in rows:
        row = fig[key]
        out.append(
            f"| {label} | {_mb(row['sent_bytes_per_node'])} | {_mb(row['linked_bytes_per_node'])}"
            f" | {_ms(row['copy_ms'])} | {_s(row['start_s'])} | {_s(row['run_s'])} |"
        )
    ssh = fig.get("over_ssh") or {}
    if "full_copy_s" in ssh:
        out += [
            "",
            "Over SSH (the AWS target's transport: SFTP and the node's Python, to an sshd on "
            "127.0.0.1, one node; `copy_tree` alone):",
            "",
            "| copy | sent | time |",
            "|---|---|---|",
            f"| full | {_mb(ssh['full_copy_sent_bytes'])} | {_s(ssh['full_copy_s'])} |",
            f"| re-run after a one-line change | {_mb(ssh['rerun_sent_bytes'])} | "
            f"{_s(ssh['rerun_s'])} |",
        ]
    elif ssh:
        out += ["", f"Over SSH: {ssh.get('skipped') or _err(ssh)}"]
    sent = fig["rerun_one_line"]["sent_bytes_per_node"]
    ratio = fig["start_ratio_rerun_to_empty"]
    sent_ok = sent < GOAL_RERUN_SENT_BYTES
    ratio_ok = ratio <= GOAL_RERUN_START_RATIO
    out += [
        "",
        "Before the incremental copy every run was a full copy (the third row is that copy with "
        "the hash cache warm, so it measures the copy itself). `run`'s scan of the 200 MB "
        f"project takes {fig['scan_no_cache_s']:.2f} s when it hashes every file (the first "
        f"run) and {fig['scan_cached_s'] * 1000:.0f} ms with the hash cache a run leaves in the "
        "workspace, which hashes again only files whose size, mtime, ctime or inode changed "
        "(skyinfra/transport/tree.py).",
        "",
        f"Goals: under 1 MB sent — {'**met**' if sent_ok else '**missed**'} ({_mb(sent)} per "
        f"node); the re-run's start at most {GOAL_RERUN_START_RATIO}x an empty project's — "
        + (
            f"**met** ({ratio:.2f}x)."
            if ratio_ok
            else f"**missed by {ratio - GOAL_RERUN_START_RATIO:.2f}x** ({ratio:.2f}x)."
        ),
    ]
    return [*out, ""]


def _measured(report: dict[str, Any]) -> str:
    """Where and when a figure was measured (figures 9 and 10 carry it: a run of only them
    replaces their sections and leaves the others as they were)."""
    m = report["machine"]
    model = f", {m['cpu_model']}" if m.get("cpu_model") else ""
    return (
        f"Measured {report['date']}, {report['reps']} repetition(s), on {m['cpus']} cores "
        f"({m['processor']}{model}), {m['memory_gib']} GiB memory; load average at start "
        f"{m['load_average_at_start']}, at end {report.get('load_average_at_end', '?')}"
        + (f". {report['notes']}" if report.get("notes") else "")
        + "."
    )


def _detach(fig: dict[str, Any] | None, report: dict[str, Any]) -> list[str]:
    out = ["## 9. `run --detach`: time to return (2 local nodes)", ""]
    problem = _err(fig)
    if problem or fig is None:
        return [*out, problem or "", ""]
    return [
        *out,
        _measured(report),
        "",
        f"- `run --detach` of an entry that sleeps 5 s, until it returns (checks, copy, every "
        f"node's agent started and reported in): {_s(fig['run_detach_s'])}",
        f"- an attached `run` of an entry that does nothing, start to finish: "
        f"{_s(fig['run_attached_trivial_s'])}",
        "",
        "`run --detach` returns once the head's record says every node started, so it costs "
        "about what an attached `run` of nothing costs: the CLI's start, the entry check, the "
        "copy, one `supervise` per node (the head first: it says where it listens) and a few "
        "reads of the record.",
        "",
    ]


def _jobs_list(fig: dict[str, Any] | None, report: dict[str, Any]) -> list[str]:
    out = ["## 10. `skyinfra jobs` on 8 local nodes", ""]
    problem = _err(fig)
    if problem or fig is None:
        return [*out, problem or "", ""]
    return [
        *out,
        _measured(report),
        "",
        f"The cluster holds {fig['jobs']} finished jobs of {fig['nodes']} nodes each.",
        "",
        f"- `skyinfra jobs` (the table): {_s(fig['jobs_table_s'])}",
        f"- `skyinfra jobs --json`: {_s(fig['jobs_json_s'])}",
        f"- `skyinfra jobs JOB` (one function job in full, each node's result.json fetched): "
        f"{_s(fig['jobs_one_s'])}",
        "",
        "`jobs` asks the head only (one `skyinfra-runtime jobs` there, which reads the records "
        "in `jobs/`), so the node count does not enter the list; `jobs JOB` of a function "
        "fetches one small file per node.",
        "",
    ]


def splice(markdown: str, report: dict[str, Any]) -> str:
    """``markdown`` (BENCHMARKS.md as it is) with the sections of figures 9 and 10 that
    ``report`` measured replaced, or added before the closing notes: a run of only these
    figures leaves the others (and their own date and machine) as they were."""
    figures = report["figures"]
    sections = {
        "## 9.": ("detach", _detach),
        "## 10.": ("jobs_list", _jobs_list),
    }
    for heading, (name, render) in sections.items():
        if name not in figures:
            continue
        text = "\n".join(render(figures[name], report))
        lines = markdown.split("\n")
        start = next((i for i, line in enumerate(lines) if line.startswith(heading)), None)
        if start is None:
            at = next(
                (i for i, line in enumerate(lines) if line.startswith("## What holds")), len(lines)
            )
            lines[at:at] = text.split("\n")
        else:
            end = next(
                (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
            )
            lines[start:end] = text.split("\n")
        markdown = "\n".join(lines)
    return markdown


LIMITS = """## What holds the AWS node count (2026-11-23)

- No cap of our own any more (issue 16 removed the 64): the limit is the subnet. Nodes get
  fixed private addresses (`cidrhost(subnet, offset + i)`), one per node even with EFA
  (cards 1+ are EFA-only interfaces, which hold no IP). skyinfra's own subnet is a /24
  (245 nodes) and grows with the cluster up to the /16 VPC (65,525 nodes); an
  `aws.subnet_id` subnet must hold the nodes, checked in Python and in the module's
  validation. Growing past a /24 replaces the subnet, and with it the nodes.
- Placement group: a cluster placement group has no documented instance limit, but large
  groups fail with InsufficientInstanceCapacity in one zone; the zone failover (issue 13)
  is the remedy.
- Quotas: the account's running On-Demand vCPU quota per instance family, and with EFA the
  Elastic IP (one per node) and network-interface quotas; the preflight checks all three.
- User data: each node's document carries only the head's and its own topology entries, so
  it does not grow with the cluster; past EC2's 16 KB it goes gzip-compressed
  (`user_data_base64`).
- Table 6's 256-node row was measured after that change (2026-11-23, 21:25 UTC, the machine
  quieter than for the other figures; raw numbers in
  tests/bench/results/vm-2026-11-23-figure6-after-merge.json).
"""


def render_markdown(report: dict[str, Any]) -> str:
    figures = report["figures"]
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (tests/bench/run.py): every figure is the median, min and max "
        "of several runs of what a user runs. Nothing in the test suite asserts a time; goals "
        "missed say by how much and why. Raw numbers: tests/bench/results/.",
        "",
        *_machine(report),
        "",
        *_first_step(
            figures.get("first_step"), (figures.get("overhead") or {}).get("skyinfra_run_parts_s")
        ),
        *_overhead(figures.get("overhead")),
        *_fan_out(figures.get("up_down_uv")),
        *_up_down(figures.get("up_down_uv"), figures.get("up_down_pip")),
        *_engine(figures.get("engine_overhead")),
        *_scale(figures.get("aws_scale")),
        *_startup(figures.get("startup")),
        *_rerun(figures.get("rerun")),
        *_detach(figures.get("detach"), report),
        *_jobs_list(figures.get("jobs_list"), report),
        LIMITS,
    ]
    return "\n".join(lines).rstrip() + "\n"
