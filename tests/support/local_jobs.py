"""What the local end-to-end tests of runs and jobs share: the CLI as a user runs it, an
environment of a test module's own, and the processes a local cluster's nodes left behind."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import skyinfra_argv
from tests.support.waits import wait_until


def cli(
    args: list[str], cwd: Path, env: dict[str, str], timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*skyinfra_argv(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


# The states after which no process of the job changes its record (jobrecord.FINAL_STATES).
FINAL = ("succeeded", "failed", "cancelled", "timed_out", "needs_nodes", "lost")


def job_record(
    cluster: str | None, project: Path, env: dict[str, str], job: str, *flags: str
) -> dict[str, Any]:
    """The job's record as `skyinfra jobs --json JOB` prints it (``cluster`` None: the one
    the project's spec names)."""
    where = ["--cluster", cluster] if cluster else []
    shown = cli(["jobs", *where, "--json", job, *flags], project, env)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    found = json.loads(shown.stdout)
    assert isinstance(found, dict), found
    return found


def wait_for_record(
    cluster: str | None,
    project: Path,
    env: dict[str, str],
    job: str,
    done: Callable[[dict[str, Any]], bool],
    what: str,
    deadline_s: float = 300,
) -> dict[str, Any]:
    """The job's record (through the CLI, as a user reads it) once ``done`` holds for it."""
    return wait_until(
        f"job {job} {what}", lambda: job_record(cluster, project, env, job), done, deadline_s
    )


def wait_for_state(
    cluster: str | None, project: Path, env: dict[str, str], job: str, states: tuple[str, ...]
) -> str:
    """The job's state once it is one of ``states``."""
    record = wait_for_record(
        cluster, project, env, job, lambda r: r["state"] in states, f"in one of {states}"
    )
    return str(record["state"])


def wait_until_ended(
    cluster: str | None, project: Path, env: dict[str, str], job: str, deadline_s: float = 300
) -> dict[str, Any]:
    """The job's record once it is final (FINAL)."""
    return wait_for_record(
        cluster, project, env, job, lambda r: r["state"] in FINAL, f"in one of {FINAL}", deadline_s
    )


def module_env(
    tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path, label: str
) -> dict[str, str]:
    """The operator's environment for one test module's cluster: no inherited skyinfra
    settings, a cache of the module's own, the worker's Terraform plugin cache."""
    cache = tmp_path_factory.mktemp(f"{label}-cache")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")}
    env["SKYINFRA_CACHE"] = str(cache / "cache")
    env["SKYINFRA_TF_PLUGIN_CACHE"] = str(tf_plugin_cache)
    return env


def node_processes(nodes_dir: Path, job: str | None = None) -> list[str]:
    """ "PID COMMAND" of each process of a local cluster's nodes (their environment names the
    node directory), or of one job's (its environment or command line names the run id),
    found through /proc."""
    mark = f"SKYINFRA_LOCAL_NODE_DIR={nodes_dir}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if entry.name == str(os.getpid()) or not any(v.startswith(mark) for v in environ):
            continue
        if job is None or f"SKYINFRA_RUN_ID={job}".encode() in environ or job in cmd:
            found.append(f"{entry.name} {cmd}")
    return found


@contextmanager
def cluster_up(
    project: Path,
    env: dict[str, str],
    name: str,
    up_args: Sequence[str] = (),
    up_timeout: int = 300,
) -> Iterator[Path]:
    """`up` of ``project``'s spec (and ``up_args``, flags that may stand for it); at the end
    `down --yes`, which must succeed."""
    up = cli(["up", *up_args], project, env, timeout=up_timeout)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield project
    finally:
        down = cli(["down", "--yes", "--cluster", name], project, env)
        assert down.returncode == 0, down.stdout + down.stderr
