"""The head's queue, end to end on one 2-node local cluster (issue 47, its first part): while
a job holds the nodes, `run --detach` and an attached `run` queue their jobs on the head
(state queued, their position and what they wait for) and the head starts them itself, first
in, first out, once the nodes free; the head's job records prove the order (each job started
after the one before it ended). A queued job cancelled never starts; the queue outlives the
operator (an attached `run` SIGKILLed while its job waits: the job still starts and ends;
Ctrl-C leaves it queued); two attached runs started at once and the Python API's submit
queue together behind the holder (they share the workspace) while `up` and `down` are
refused naming a holder; cancelling a job that is neither queued nor running exits 2
naming it. Every job gets ports of its own from the head, and `run --nodes 1` jobs run side
by side on the two nodes, each listening on its own ports (a third waits for a free node);
`--nodes 1,` names the node a job runs on, each job runs the project as it was when it
was submitted (a file edited in between), and `--nodes 1,0` recovered goes on on nodes 1
and 0 in that rank order; `--nodes` out of range, an empty list, a node the
cluster lacks or one named twice is refused. The issue's named proofs: 50 one-node
submissions start in submission order; a sweep of 4 one-node jobs on a 4-node cluster (a
second, small cluster of this module) runs all at once; `jobs recover --all` after the head's
processes were killed restores the queue in its order. Trivial entries, no framework; the
holding job waits on a gate file the test opens: nothing here is timed."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import skyinfra_argv
from tests.support.local_jobs import (
    cli,
    cluster_up,
    job_record,
    module_env,
    node_processes,
    wait_for_state,
)
from tests.support.ports import free_port_pair
from tests.support.resume_proof import kill_node_processes, lose_node_1

pytestmark = pytest.mark.slow

NAME = "queue"
SUBMISSIONS = 3  # whole-cluster jobs through the CLI (the 50 of the issue: SWEEP)
SWEEP = 50  # the one-node submissions
FINAL = ("succeeded", "failed", "cancelled", "timed_out", "lost", "needs_nodes")

ENTRY = """\
import os, pathlib, time


def hold():
    gate = pathlib.Path(os.environ["GATE"])
    while not gate.exists():
        time.sleep(0.1)
    return 1


def listen():
    # The job's own coordinator and rendezvous ports, held on every address until the gate
    # opens (no SO_REUSEPORT, which JAX's gRPC coordinator sets, so that a second live job
    # given the same ports could not listen: the jobs would meet).
    import socket

    from skyinfra_runtime import instance_info, shard

    me = instance_info()
    held = []
    for port in (me.head_port, me.head_port + 1):
        sock = socket.socket()
        sock.bind(("", port))
        sock.listen()
        held.append(sock)
    hold()
    # shard() splits by the job's world too: a one-node job's worker owns every element.
    return [me.node, me.total_nodes, me.head_port, list(shard(list(range(4))))]


def quick():
    from skyinfra_runtime import instance_info

    # The job's own coordinator port, as its workers see it (the head gave it).
    return [int(os.environ["SKYINFRA_NODE"]), instance_info().head_port]

def version():
    # The project's version.txt as this job's copy of the project holds it.
    return pathlib.Path("version.txt").read_text()


def train():
    steps, pause_at = int(os.environ["STEPS"]), int(os.environ["PAUSE_AT"])
    # Step k adds k; every step is a committed checkpoint in the job's set (each node its own
    # folder: the local target's set is one folder for every node). The first attempt waits
    # after pause_at until SIGTERM (a preemption) comes; the next resumes from the checkpoint.
    import json, signal

    from skyinfra_runtime import checkpoints, seconds_left

    asked = []
    signal.signal(signal.SIGTERM, lambda *_: asked.append(seconds_left()))
    root = checkpoints.directory() / f"node-{os.environ['SKYINFRA_NODE']}"
    last = checkpoints.latest_step(root)
    step = last or 0
    total = 0 if last is None else json.loads((checkpoints.step_dir(root, last) / "t").read_text())
    print(f"attempt {os.environ['SKYINFRA_ATTEMPT']} starts at step {step}", flush=True)
    while step < steps:
        step += 1
        total += step
        path = checkpoints.step_dir(root, step)
        path.mkdir(parents=True, exist_ok=True)
        (path / "t").write_text(json.dumps(total))
        checkpoints.commit(path)
        while step == pause_at and last is None and not asked:
            time.sleep(0.05)
        if asked:
            print(f"SIGTERM after step {step}, {asked[0]:.0f} s left", flush=True)
            raise SystemExit(0)
    return [total, last]
"""


def _api_script(
    project: Path, env: dict[str, str], script: str, *args: str, timeout: int
) -> subprocess.CompletedProcess[str]:
    """A Python API script of the project's, run as the user runs it; it must succeed."""
    done = subprocess.run(
        [sys.executable, script, *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _hold_every_node(project: Path, env: dict[str, str], gate: Path) -> tuple[list[str], str]:
    """A detached job holding every node until ``gate`` exists (one restart allowed): the
    `run` flags to queue more behind it, and its id."""
    argv = ["run", "--cluster", NAME, "-d", "--max-restarts", "1", "--keep-runs", "0"]
    res = cli([*argv, "--env", f"GATE={gate}", "work.py:hold"], project, env)
    assert "started on every node" in res.stdout, res.stdout + res.stderr
    holder = res.stdout.split("job ", 1)[1].split()[0]
    assert wait_for_state(NAME, project, env, holder, ("running", *FINAL)) == "running"
    return argv, holder


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> dict[str, str]:
    found = module_env(tmp_path_factory, tf_plugin_cache, "queue")
    found["PYTHONUNBUFFERED"] = "1"  # an attached run's lines reach the test as printed
    return found


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Path]:
    proj = tmp_path_factory.mktemp("queue-project")
    (proj / "skyinfra.toml").write_text(
        f'name = "{NAME}"\nnodes = 2\nhead_port = {free_port_pair()}\n'
    )
    (proj / "work.py").write_text(ENTRY)
    with cluster_up(proj, env, NAME):
        yield proj


def head_port(project: Path) -> int:
    port = tomllib.loads((project / "skyinfra.toml").read_text())["head_port"]
    assert isinstance(port, int)
    return port


def nodes_dir(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME / "nodes"


def hold(project: Path, env: dict[str, str], gate: Path) -> str:
    """A detached job that holds the nodes until ``gate`` exists; its id, once it runs."""
    started = cli(
        ["run", "--cluster", NAME, "-d", "--env", f"GATE={gate}", "work.py:hold"], project, env
    )
    assert started.returncode == 0, started.stdout + started.stderr
    assert "started on every node" in started.stdout, started.stdout
    job = started.stdout.split("job ", 1)[1].split()[0]
    assert wait_for_state(NAME, project, env, job, ("running", *FINAL)) == "running"
    return job


def submit(project: Path, env: dict[str, str], position: int, holder: str) -> str:
    """`run --detach` of a quick job on the busy cluster: queued at ``position``; its id."""
    # --keep-runs 0: each job's result stays on the nodes for the test to read.
    res = cli(["run", "--cluster", NAME, "-d", "--keep-runs", "0", "work.py:quick"], project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    job = res.stdout.split("job ", 1)[1].split()[0]
    said = (
        f"job {job} is queued (position {position}): it waits for 2 nodes, 0 free; "
        "nodes 0-1 held by job"
    )
    assert said in res.stdout and holder in res.stdout, res.stdout
    assert f"skyinfra cancel --cluster {NAME} {job}" in res.stdout, res.stdout
    assert "started on every node" not in res.stdout
    return job


def attached(project: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str, list[str]]:
    """An attached `run` of a quick job on the busy cluster, read until it says the job is
    queued and that it waits: the process, the job's id and the lines so far."""
    return waiting_in_queue(start_attached(project, env))


def start_attached(project: Path, env: dict[str, str], *options: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*skyinfra_argv(), "run", "--cluster", NAME, *options, "work.py:quick"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def waiting_in_queue(
    proc: subprocess.Popen[str],
) -> tuple[subprocess.Popen[str], str, list[str]]:
    """``proc`` (an attached run) read until it says its job is queued and that it waits."""
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:  # bounded by the process: it prints these, or ends
        lines.append(line)
        if "Ctrl-C stops waiting and " in line:
            break
    said = "".join(lines)
    assert " is queued (position " in said, said
    job = said.split(" is queued (position ", 1)[0].rsplit("job ", 1)[1]
    return proc, job, lines


def test_detached_submissions_on_a_busy_cluster_finish_in_submission_order(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    holder = hold(project, env, gate)
    try:
        queued = [submit(project, env, i + 1, holder) for i in range(SUBMISSIONS)]
        table = cli(["jobs", "--cluster", NAME], project, env)
        assert table.returncode == 0, table.stdout + table.stderr
        first = (
            f"job {queued[0]} is queued (position 1): it waits for 2 nodes, 0 free; "
            "nodes 0-1 held by job "
        )
        assert f"{first}{holder}" in table.stdout, table.stdout
        assert f"queued (#{SUBMISSIONS})" in table.stdout, table.stdout
        # `status` lists the queued jobs beside the running one (`down` names them too).
        status = cli(["status", "--cluster", NAME], project, env)
        assert status.returncode == 0, status.stdout + status.stderr
        assert f"running jobs: {SUBMISSIONS + 1}" in status.stdout, status.stdout
        assert f"{queued[-1]} (work.py:quick; queued (position {SUBMISSIONS}) by " in status.stdout
        last = job_record(NAME, project, env, queued[-1])
        assert last["state"] == "queued" and last["queue"]["held_by"] == holder, last
        assert f"{SUBMISSIONS - 1} job(s) queued ahead of it" in last["queue"]["waits_for"]
        assert job_record(NAME, project, env, holder)["state"] == "running"
    finally:
        gate.write_text("")
    assert wait_for_state(NAME, project, env, holder, FINAL) == "succeeded"
    for job in queued:
        assert wait_for_state(NAME, project, env, job, FINAL) == "succeeded", job_record(
            NAME, project, env, job
        )
    records = [job_record(NAME, project, env, j) for j in [holder, *queued]]
    for before, after in itertools.pairwise(records):
        # The head started each job once the one submitted before it had ended.
        assert before["ended_at"] <= after["started_at"], (before, after)
        assert after["queue"]["left_at"] >= before["ended_at"], after
    seqs = [r["queue"]["seq"] for r in records[1:]]
    assert seqs == sorted(seqs), seqs
    # Each job got its ports from the head when it started (the first pair: one job at a
    # time), and its workers on both nodes used them.
    port = head_port(project)
    for r in records:
        assert r["ports"] == {"jax": port, "torch": port + 1}, r
    for r in records[1:]:
        values = [n["result"]["workers"][0]["value"] for n in r["nodes"]]
        assert values == [[0, port], [1, port]], r


API_SUBMIT = f"""\
import skyinfra
from work import quick

job = skyinfra.Cluster(name="{NAME}").submit(quick)
print("SUBMITTED", job.id, job.state)
"""


API_SWEEP = f"""\
import sys
import skyinfra
from work import quick

cluster = skyinfra.Cluster(name="{NAME}")
for _ in range(int(sys.argv[1])):
    print("SUBMITTED", cluster.submit(quick, nodes=1).id, flush=True)
"""


def test_fifty_one_node_submissions_start_in_submission_order(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """The issue's 50 one-node submissions on the 2-node cluster (from one Python API process:
    one interpreter start, not 50): node 0 held by a one-node job while they are submitted, so
    they queue and go through node 1 one at a time, then through both nodes once it ends. The
    head's records prove the order: each left the queue no earlier than every job submitted
    before it, never more than two ran at once, and none shared a port with a job running
    beside it."""
    gate = tmp_path / "gate"
    argv = ["run", "--cluster", NAME, "-d", "--nodes", "1", "--env", f"GATE={gate}"]
    held = cli([*argv, "work.py:hold"], project, env)
    assert " started on node 0\n" in held.stdout, held.stdout + held.stderr
    holder = held.stdout.split("job ", 1)[1].split()[0]
    (project / "api_sweep.py").write_text(API_SWEEP)
    try:
        submitted = _api_script(project, env, "api_sweep.py", str(SWEEP), timeout=600)
    finally:
        gate.write_text("")
    jobs = [line.split()[1] for line in submitted.stdout.splitlines() if line[:9] == "SUBMITTED"]
    assert len(jobs) == SWEEP, submitted.stdout
    said = submitted.stdout + submitted.stderr
    assert " is queued (position " in said, said  # behind the holder
    # One `jobs --json` a look (not one call a job: 50 CLI starts), until every one ended.
    until = time.monotonic() + 300  # a bound on the wait, not an assertion on time
    while True:
        shown = cli(["jobs", "--cluster", NAME, "--json"], project, env)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        by_id = {r["id"]: r for r in json.loads(shown.stdout)}
        if all(by_id[j]["state"] in FINAL for j in [holder, *jobs]):
            break
        assert time.monotonic() < until, [by_id[j]["state"] for j in jobs]
        time.sleep(0.5)
    records = [by_id[j] for j in jobs]
    assert all(r["state"] == "succeeded" for r in records), records
    assert [r["seq"] for r in records] == sorted(r["seq"] for r in records), records
    left = [(r.get("queue") or {}).get("left_at") or r["started_at"] for r in records]
    assert left == sorted(left), left  # the head started them in their submission order
    ran = [by_id[holder], *records]
    # Never more than two at once (each start counted against the ends before it)...
    events = sorted([(r["started_at"], 1) for r in ran] + [(r["ended_at"], -1) for r in ran])
    assert max(itertools.accumulate(step for _, step in events)) <= 2, events
    # ...and two at once never on one node or one port.
    for r, o in itertools.combinations(ran, 2):
        if o["started_at"] < r["ended_at"] and r["started_at"] < o["ended_at"]:
            assert o["world"] != r["world"], (r, o)
            assert not set(o["ports"].values()) & set(r["ports"].values()), (r, o)
    assert {len(r["world"]) for r in records} == {1}, records


def test_two_attached_runs_and_an_api_submit_queue_while_up_and_down_are_refused(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """Attached runs hold the workspace shared (they were refused while another held it): two
    started at once both queue behind the holding job and follow their jobs, the Python API's
    submit queues a third meanwhile, `up` and `down` are refused naming a holder, and the head
    starts the three in the order it queued them."""
    gate = tmp_path / "gate"
    holder = hold(project, env, gate)
    procs = [start_attached(project, env), start_attached(project, env)]
    try:
        followers = [waiting_in_queue(p) for p in procs]
        for command in (["up"], ["down", "--cluster", NAME, "--yes"]):
            refused = cli(command, project, env)
            assert refused.returncode == 1, refused.stdout + refused.stderr
            said = f"cluster '{NAME}' is busy: `skyinfra run work.py:quick` (pid "
            assert said in refused.stderr, refused.stderr
        (project / "api_submit.py").write_text(API_SUBMIT)
        submitted = _api_script(project, env, "api_submit.py", timeout=300)
        api_job, api_state = submitted.stdout.split("SUBMITTED ", 1)[1].split()
        assert api_state == "queued", submitted.stdout
        assert job_record(NAME, project, env, holder)["state"] == "running"
    finally:
        gate.write_text("")
        rest = [p.communicate(timeout=300)[0] for p in procs]  # the module's `down` needs them gone
    jobs = []
    for (proc, job, lines), more in zip(followers, rest, strict=True):
        said = "".join(lines) + more
        assert proc.returncode == 0, said
        assert "Traceback" not in said, said
        jobs.append(job)
    assert wait_for_state(NAME, project, env, api_job, FINAL) == "succeeded"
    records = [job_record(NAME, project, env, j) for j in [*jobs, api_job]]
    assert all(r["state"] == "succeeded" for r in records), records
    records.sort(key=lambda r: r["queue"]["seq"])
    assert records[-1]["id"] == api_job, records  # submitted after both were queued
    for before, after in itertools.pairwise(records):
        # Each job on both nodes: the next started once the one queued before it had ended.
        assert before["ended_at"] <= after["started_at"], (before, after)


def test_a_queued_job_cancelled_never_starts(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    holder = hold(project, env, gate)
    try:
        dropped = submit(project, env, 1, holder)
        kept = submit(project, env, 2, holder)
        cancel = cli(["cancel", "--cluster", NAME, "--yes", dropped], project, env)
        assert cancel.returncode == 0, cancel.stdout + cancel.stderr
        said = f"job {dropped}: cancelled (taken out of the queue: it never started)"
        assert said in cancel.stdout, cancel.stdout
        assert node_processes(nodes_dir(project), dropped) == []
        moved = job_record(NAME, project, env, kept)
        until = time.monotonic() + 60
        while moved["queue"]["position"] != 1 and time.monotonic() < until:
            time.sleep(0.3)
            moved = job_record(NAME, project, env, kept)
        assert moved["state"] == "queued" and moved["queue"]["position"] == 1, moved
    finally:
        gate.write_text("")
    assert wait_for_state(NAME, project, env, kept, FINAL) == "succeeded"
    never = job_record(NAME, project, env, dropped)
    assert never["state"] == "cancelled" and never["started_at"] is None, never
    assert never["attempts"] == [] and never["queue"]["left_at"] is None, never
    for i in (0, 1):
        assert not (nodes_dir(project) / f"node-{i}" / "runs" / dropped / "output.log").exists()
    # Bad input: a job that is neither queued nor running (it ended) is not cancelled.
    for job, state in ((dropped, "cancelled"), (holder, "succeeded")):
        again = cli(["cancel", "--cluster", NAME, "--yes", job], project, env)
        assert again.returncode == 2, again.stdout + again.stderr
        assert f"job {job} is not queued or running: it ended ({state})" in again.stderr
        assert "Traceback" not in again.stderr
    assert job_record(NAME, project, env, holder)["state"] == "succeeded"


def test_the_queue_outlives_the_operator(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """Ctrl-C on an attached `run` whose job waits leaves it queued (the default, said with
    the command that removes it); a SIGKILLed attached `run` leaves its job queued too; the
    head starts both in their turn and they end as they would have."""
    gate = tmp_path / "gate"
    holder = hold(project, env, gate)
    try:
        first, interrupted, _ = attached(project, env)
        first.send_signal(signal.SIGINT)
        rest = first.communicate(timeout=120)[0]
        assert first.returncode == 130, rest
        assert f"job {interrupted} stays queued" in rest, rest
        assert f"skyinfra cancel --cluster {NAME} {interrupted}" in rest, rest
        second, killed, lines = attached(project, env)
        assert "(position 2)" in "".join(lines), lines
        second.kill()
        second.wait(60)
        for job in (interrupted, killed):
            assert job_record(NAME, project, env, job)["state"] == "queued"
        assert job_record(NAME, project, env, holder)["state"] == "running"
    finally:
        gate.write_text("")
    assert wait_for_state(NAME, project, env, holder, FINAL) == "succeeded"
    for job in (interrupted, killed):
        assert wait_for_state(NAME, project, env, job, FINAL) == "succeeded", job_record(
            NAME, project, env, job
        )
    one, two = job_record(NAME, project, env, interrupted), job_record(NAME, project, env, killed)
    assert one["ended_at"] <= two["started_at"], (one, two)


def test_an_attached_run_whose_queued_job_is_cancelled_says_it_never_started(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    holder = hold(project, env, gate)
    try:
        follower, job, lines = attached(project, env)
        cancel = cli(["cancel", "--cluster", NAME, "--yes", job], project, env)
        assert cancel.returncode == 0, cancel.stdout + cancel.stderr
        rest = follower.communicate(timeout=120)[0]
        said = "".join(lines) + rest
        assert follower.returncode == 130, said
        assert f"job {job} was cancelled while queued: it never started" in said, said
        assert "Traceback" not in said and "lost" not in rest, said
        # The user's choice: Ctrl-C cancels a queued job (the default leaves it queued).
        choice = start_attached(project, env, "--ctrl-c-while-queued", "cancel")
        chose, dropped, lines = waiting_in_queue(choice)
        assert "Ctrl-C stops waiting and cancels it" in "".join(lines), lines
        chose.send_signal(signal.SIGINT)
        rest = chose.communicate(timeout=120)[0]
        assert chose.returncode == 130, rest
        assert f"job {dropped} cancelled while queued: it never started" in rest, rest
        assert job_record(NAME, project, env, holder)["state"] == "running"
    finally:
        gate.write_text("")
    assert wait_for_state(NAME, project, env, holder, FINAL) == "succeeded"
    never = job_record(NAME, project, env, dropped)
    assert never["state"] == "cancelled" and never["started_at"] is None, never


def test_two_one_node_jobs_run_at_once_each_on_ports_of_its_own(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """`run --nodes 1` twice on the 2-node cluster: both start at once, each on a node of its
    own (a world of one node) listening on ports of its own; a third waits for a free node
    (first in, first out) and starts when one frees."""
    gate = tmp_path / "gate"
    argv = ["run", "--cluster", NAME, "-d", "--nodes", "1", "--keep-runs", "0"]
    jobs = []
    try:
        for node in range(2):
            res = cli([*argv, "--env", f"GATE={gate}", "work.py:listen"], project, env)
            assert res.returncode == 0, res.stdout + res.stderr
            assert f" started on node {node}\n" in res.stdout, res.stdout  # the lowest free
            jobs.append(res.stdout.split("job ", 1)[1].split()[0])
        for job in jobs:
            assert wait_for_state(NAME, project, env, job, ("running", *FINAL)) == "running"
        third = cli([*argv, "work.py:quick"], project, env)
        assert third.returncode == 0, third.stdout + third.stderr
        waits = "it waits for 1 node, 0 free; node 0 held by job "
        assert waits in third.stdout, third.stdout
        later = third.stdout.split("job ", 1)[1].split()[0]
    finally:
        gate.write_text("")
    for job in [*jobs, later]:
        assert wait_for_state(NAME, project, env, job, FINAL) == "succeeded", job_record(
            NAME, project, env, job
        )
    one, two, three = (job_record(NAME, project, env, j) for j in [*jobs, later])
    assert sorted([one["world"], two["world"]]) == [[0], [1]], (one, two)
    # Both ran at once (each started before the other ended), and no port met twice.
    assert one["started_at"] < two["ended_at"] and two["started_at"] < one["ended_at"]
    ports = [p for r in (one, two) for p in r["ports"].values()]
    assert len(set(ports)) == 4, (one["ports"], two["ports"])
    for r in (one, two):
        [node] = r["nodes"]
        assert node["node"] == r["world"][0], r
        # Its world: one node (rank 0 of 1), listening on the job's own ports.
        assert node["result"]["workers"][0]["value"] == [0, 1, r["ports"]["jax"], [0, 1, 2, 3]], r
    assert len(three["world"]) == 1 and three["queue"]["left_at"] >= min(
        one["ended_at"], two["ended_at"]
    ), three
    assert three["nodes"][0]["result"]["workers"][0]["value"] == [0, three["ports"]["jax"]]


def test_each_job_runs_the_project_as_it_was_when_submitted(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """A file edited between two submissions on a busy cluster: the job queued before the
    edit runs the old content, the one after it the new, whenever they start. A one-node job
    the head starts at once on the idle cluster runs the newest, with agents on its node
    alone (none on the other: no log, no state there, though the copy is there for a
    recovery)."""
    version = project / "version.txt"
    gate = tmp_path / "gate"
    argv = ["run", "--cluster", NAME, "-d", "--keep-runs", "0"]
    holder = hold(project, env, gate)
    jobs = []
    try:
        for text in ("one", "two"):
            version.write_text(text)
            res = cli([*argv, "work.py:version"], project, env)
            assert " is queued (position " in res.stdout, res.stdout + res.stderr
            jobs.append(res.stdout.split("job ", 1)[1].split()[0])
    finally:
        gate.write_text("")
    for job, text in zip(jobs, ("one", "two"), strict=True):
        assert wait_for_state(NAME, project, env, job, FINAL) == "succeeded", job
        record = job_record(NAME, project, env, job)
        assert [n["result"]["workers"][0]["value"] for n in record["nodes"]] == [text] * 2
    assert wait_for_state(NAME, project, env, holder, FINAL) == "succeeded"
    version.write_text("three")
    res = cli([*argv, "--nodes", "1", "work.py:version"], project, env)
    assert " started on node 0\n" in res.stdout, res.stdout + res.stderr
    job = res.stdout.split("job ", 1)[1].split()[0]
    assert wait_for_state(NAME, project, env, job, FINAL) == "succeeded"
    [node] = job_record(NAME, project, env, job)["nodes"]
    assert node["result"]["workers"][0]["value"] == "three", node
    other = nodes_dir(project) / "node-1" / "runs" / job
    assert (other / "work" / "version.txt").read_text() == "three"
    assert not (other / "node.json").exists() and not (other / "output.log").exists()


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("0", "'--nodes': '0': a job needs at least 1 node"),
        ("3", "--nodes 3: cluster 'queue' has 2 node(s); expected 1 to 2"),
        ("0,5", "--nodes 0,5: 5 is not a node of cluster 'queue' (2 node(s))"),
        ("1,1", "--nodes 1,1: node 1 named twice"),
        (",", "'--nodes': ',': an empty list of nodes"),
    ],
)
def test_nodes_out_of_range_is_refused_and_nothing_is_queued(
    project: Path, env: dict[str, str], value: str, said: str
) -> None:
    def ids() -> list[str]:
        shown = cli(["jobs", "--cluster", NAME, "--json"], project, env)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        return [j["id"] for j in json.loads(shown.stdout)]

    before = ids()
    res = cli(["run", "--cluster", NAME, "-d", "--nodes", value, "work.py:quick"], project, env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert said in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert ids() == before  # nothing queued, nothing started


def test_an_attached_run_on_one_node_reports_that_node_alone(
    project: Path, env: dict[str, str]
) -> None:
    res = cli(["run", "--cluster", NAME, "--nodes", "1", "work.py:quick"], project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    # An idle cluster: the lowest node; the other was never in the job.
    assert "node-0: ok (exit 0)" in res.stdout and "node-1: " not in res.stdout, res.stdout
    assert f"node-0 worker 0: [0, {head_port(project)}]" in res.stdout, res.stdout


def test_a_job_on_a_named_node_runs_there_alone(project: Path, env: dict[str, str]) -> None:
    """`run --nodes 1,` (node 1 named, as the API's nodes=[1]): the idle cluster's lowest
    node is 0, so only the naming puts it on node 1, as rank 0 of a world of one."""
    res = cli(["run", "--cluster", NAME, "--nodes", "1,", "work.py:quick"], project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "node-1: ok (exit 0)" in res.stdout and "node-0: ok" not in res.stdout, res.stdout
    assert "node-1 worker 0: [0, " in res.stdout, res.stdout  # rank 0 of the job's world
    assert job_record(NAME, project, env, "last")["world"] == [1]


def recovered_after_the_head_is_killed(
    project: Path, env: dict[str, str], job: str, gate: Path
) -> dict:
    """Node 0's processes killed (the head: every job's supervisor), ``job`` seen lost, its
    workers' ``gate`` opened, `jobs recover` of it: its record once recovered."""
    kill_node_processes(nodes_dir(project).parent, 0)
    assert wait_for_state(NAME, project, env, job, FINAL) == "lost"
    gate.write_text("")
    recovered = cli(["jobs", "--cluster", NAME, "recover", job], project, env)
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    return job_record(NAME, project, env, job)


def test_a_one_node_job_recovered_after_its_head_was_killed_goes_on_on_one_node(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    argv = ["run", "--cluster", NAME, "-d", "--nodes", "1", "--max-restarts", "1"]
    res = cli([*argv, "--env", f"GATE={gate}", "work.py:listen"], project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    job = res.stdout.split("job ", 1)[1].split()[0]
    assert wait_for_state(NAME, project, env, job, ("running", *FINAL)) == "running"
    assert job_record(NAME, project, env, job)["world"] == [0]
    record = recovered_after_the_head_is_killed(project, env, job, gate)
    assert record["state"] == "succeeded" and record["attempt"] == 2, record
    assert len(record["world"]) == 1 and len(record["nodes"]) == 1, record


def test_a_one_node_job_lost_while_queued_is_recovered_on_one_node(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """A `run --nodes 1` job lost while it waited in the queue (it never started, so its record
    has no world yet) goes on on one node after `jobs recover`, not on every node."""
    gate = tmp_path / "gate"
    hold(project, env, gate)
    argv = ["run", "--cluster", NAME, "-d", "--nodes", "1", "--max-restarts", "1"]
    res = cli([*argv, "work.py:quick"], project, env)
    assert res.returncode == 0 and " is queued (position " in res.stdout, res.stdout + res.stderr
    job = res.stdout.split(" is queued (position ", 1)[0].rsplit("job ", 1)[1]
    assert job_record(NAME, project, env, job)["nodes_asked"] == 1
    record = recovered_after_the_head_is_killed(project, env, job, gate)
    assert record["state"] == "succeeded", record
    assert len(record["world"]) == 1 and len(record["nodes"]) == 1, record


def test_a_job_on_named_nodes_recovered_goes_on_on_them_in_its_rank_order(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """`run --nodes 1,0` (node 1 its rank 0) whose head's supervisor was killed: `jobs
    recover` starts it again on nodes 1 and 0 in that order, not on the cluster's nodes in
    theirs."""
    gate = tmp_path / "gate"
    argv = ["run", "--cluster", NAME, "-d", "--nodes", "1,0", "--max-restarts", "1"]
    res = cli([*argv, "--env", f"GATE={gate}", "work.py:hold"], project, env)
    assert res.returncode == 0, res.stdout + res.stderr
    job = res.stdout.split("job ", 1)[1].split()[0]
    assert wait_for_state(NAME, project, env, job, ("running", *FINAL)) == "running"
    assert job_record(NAME, project, env, job)["world"] == [1, 0]
    record = recovered_after_the_head_is_killed(project, env, job, gate)
    assert record["state"] == "succeeded" and record["attempt"] == 2, record
    assert record["world"] == [1, 0], record  # node 1 its rank 0 again
    assert record["named_nodes"] == [1, 0], record


def test_jobs_recover_all_after_a_lost_head_restores_the_queue(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """The head's processes killed while a job holds the nodes and two wait in its queue:
    all three are lost; `jobs recover --all` starts them again in the order the head had them
    (the holder first, then the queue, first in, first out; `jobs` lists them newest first),
    so the holder holds the nodes again, the two are queued behind it in their order, and
    they run in it once the holder ends."""
    gate = tmp_path / "gate"
    argv, holder = _hold_every_node(project, env, gate)
    queued = []
    for position in (1, 2):
        res = cli([*argv, "work.py:quick"], project, env)
        assert f" is queued (position {position})" in res.stdout, res.stdout + res.stderr
        queued.append(res.stdout.split(" is queued (position ", 1)[0].rsplit("job ", 1)[1])
    try:
        kill_node_processes(nodes_dir(project).parent, 0)
        for job in [holder, *queued]:
            assert wait_for_state(NAME, project, env, job, FINAL) == "lost"
        recovered = cli(["jobs", "--cluster", NAME, "recover", "--all"], project, env)
        said = recovered.stdout + recovered.stderr
        assert recovered.returncode == 0, said
        # (Jobs earlier tests left lost on this cluster are in the list, and stay lost.)
        listed = said.split("in the order the head had them: ", 1)[1].split("\n", 1)[0]
        ours = [j for j in listed.split(", ") if j in (holder, *queued)]
        assert ours == [holder, *queued], said
        assert f"job {holder} started as attempt 2" in said, said
        for position, job in enumerate(queued, 1):
            assert f"job {job} is queued (position {position})" in said, said
        assert job_record(NAME, project, env, holder)["state"] == "running"
    finally:
        gate.write_text("")
    records = []
    for job in [holder, *queued]:
        assert wait_for_state(NAME, project, env, job, FINAL) == "succeeded", job_record(
            NAME, project, env, job
        )
        records.append(job_record(NAME, project, env, job))
    for before, after in itertools.pairwise(records):
        # Each started again once the one the head had before it had ended.
        assert before["ended_at"] <= after["attempts"][-1]["started_at"], (before, after)


def test_the_queue_outlives_a_lost_worker_node_with_jobs_recover(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """Node 1 lost (a machine gone: its processes and folder) while a job holds the nodes and
    another waits in the head's queue: both now wait for node 1 (the queued job's agent there
    went with it), and `jobs recover --all` replaces node 1 and puts them back as they were,
    the holder running and the other queued behind it, which then runs on both nodes."""
    gate = tmp_path / "gate"
    argv, holder = _hold_every_node(project, env, gate)
    res = cli([*argv, "work.py:quick"], project, env)
    assert " is queued (position 1)" in res.stdout, res.stdout + res.stderr
    waiting = res.stdout.split(" is queued (position ", 1)[0].rsplit("job ", 1)[1]
    try:
        lose_node_1(nodes_dir(project).parent, holder)
        for job in (holder, waiting):
            assert wait_for_state(NAME, project, env, job, ("needs_nodes", *FINAL)) == (
                "needs_nodes"
            )
        recovered = cli(["jobs", "--cluster", NAME, "recover", "--all"], project, env, 600)
        said = recovered.stdout + recovered.stderr
        assert recovered.returncode == 0, said
        assert f"job {holder} started as attempt 2" in said, said
        assert f"job {waiting} is queued (position 1)" in said, said
    finally:
        gate.write_text("")
    for job in (holder, waiting):
        assert wait_for_state(NAME, project, env, job, FINAL) == "succeeded", job_record(
            NAME, project, env, job
        )
    record = job_record(NAME, project, env, waiting)
    assert [n["node"] for n in record["nodes"]] == [0, 1], record


def test_a_higher_priority_job_preempts_and_the_preempted_one_resumes(
    project: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """A low-priority whole-cluster job that checkpoints every step is preempted by a
    higher-priority one-node job (SIGTERM with the time left, through the Spot notice's path):
    it is `preempted`, waits in the queue, resumes from its checkpoints on both nodes once the
    node frees, and ends with the sum an uninterrupted run computes; a job of its own priority
    submitted meanwhile waits behind it (its place), and `jobs` shows priorities and the state.
    Bad input: a priority that is not an integer exits 2 naming it, nothing queued."""
    steps, pause_at = 6, 3
    before = cli(["jobs", "--cluster", NAME, "--json"], project, env).stdout
    bad = cli(["run", "--cluster", NAME, "-d", "--priority", "high", "work.py:quick"], project, env)
    assert bad.returncode == 2 and "'high' is not a valid integer" in bad.stderr, bad.stderr
    after = cli(["jobs", "--cluster", NAME, "--json"], project, env).stdout
    assert [j["id"] for j in json.loads(after)] == [j["id"] for j in json.loads(before)]
    argv = ["run", "--cluster", NAME, "-d", "--keep-runs", "0"]
    numbers = ["--env", f"STEPS={steps}", "--env", f"PAUSE_AT={pause_at}"]
    low = cli([*argv, *numbers, "work.py:train"], project, env)
    assert low.returncode == 0 and "started on every node" in low.stdout, low.stdout + low.stderr
    low_id = low.stdout.split("job ", 1)[1].split()[0]
    checkpoints = project / ".skyinfra" / "clusters" / NAME / "checkpoints" / low_id
    until = time.monotonic() + 120  # a bound on the wait, not an assertion on time
    while not all(
        (checkpoints / f"node-{i}" / f"step-{pause_at:08d}" / "COMMITTED").exists() for i in (0, 1)
    ):
        rec = job_record(NAME, project, env, low_id)
        if time.monotonic() > until or rec["state"] in FINAL:
            logs = cli(["logs", "--cluster", NAME, low_id], project, env).stdout
            raise AssertionError(f"{rec}\n{logs}")
        time.sleep(0.2)
    same = cli([*argv, "work.py:quick"], project, env)
    assert "is queued (position 1)" in same.stdout, same.stdout + same.stderr
    same_id = same.stdout.split("job ", 1)[1].split()[0]
    gate = tmp_path / "gate"  # the high job holds its node until the test opens it
    urgent = ["--nodes", "1", "--priority", "5", "--env", f"GATE={gate}", "work.py:hold"]
    try:
        high = cli([*argv, *urgent], project, env)
        assert "is queued (position 1)" in high.stdout, high.stdout + high.stderr  # before same
        high_id = high.stdout.split("job ", 1)[1].split()[0]
        assert wait_for_state(NAME, project, env, low_id, ("preempted", *FINAL)) == "preempted"
        table = cli(["jobs", "--cluster", NAME], project, env).stdout
        assert "PRIO" in table and f"job {low_id}: preempted by job {high_id}" in table, table
    finally:
        gate.write_text("")
    for job in (high_id, low_id, same_id):
        assert wait_for_state(NAME, project, env, job, FINAL) == "succeeded", job_record(
            NAME, project, env, job
        )
    lo, hi, sm = (job_record(NAME, project, env, j) for j in (low_id, high_id, same_id))
    first, second = lo["attempts"]
    assert (first["outcome"], first["preempted_by"]) == ("preempted", high_id), first
    # The order: low's first attempt ended, high ran, low resumed, then `same` (its turn).
    assert first["ended_at"] <= hi["started_at"] <= hi["ended_at"] <= second["started_at"]
    assert lo["ended_at"] <= sm["started_at"], (lo, sm)
    assert (hi["priority"], hi["world"], lo["preemptions"], lo["restarts_left"]) == (5, [0], 1, 0)
    # Resumed from step pause_at on both nodes; the sum of an uninterrupted run.
    values = [n["result"]["workers"][0]["value"] for n in lo["nodes"]]
    assert values == [[sum(range(1, steps + 1)), pause_at]] * 2, lo
    logs = cli(["logs", "--cluster", NAME, low_id], project, env).stdout
    assert "SIGTERM after step 3" in logs and f"preempted by job {high_id}" in logs, logs


def test_a_sweep_of_four_one_node_jobs_fills_a_four_node_cluster_at_once(
    tmp_path_factory: pytest.TempPathFactory, env: dict[str, str], tmp_path: Path
) -> None:
    """The issue's sweep: 4 `run --detach --nodes 1` jobs on a 4-node cluster all run at once,
    each on a node of its own (the lowest free), listening on ports of its own; they hold
    their ports until the test opens their gate, so all four are seen running together."""
    name = "sweep4"
    proj = tmp_path_factory.mktemp("sweep4-project")
    (proj / "skyinfra.toml").write_text(
        f'name = "{name}"\nnodes = 4\nhead_port = {free_port_pair(4)}\n'
    )
    (proj / "work.py").write_text(ENTRY)
    gate = tmp_path / "gate"
    argv = ["run", "--cluster", name, "-d", "--nodes", "1", "--env", f"GATE={gate}"]
    with cluster_up(proj, env, name):
        jobs = []
        try:
            for node in range(4):
                res = cli([*argv, "work.py:listen"], proj, env)
                assert f" started on node {node}\n" in res.stdout, res.stdout + res.stderr
                jobs.append(res.stdout.split("job ", 1)[1].split()[0])
            for job in jobs:
                assert wait_for_state(name, proj, env, job, ("running", *FINAL)) == "running"
        finally:
            gate.write_text("")
        records = []
        for job in jobs:
            assert wait_for_state(name, proj, env, job, FINAL) == "succeeded"
            records.append(job_record(name, proj, env, job))
    # All four ran at once: each started before any ended.
    assert max(r["started_at"] for r in records) < min(r["ended_at"] for r in records), records
    assert sorted(r["world"] for r in records) == [[0], [1], [2], [3]], records
    ports = [p for r in records for p in r["ports"].values()]
    assert len(set(ports)) == 8, ports
    for r in records:  # each a world of one node, listening on its own ports
        assert r["nodes"][0]["result"]["workers"][0]["value"] == [
            0,
            1,
            r["ports"]["jax"],
            [0, 1, 2, 3],
        ], r
