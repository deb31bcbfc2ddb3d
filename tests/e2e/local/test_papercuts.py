"""A newcomer's small surprises (issue 42, item 13), end to end on one 2-node local cluster
(shared by the module): a "no" at a prompt, a script's missing return value, `logs --all
--tail` in node order, Ctrl-C on `logs --follow` and on an attached `run`, and `jobs` after
`down`. Real processes, a real terminal (a pseudo-terminal) where a prompt needs one."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import skyinfra_argv
from tests.support.local_jobs import cli, cluster_up, job_record, module_env, wait_until_ended
from tests.support.workers import until_first_line

pytestmark = pytest.mark.slow

NAME = "cuts"

SCRIPT = """\
import os, sys
for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    print(f"line {i} of node {os.environ['SKYINFRA_NODE']}", flush=True)
"""

CODE = """\
import os, time


def nothing():
    print("returning nothing", flush=True)


def gated():
    # One line, then nothing until the test opens the gate in the node's shared folder.
    print("waiting", flush=True)
    gate = os.path.join(os.environ["SKYINFRA_SHARED_DIR"], "gate-" + os.environ["SKYINFRA_RUN_ID"])
    while not os.path.exists(gate):
        time.sleep(0.1)
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> dict[str, str]:
    return module_env(tmp_path_factory, tf_plugin_cache, "cuts")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Path]:
    """One 2-node local cluster; `down --yes` at the end (the last test downs it first)."""
    proj = tmp_path_factory.mktemp("cuts-project")
    (proj / "script.py").write_text(SCRIPT)
    (proj / "code.py").write_text(CODE)
    with cluster_up(proj, env, NAME, ["--name", NAME, "--nodes", "2"], up_timeout=600):
        yield proj


def on_a_terminal(args: list[str], cwd: Path, env: dict[str, str], answer: str) -> tuple[int, str]:
    """The CLI on a pseudo-terminal (stdin and stdout a tty, as in a person's shell), its
    prompt answered with ``answer``: its exit code and everything it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*skyinfra_argv(), *args], cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave
    )
    os.close(slave)
    output, answered = b"", False
    try:
        while True:
            # The deadline only guards against a hang: the loop ends when the CLI exits.
            ready, _, _ = select.select([master], [], [], 120)
            assert ready, f"no output for 120 s: {output!r}"
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not chunk:
                break
            output += chunk
            if not answered and b"[y/N]:" in output:
                os.write(master, answer.encode() + b"\n")
                answered = True
        return proc.wait(60), output.decode(errors="replace")
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()


def detach(project: Path, env: dict[str, str], *args: str) -> str:
    res = cli(["run", "--cluster", NAME, "--detach", *args], project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout.split("job ", 1)[1].split()[0]


def open_gate(project: Path, job: str) -> None:
    nodes = project / ".skyinfra" / "clusters" / NAME / "nodes"
    for i in (0, 1):
        (nodes / f"node-{i}" / "shared" / f"gate-{job}").write_text("")


def test_no_at_a_prompt_changes_nothing_and_is_not_an_error(
    project: Path, env: dict[str, str]
) -> None:
    code, said = on_a_terminal(["down", "--cluster", NAME], project, env, "n")
    assert code == 1, said
    assert "down cancelled: you answered no; nothing was changed" in said, said
    assert "error" not in said and "--yes" not in said, said
    assert (project / ".skyinfra" / "clusters" / NAME / "topology.json").is_file()
    # The same for `cancel`'s own prompt: the job goes on.
    job = detach(project, env, "code.py:gated")
    try:
        code, said = on_a_terminal(["cancel", "--cluster", NAME, job], project, env, "n")
        assert code == 1, said
        assert f"cancel cancelled: you answered no; job {job} goes on" in said, said
        assert "error" not in said, said
        assert job_record(NAME, project, env, job)["state"] == "running"
    finally:
        open_gate(project, job)
        cli(["cancel", "--cluster", NAME, "--yes", job], project, env)


def test_a_script_prints_no_return_value_and_a_function_does(
    project: Path, env: dict[str, str]
) -> None:
    script = cli(["run", "--cluster", NAME, "script.py"], project, env)
    assert script.returncode == 0, script.stdout + script.stderr
    assert "null" not in script.stdout and "worker 0" not in script.stdout, script.stdout
    function = cli(["run", "--cluster", NAME, "code.py:nothing"], project, env)
    assert function.returncode == 0, function.stdout + function.stderr
    assert "node-0 worker 0: null" in function.stdout, function.stdout


def test_logs_all_with_tail_prints_the_nodes_in_order(project: Path, env: dict[str, str]) -> None:
    job = detach(project, env, "script.py", "--", "5")
    wait_until_ended(NAME, project, env, job)
    expected = [f"[node-{node}] line {i} of node {node}" for node in (0, 1) for i in (3, 4)]
    for _ in range(3):  # the nodes' logs are read at once: their order is not luck
        shown = cli(["logs", "--cluster", NAME, job, "--all", "--tail", "2"], project, env)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert shown.stdout.splitlines() == expected, shown.stdout


def test_ctrl_c_on_logs_follow_says_the_job_goes_on(project: Path, env: dict[str, str]) -> None:
    job = detach(project, env, "code.py:gated")
    try:
        follow = subprocess.Popen(
            [*skyinfra_argv(), "logs", "--cluster", NAME, job, "--follow"],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        until_first_line(follow, "waiting")
        follow.send_signal(signal.SIGINT)
        out, err = follow.communicate(timeout=60)
        assert follow.returncode == 130, out + err
        assert f"Ctrl-C: stopped following job {job}" in err, err
        assert "the job goes on on the nodes" in err, err
        assert f"skyinfra logs --cluster {NAME} {job} --follow" in err, err
        assert f"skyinfra cancel --cluster {NAME} {job}" in err, err
        assert "interrupted" not in err, err
        assert job_record(NAME, project, env, job)["state"] == "running"
    finally:
        open_gate(project, job)
        cli(["cancel", "--cluster", NAME, "--yes", job], project, env)


def test_ctrl_c_on_an_attached_run_says_it_cancelled_the_job(
    project: Path, env: dict[str, str]
) -> None:
    run = subprocess.Popen(
        [*skyinfra_argv(), "run", "--cluster", NAME, "code.py:gated"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    until_first_line(run, "waiting")
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130, out + err
    said = re.search(r"Ctrl-C: job (\S+) cancelled on every node", out)
    assert said, out + err
    job = said[1]
    assert f"skyinfra jobs --cluster {NAME} {job}" in out, out
    assert f"skyinfra logs --cluster {NAME} {job} --all" in out, out
    assert "interrupted" not in err, err
    assert job_record(NAME, project, env, job)["state"] == "cancelled"


def test_jobs_after_down_lists_the_kept_runs(project: Path, env: dict[str, str]) -> None:
    """Last in the module: it takes the cluster down."""
    job = detach(project, env, "script.py")
    wait_until_ended(NAME, project, env, job)
    running = detach(project, env, "code.py:gated")
    before = json.loads(cli(["jobs", "--cluster", NAME, "--json"], project, env).stdout)
    down = cli(["down", "--yes", "--cluster", NAME], project, env)
    assert down.returncode == 0, down.stdout + down.stderr
    listed = cli(["jobs", "--cluster", NAME], project, env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert f"cluster {NAME!r} is down" in listed.stdout, listed.stdout
    assert re.search(rf"^{job}\s+script\.py\s+succeeded\s", listed.stdout, re.MULTILINE), (
        listed.stdout
    )
    # A detached job's copy was written as it started: `down` keeps the head's last word.
    assert re.search(
        rf"^{running}\s+code\.py:gated\s+ended by down \(was running\)\s", listed.stdout, re.M
    ), listed.stdout
    as_json = cli(["jobs", "--cluster", NAME, "--json"], project, env)
    assert as_json.returncode == 0, as_json.stderr
    kept = {j["id"]: j for j in json.loads(as_json.stdout)}
    assert job in kept and kept[job]["state"] == "succeeded", kept
    assert set(kept) <= {j["id"] for j in before}, (kept, before)
    assert all(j["cluster_down"] is True for j in kept.values())
    assert kept[running]["ended_by_down"] is True, kept[running]
