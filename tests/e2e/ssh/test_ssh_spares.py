"""A lost host replaced by a spare (issue 45), end to end through the CLI: four stand-in
hosts (tests/support/ssh_hosts.py: real sshds in network namespaces), two enrolled as nodes and
two listed in ssh.spare_hosts after an address where no host is (a spare switched off), the
first of them with a Python older than 3.10 (it answers, and fails the enrolment check); real
Terraform enrols them.

A detached job (a plain Python entry on the runtime's checkpoint API: node 0 commits a step
each round) pauses in attempt 1 after step 3; host 1 then vanishes: its link is cut, and
nothing of it closes a connection (its processes run on, unreachable). The head hears nothing
from node 1's agent for the bound on silence (skyinfra_runtime.jobs.wire, shortened for the
test through the hosts' environment), counts node 1 lost and the job waits (needs_nodes);
host 1's agent, hearing nothing from the head as long, ends its part by itself. `status` names
the host as lost and the spares that would stand in; `plan` refuses, naming `up` (its replace
would destroy node 1 on the lost host) and the spare that answers, and changes nothing. With
the live spare refusing the key as well, `up` names the three spares and why, and enrols
nothing; once it accepts the key again, `jobs recover` passes over the switched-off spare and
the one without Python 3.10+ (each named with why) and enrols the live one as node 1 through
the same Terraform (its key pinned at first contact), copies node 0's checkpoint sets to it,
and the job's attempt 2 resumes on both nodes from step 3 and ends with what an
uninterrupted run computes. `checkpoints` names host 1 as lost while it is away, and lists and
deletes its copy of the set once it answers. `down` with host 1 still off the network names it
with what is left to clean there; once it answers again, `down` removes that too: nothing is
left on any of the three hosts. No timed assertions: every wait ends on a condition.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from skyinfra_runtime.jobs.wire import SILENT_PEER_ENV

from tests.conftest import skyinfra_argv
from tests.support.local_jobs import module_env
from tests.support.ssh_hosts import Hosts, package_sources, stand_in_hosts
from tests.support.waits import wait_until

pytestmark = pytest.mark.slow

NAME = "spares"
SET = "ck"
STEPS = 5
PAUSE_AT = 3
# The runtime's bound on a silent connection on these hosts (45 s by default): the test waits
# on the job's state, never on this time.
SILENT_S = 8
SILENCE = {SILENT_PEER_ENV: str(SILENT_S)}
JOB = f'''import json, os, time
from pathlib import Path

from skyinfra_runtime import checkpoints


def step(total, i):
    return (total * 31 + i + 1) % (2 ** 61)


def main():
    """Node 0 commits every step; each node resumes from the newest committed step in its
    own checkpoint folder (a spare's is node 0's copy)."""
    root = checkpoints.directory()
    node, attempt = int(os.environ["SKYINFRA_NODE"]), int(os.environ["SKYINFRA_ATTEMPT"])
    last = checkpoints.latest_step(root)
    total = 0 if last is None else json.loads(
        (checkpoints.step_dir(root, last) / "state.json").read_text())["total"]
    for i in range(last or 0, {STEPS}):
        total = step(total, i)
        if node == 0:
            done = checkpoints.step_dir(root, i + 1)
            done.mkdir(parents=True, exist_ok=True)
            (done / "state.json").write_text(json.dumps({{"total": total}}))
            checkpoints.commit(done)
        if attempt == 1 and i + 1 == {PAUSE_AT}:
            (root / f"paused-{{node}}").write_text("")
            time.sleep(600)  # until the test takes host 1 away and the head ends this part
    return {{"total": total, "resumed_from": last, "home": os.environ["HOME"]}}
'''


def uninterrupted() -> int:
    total = 0
    for i in range(STEPS):
        total = (total * 31 + i + 1) % (2**61)
    return total


def cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*skyinfra_argv(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def node_dir(hosts: Hosts, host: int, node: int) -> Path:
    return hosts.hosts[host].home / ".skyinfra" / NAME / f"node-{node}"


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    with package_sources() as sources, stand_in_hosts(4, {**sources, **SILENCE}) as made:
        made.old_python(made.hosts[3])
        yield made


@pytest.fixture(scope="module")
def project(
    tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path, hosts: Hosts
) -> Iterator[tuple[Path, dict[str, str]]]:
    env = module_env(tmp_path_factory, tf_plugin_cache, "ssh-spares")
    env["HOME"] = str(tmp_path_factory.mktemp("operator-home"))  # no known_hosts of ours
    root = tmp_path_factory.mktemp("spares-project")
    (root / "job.py").write_text(JOB)
    a = hosts.addresses
    (root / "skyinfra.toml").write_text(
        f'name = "{NAME}"\nprovider = "ssh"\nnodes = 2\n\n[ssh]\n'
        f'hosts = ["{a[0]}", "{a[1]}"]\n'
        f'spare_hosts = ["{hosts.no_host_address}", "{a[3]}", "{a[2]}"]\n'
        f'user = "{hosts.user}"\nkey = "{hosts.key}"\n'
    )
    yield root, env
    if (root / ".skyinfra" / "clusters" / NAME / "topology.json").is_file():  # a test failed
        hosts.cut_link(hosts.hosts[1], up=True)
        hosts.refuse_key(hosts.hosts[2], refuse=False)
        cli(["down", "--yes", "--cluster", NAME], root, env)
        cli(["down", "--yes", "--cluster", NAME], root, env)


def test_a_lost_host_is_replaced_by_the_spare_and_the_job_resumes_there(
    project: tuple[Path, dict[str, str]], hosts: Hosts
) -> None:
    root, env = project
    lost, spare, off = hosts.hosts[1], hosts.hosts[2], hosts.no_host_address
    old = hosts.hosts[3]  # answers, with Python 3.8: passed over, never a stop
    spares = f"{off}, {old.address}, {spare.address}"
    up = cli(["up", "--yes"], root, env)
    assert up.returncode == 0, up.stdout + up.stderr
    assert f"spare hosts (enrolled only when a host is lost): {spares}" in up.stdout
    assert hosts.home_listing(spare) == []  # listed, not enrolled
    ws = root / ".skyinfra" / "clusters" / NAME
    main = (ws / "main.tf").read_text()
    assert f"not enrolled until a host is lost (then the next takes its node): {spares}" in main

    started = cli(
        ["run", "--cluster", NAME, "--detach", "--max-restarts", "1", "--checkpoints", SET,
         "job.py:main"], root, env,
    )  # fmt: skip
    assert started.returncode == 0, started.stdout + started.stderr
    job = started.stdout.split("job ", 1)[1].split()[0]
    head_set = node_dir(hosts, 0, 0) / "checkpoints" / SET
    wait_until(
        "both nodes paused after step 3",
        lambda: (
            (head_set / f"step-{PAUSE_AT:08d}" / "COMMITTED").is_file()
            and (node_dir(hosts, 1, 1) / "checkpoints" / SET / "paused-1").is_file()
        ),
        deadline_s=240,
    )

    # Host 1 vanishes: off the network, with every process of it still running.
    hosts.cut_link(lost)

    def waits() -> bool:
        shown = cli(["jobs", "--cluster", NAME, job, "--json"], root, env)
        return shown.returncode == 0 and json.loads(shown.stdout)["state"] == "needs_nodes"

    wait_until("the job to wait for node 1", waits, deadline_s=240)
    record = json.loads(cli(["jobs", "--cluster", NAME, job, "--json"], root, env).stdout)
    assert record["needs_nodes"] == [1], record
    said_of_1 = record["nodes"][1]["ended_reason"]
    assert f"no word from its agent for {SILENT_S:g} s" in said_of_1, record["nodes"]
    status = cli(["status", "--cluster", NAME], root, env)
    assert status.returncode != 0, status.stdout
    assert f"host {lost.address} lost: it stopped answering over SSH" in status.stdout
    assert f"enrols the first of spares {spares} that answers in its place" in status.stdout

    # `plan` would replace node 1 through a destroy that needs the lost host: refused, naming
    # `up`, with the state, the hosts and the pinned keys as they were.
    kept = {f: (ws / f).read_bytes() for f in ("terraform.tfstate", "hosts.json", "known_hosts")}
    planned = cli(["plan"], root, env)
    assert planned.returncode == 1, planned.stdout + planned.stderr
    assert f"error: host {lost.address} (node-1) lost" in planned.stderr
    assert f"spare {spare.address} would stand in as node-1" in planned.stderr
    assert f"spare {off} (ssh.spare_hosts[0]) does not answer (" in planned.stdout
    assert f"spare {old.address} (ssh.spare_hosts[1]) cannot be enrolled (" in planned.stdout
    assert "only `skyinfra up` does" in planned.stderr
    assert {f: (ws / f).read_bytes() for f in kept} == kept
    assert not (ws / "plan" / "skyinfra.tfplan").exists()

    # No spare fit (one switched off, one with Python 3.8, the other refusing the key): `up`
    # names each and why, and enrols nothing anywhere.
    hosts.refuse_key(spare)
    refused = cli(["up", "--yes"], root, env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"error: host {lost.address} (node-1) lost: it stopped answering (" in refused.stderr
    assert f"spare {off} did not answer: " in refused.stderr
    assert (
        f"spare {old.address} cannot be enrolled: ssh.python 'python3' is Python 3.8 there, "
        "not Python 3.10 or newer"
    ) in refused.stderr
    assert (
        f"spare {spare.address} did not answer: it refused key {hosts.key} for user {hosts.user}"
    ) in refused.stderr
    assert "nothing was enrolled" in refused.stderr
    assert {f: (ws / f).read_bytes() for f in kept} == kept
    assert hosts.home_listing(spare) == hosts.home_listing(old) == []
    hosts.refuse_key(spare, refuse=False)

    recovered = cli(["jobs", "--cluster", NAME, "recover", job], root, env)
    said = recovered.stdout + recovered.stderr
    assert recovered.returncode == 0, said
    assert f"host {lost.address} (node-1) lost" in said
    assert f"spare {off} (ssh.spare_hosts[0]) does not answer (" in said
    assert f"spare {old.address} (ssh.spare_hosts[1]) cannot be enrolled (" in said
    assert "passed over; the next spare is tried for node-1" in said
    assert f"spare {spare.address} is enrolled as node-1 in its place" in said
    assert "trusted on first use" in said and spare.address in said
    assert f"node-1 ({spare.address}): checkpoint sets copied from node-0's" in said
    record = json.loads(cli(["jobs", "--cluster", NAME, job, "--json"], root, env).stdout)
    assert record["state"] == "succeeded" and record["attempt"] == 2, record
    assert record["attempts"][0]["cause"]["kind"] == "lost", record["attempts"]
    summary = json.loads((ws / "runs" / job / "summary.json").read_text())
    values = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]
    # Both resumed from step 3 (node 1 on the spare, from node 0's copied checkpoints) and
    # end with the uninterrupted run's total.
    assert [v["resumed_from"] for v in values] == [PAUSE_AT, PAUSE_AT], values
    assert [v["total"] for v in values] == [uninterrupted()] * 2
    assert [v["home"] for v in values] == [str(hosts.hosts[0].home), str(spare.home)]
    topology = json.loads((ws / "topology.json").read_text())
    assert [n["public_ip"] for n in topology["nodes"]] == [hosts.addresses[0], spare.address]
    pinned = (ws / "known_hosts").read_text()
    assert Path(f"{spare.host_key}.pub").read_text().split()[1] in pinned
    status = cli(["status", "--cluster", NAME, "--json"], root, env)
    shown = json.loads(status.stdout)
    assert status.returncode == 0 and shown["spare_hosts"] == [off, old.address], status.stdout
    assert [x["host"] for x in shown["lost_hosts"]] == [lost.address]

    # `checkpoints` asks the lost host too (its node's folder stays there until `down`):
    # away, it is named as lost and not listed; back, its copy is listed and deleted with
    # the others.
    lost_label = f"lost host {lost.address} (node-1 until spare {spare.address} replaced it)"
    table = cli(["checkpoints", "--cluster", NAME], root, env)
    assert table.returncode == 0, table.stdout + table.stderr
    assert f"({lost_label}: its sets not listed: not reachable (" in table.stdout
    hosts.cut_link(lost, up=True)
    listed = cli(["checkpoints", "--cluster", NAME, "--json"], root, env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    (ck,) = json.loads(listed.stdout)
    lost_set = node_dir(hosts, 1, 1) / "checkpoints" / SET
    assert f"{lost_label}: {lost.address}:{lost_set}" in ck["places"], ck
    assert ck["nodes"] == [0, 1], ck  # node 1 is the spare's folder; the lost host is no node
    gone = cli(["checkpoints", "--cluster", NAME, "delete", SET, "--yes"], root, env)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert lost_label in gone.stdout
    assert not lost_set.exists() and not head_set.exists()
    hosts.cut_link(lost)

    # `down` with host 1 still away: the nodes go, host 1 is named with what is left there.
    down = cli(["down", "--yes", "--cluster", NAME], root, env)
    said = down.stdout + down.stderr
    assert down.returncode == 0, said
    assert f"host {lost.address} (lost; node-1 until spare {spare.address} replaced it)" in said
    assert f"left to clean there: the node folder {node_dir(hosts, 1, 1)}" in said
    assert hosts.home_listing(hosts.hosts[0]) == hosts.home_listing(spare) == []
    # Back on the network: the next `down` removes what was left there.
    hosts.cut_link(lost, up=True)
    again = cli(["down", "--yes", "--cluster", NAME], root, env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"host {lost.address} (lost node-1): nothing left" in again.stdout
    for host in hosts.hosts:
        assert hosts.home_listing(host) == []
    assert hosts.user_processes() == []
