"""A job's env and secrets end to end on one 2-node local cluster with the jax plugin (shared
by the module): the spec's `env` and `secrets`, `run --env`/`--secret`, attached and detached,
the nodes' clean environment, a planted secret searched for everywhere, and the refusals
(exit 2, nothing started). Real processes only; the AWS transport's side is
tests/integration/aws/test_job_secrets_ssh.py."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.leaks import files_holding
from tests.support.local_jobs import cli as run_cli
from tests.support.local_jobs import cluster_up, module_env

pytestmark = pytest.mark.slow

NAME = "jobenv"
SECRET = "planted-" + "c0ffee-9d2b71e5a4"
OPERATOR_ONLY = "operator-" + "only-4e1f"
SPEC = f"""\
name = "{NAME}"
nodes = 2
plugins = ["jax"]
secrets = ["PLANTED_SECRET"]

[env]
XLA_FLAGS = "--xla_force_host_platform_device_count=4"
FROM_SPEC = "spec"
OVERRIDE_ME = "spec"
"""
PROBE = """\
import hashlib, os, time

NAMES = ("FROM_SPEC", "OVERRIDE_ME", "FROM_CLI", "FROM_OPERATOR", "OPERATOR_ONLY", "HOME")


def main():
    import jax  # the jax plugin initialised it before this function: XLA_FLAGS was in effect

    secret = os.environ.get("PLANTED_SECRET", "")
    print("secret:", secret, flush=True)
    return {
        "local_devices": jax.local_device_count(),
        "devices": jax.device_count(),
        "env": {k: os.environ.get(k) for k in NAMES},
        "secret_sha256": hashlib.sha256(secret.encode()).hexdigest(),
    }


def returns_it():
    secret = os.environ["PLANTED_SECRET"]
    return {"raw": secret, "inside": f"token={secret};", "listed": [secret], secret: "as a key"}


def wait():
    print("secret:", os.environ.get("PLANTED_SECRET", ""), flush=True)
    time.sleep(3)
    return os.environ.get("FROM_CLI")
"""


def cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_cli(args, cwd, env, timeout=600)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> dict[str, str]:
    env = module_env(tmp_path_factory, tf_plugin_cache, "jobenv")
    env["PLANTED_SECRET"] = SECRET
    env["OPERATOR_ONLY"] = OPERATOR_ONLY  # in the operator's shell: never on a local node
    env["FROM_OPERATOR"] = "from the operator"
    return env


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Path]:
    proj = tmp_path_factory.mktemp("jobenv-project")
    (proj / "skyinfra.toml").write_text(SPEC)
    (proj / "probe.py").write_text(PROBE)
    with cluster_up(proj, env, NAME):
        yield proj


def workspace(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME


def test_env_and_secrets_reach_every_worker_before_the_plugins(
    project: Path, env: dict[str, str]
) -> None:
    run = cli(
        [
            "run", "--cluster", NAME, "--all-logs",
            "--env", "OVERRIDE_ME=cli", "--env", "FROM_CLI=cli", "--env", "FROM_OPERATOR",
            "probe.py:main",
        ],
        project,
        env,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    # The spec's env sets XLA_FLAGS: every job starts cold, so `up` started no standby.
    assert not list((workspace(project) / "nodes").glob("node-*/standby")), "a standby"
    run_dir = max((workspace(project) / "runs").iterdir())  # run ids sort by start time
    summary = json.loads((run_dir / "summary.json").read_text())
    values = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]
    sha = hashlib.sha256(SECRET.encode()).hexdigest()
    for v in values:
        assert (v["local_devices"], v["devices"]) == (4, 8), v  # XLA_FLAGS before jax's set-up
        assert v["secret_sha256"] == sha
        assert v["env"] == {
            "FROM_SPEC": "spec",
            "OVERRIDE_ME": "cli",  # the command line wins
            "FROM_CLI": "cli",
            "FROM_OPERATOR": "from the operator",
            "OPERATOR_ONLY": None,  # a clean environment, not the operator's
            "HOME": os.environ["HOME"],
        }
    assert "[node-1] secret: ***" in run.stdout and SECRET not in run.stdout + run.stderr
    job = summary["run_id"]
    shown = cli(["jobs", "--cluster", NAME, job], project, env)
    assert shown.returncode == 0, shown.stderr
    for line in ("FROM_CLI=cli", "OVERRIDE_ME=cli", "XLA_FLAGS=--xla_force", "PLANTED_SECRET=***"):
        assert line in shown.stdout, shown.stdout
    record = json.loads((run_dir / "job.json").read_text())
    assert record["secrets"] == ["PLANTED_SECRET"] and record["env"]["FROM_SPEC"] == "spec"
    assert files_holding(workspace(project), SECRET) == []
    assert files_holding(workspace(project), OPERATOR_ONLY) == []


def test_a_returned_secret_is_masked_before_it_is_kept_anywhere(
    project: Path, env: dict[str, str]
) -> None:
    """A function that returns the secret (whole, inside a string, in a list, as a key): its
    value is *** in the nodes' result.json, the operator's summary.json and node-N.result.json,
    what `run` prints and what `jobs JOB` shows; no file holds the value."""
    run = cli(["run", "--cluster", NAME, "probe.py:returns_it"], project, env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert SECRET not in run.stdout + run.stderr
    run_dir = max((workspace(project) / "runs").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    masked = {"raw": "***", "inside": "token=***;", "listed": ["***"], "***": "as a key"}
    assert [n["result"]["workers"][0]["value"] for n in summary["nodes"]] == [masked, masked]
    shown = cli(["jobs", "--cluster", NAME, summary["run_id"]], project, env)
    assert shown.returncode == 0 and SECRET not in shown.stdout, shown.stdout + shown.stderr
    assert files_holding(workspace(project), SECRET) == []  # the local nodes' folders too


def test_a_detached_job_gets_them_and_no_command_line_shows_a_secret(
    project: Path, env: dict[str, str]
) -> None:
    res = cli(["run", "--cluster", NAME, "-d", "--env", "FROM_CLI=detached", "probe.py:wait"],
              project, env)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    job = res.stdout.split("job ", 1)[1].split()[0]
    leaks = []
    nodes = str(workspace(project) / "nodes").encode()
    end = time.monotonic() + 60
    while time.monotonic() < end:
        rec = json.loads(cli(["jobs", "--cluster", NAME, "--json", job], project, env).stdout)
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                cmd = (entry / "cmdline").read_bytes()
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if SECRET.encode() in cmd or (nodes in environ and b"SKYINFRA_JOB_TOKEN" in environ):
                leaks.append(cmd.decode(errors="replace"))
        if rec["state"] not in ("starting", "running"):
            break
    assert rec["state"] == "succeeded", rec
    assert leaks == []
    logs = cli(["logs", "--cluster", NAME, job, "--all"], project, env)
    assert "[node-0] secret: ***" in logs.stdout and "[node-1] secret: ***" in logs.stdout
    result = workspace(project) / "nodes" / "node-1" / "runs" / job / "result.json"
    assert json.loads(result.read_text())["workers"][0]["value"] == "detached"
    assert files_holding(workspace(project), SECRET) == []


@pytest.mark.parametrize(
    ("args", "named", "unset"),
    [
        (["--env", "1BAD=x"], "1BAD", None),
        (["--env", "RANK=3"], "RANK", None),
        (["--env", "SKYINFRA_NODE=3"], "SKYINFRA_NODE", None),
        (["--env", "NOT_IN_THIS_SHELL"], "NOT_IN_THIS_SHELL", None),
        (["--secret", "MISSING_SECRET"], "MISSING_SECRET", None),
        (["--secret", "INLINE=inline-" + "value-7f3a"], "INLINE", None),
        ([], "PLANTED_SECRET", "PLANTED_SECRET"),  # the spec's secret, not in this shell
    ],
)
def test_bad_names_and_missing_values_start_nothing(
    project: Path, env: dict[str, str], args: list[str], named: str, unset: str | None
) -> None:
    runs = workspace(project) / "runs"
    before = sorted(p.name for p in runs.iterdir()) if runs.is_dir() else []

    def records() -> object:
        """The job records as kept (without the reading's time and the ages counted from it)."""
        listed = json.loads(cli(["jobs", "--cluster", NAME, "--json"], project, env).stdout)
        volatile = ("checked_at", "last_output_age_s")
        return [{k: v for k, v in j.items() if k not in volatile} for j in listed]

    jobs_before = records()
    shell = {k: v for k, v in env.items() if k != unset}
    res = cli(["run", "--cluster", NAME, *args, "probe.py:wait"], project, shell)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"'{named}'" in res.stderr, res.stderr
    assert "inline-value-7f3a" not in res.stdout + res.stderr
    after = sorted(p.name for p in runs.iterdir()) if runs.is_dir() else []
    assert after == before
    assert records() == jobs_before
