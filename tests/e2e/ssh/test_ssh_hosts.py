"""The ssh target end to end (issue 45), through the CLI as a user runs it: two stand-in hosts,
each a real sshd in a network namespace of its own with its own address and home, an
unprivileged login (tests/support/ssh_hosts.py); real Terraform with no provider enrols them.

`up` -> `verify` -> `run` (attached; the seeds' Keras example; an unmodified torchrun DDP
script across both hosts; detached with `logs`; checkpoints kept in S3, moto's server on the
test's side of the hosts' bridge, resumed from there after a worker was killed) -> a changed
host key refused with nothing run -> `down` with host 1 off the network (it names what is left
there and keeps it in the state; host 0 is left as it was) -> `down` again, after which each
host's home and the login user's processes are listed: nothing. No timed assertions: every
wait ends on a condition.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.s3.models import s3_backends
from skyinfra_runtime.s3 import Bucket, CredentialSource

from tests.conftest import REPO_ROOT, skyinfra_argv
from tests.support.local_jobs import module_env
from tests.support.resume_proof import kill_worker, pausing_entry, restarted_after_kill, results
from tests.support.ssh_hosts import Hosts, package_sources, stand_in_hosts

pytestmark = pytest.mark.slow

NAME = "lab"
BUCKET, PREFIX = "lab-ck", "ssh"
# The operator's credentials for ssh.checkpoints_url (moto takes any), in its AWS profile
# PROFILE: each job's agents get them on their stdin; the test looks for the secret in every
# file of the hosts.
PROFILE = "lab-store"
STORE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIDSSHHOSTSTEST",
    "AWS_SECRET_ACCESS_KEY": "s3cr3t-" + "7f3a9c1e5b2d4f60",
}
STEPS, PAUSE_AT = 5, 3
# Node 0 commits a step each round; attempt 1 of a job with PAUSE_AT set stops after step 3 on
# both nodes (node 1 says so as the resume proofs' entries do, for restarted_after_kill).
CHECKPOINTING_JOB = f"""import json, os, time

from skyinfra_runtime import checkpoints


def main():
    root = checkpoints.directory()
    node, attempt = int(os.environ["SKYINFRA_NODE"]), int(os.environ["SKYINFRA_ATTEMPT"])
    last = checkpoints.latest_step(root)
    total = 0 if last is None else json.loads(
        (checkpoints.step_dir(root, last) / "state.json").read_text())["total"]
    for i in range(last or 0, {STEPS}):
        total = (total * 31 + i + 1) % (2 ** 61)
        if node == 0:
            done = checkpoints.step_dir(root, i + 1)
            done.mkdir(parents=True, exist_ok=True)
            (done / "state.json").write_text(json.dumps({{"total": total}}))
            checkpoints.commit(done)
        if os.environ.get("PAUSE_AT") and attempt == 1 and i + 1 == {PAUSE_AT}:
            print("paused at epoch 3 batch 4", flush=True)
            time.sleep(600)  # until the test kills node 1's worker
    return {{"total": total, "resumed_from": last}}
"""
# Attempt 1 waits after step 3 for the notice's SIGTERM; node 0 then saves step 3 and says
# when and how much time was left, and every worker stops. Attempt 2 resumes from step 3.
NOTICE_JOB = f"""import json, os, signal, time

from skyinfra_runtime import checkpoints, seconds_left


def main():
    asked = []
    signal.signal(signal.SIGTERM, lambda *_: asked.append(time.time()))
    root = checkpoints.directory()
    node, attempt = int(os.environ["SKYINFRA_NODE"]), int(os.environ["SKYINFRA_ATTEMPT"])
    last = checkpoints.latest_step(root)
    total = 0 if last is None else json.loads(
        (checkpoints.step_dir(root, last) / "state.json").read_text())["total"]
    for i in range(last or 0, {STEPS}):
        total = (total * 31 + i + 1) % (2 ** 61)
        if attempt == 1 and i + 1 == {PAUSE_AT}:
            print("paused at epoch 3 batch 4", flush=True)
            while not asked:
                time.sleep(0.05)
        if node == 0:
            done = checkpoints.step_dir(root, i + 1)
            done.mkdir(parents=True, exist_ok=True)
            (done / "state.json").write_text(json.dumps({{"total": total}}))
            checkpoints.commit(done)
        if asked:
            print(f"saved step {{i + 1}} on the notice at {{time.time():.3f}}, "
                  f"{{seconds_left():.1f}} s left", flush=True)
            raise SystemExit(130)
    return {{"total": total, "resumed_from": last}}
"""
JOB = '''import hashlib, os


def main():
    """The same computation on every host, and where it ran."""
    digest = hashlib.sha256(b"".join(i.to_bytes(4, "big") for i in range(100000))).hexdigest()
    print(f"node {os.environ['SKYINFRA_NODE']} digest {digest}", flush=True)
    return {
        "digest": digest,
        "home": os.environ["HOME"],
        "netns": os.readlink("/proc/self/ns/net"),
        "cwd": os.getcwd(),
    }
'''


def cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*skyinfra_argv(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    # The hosts install jax, keras and torch (python_packages) from this machine's package
    # sources.
    with package_sources() as sources, stand_in_hosts(2, sources) as made:
        yield made


@pytest.fixture(scope="module")
def store(hosts: Hosts) -> Iterator[str]:
    """moto's S3 server on the test's side of the hosts' bridge (the hosts reach it there,
    as a lab's machines reach a store), with the checkpoint bucket: its address."""
    from moto.server import ThreadedMotoServer

    address = f"{hosts.subnet}.1"
    with socket.socket() as probe:
        probe.bind((address, 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address=address, port=port, verbose=False)
    server.start()
    try:
        # Made in moto's backend (this process's): boto3 would go through the tests' refusing
        # proxy (HTTP_PROXY) for an address other than 127.0.0.1.
        s3_backends[DEFAULT_ACCOUNT_ID]["global"].create_bucket(BUCKET, "us-east-1")
        yield f"http://{address}:{port}"
    finally:
        server.stop()


def bucket_keys(endpoint: str, prefix: str) -> list[str]:
    """The keys under ``prefix``, listed as the nodes list them (the runtime's client)."""
    creds = CredentialSource({"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t"})
    return list(Bucket(f"{endpoint}/{BUCKET}", "us-east-1", creds).list(prefix))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> dict[str, str]:
    made = module_env(tmp_path_factory, tf_plugin_cache, "ssh-hosts")
    # The operator's own known_hosts: an empty home, so nothing of this machine's is honoured.
    home = tmp_path_factory.mktemp("operator-home")
    made["HOME"] = str(home)
    # The store's credentials in the operator's AWS profile, as a team's laptop has them (the
    # environment's keys would come first: none here).
    (home / ".aws").mkdir(mode=0o700)
    (home / ".aws" / "credentials").write_text(
        f"[{PROFILE}]\n"
        + "".join(f"{name.lower()} = {value}\n" for name, value in STORE_CREDENTIALS.items())
    )
    (home / ".aws" / "credentials").chmod(0o600)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        made.pop(name, None)
    for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_DEFAULT_PROFILE"):
        made.pop(name, None)
    return {**made, "AWS_PROFILE": PROFILE}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, hosts: Hosts, store: str) -> Path:
    root = tmp_path_factory.mktemp("ssh-project")
    (root / "job.py").write_text(JOB)
    (root / "ck.py").write_text(CHECKPOINTING_JOB)
    (root / "notice.py").write_text(NOTICE_JOB)
    shutil.copy(REPO_ROOT / "examples" / "keras_resume.py", root / "keras_resume.py")
    shutil.copy(REPO_ROOT / "examples" / "torchrun_ddp.py", root / "torchrun_ddp.py")
    (root / "train.py").write_text(pausing_entry("keras_resume"))
    addresses = ", ".join(f'"{a}"' for a in hosts.addresses)
    (root / "skyinfra.toml").write_text(
        f'name = "{NAME}"\nprovider = "ssh"\nnodes = 2\n'
        'plugins = ["jax", "keras:backend=jax", "torch"]\n'
        'python_packages = ["jax", "keras", "torch"]\n\n'
        f'[ssh]\nhosts = [{addresses}]\nuser = "{hosts.user}"\nkey = "{hosts.key}"\n'
        f'checkpoints_url = "s3://{BUCKET}/{PREFIX}"\ns3_endpoint = "{store}"\n'
    )
    return root


def workspace(project: Path) -> Path:
    return project / ".skyinfra" / "clusters" / NAME


@pytest.fixture(scope="module")
def cluster(
    project: Path, env: dict[str, str], hosts: Hosts
) -> Iterator[subprocess.CompletedProcess[str]]:
    up = cli(["up", "--yes"], project, env)
    assert up.returncode == 0, up.stdout + up.stderr
    yield up
    if (workspace(project) / "topology.json").is_file():  # a test failed before `down`'s own
        for host in hosts.hosts:
            if host.host_key.name.endswith("-new"):
                hosts.old_host_key(host)
        cli(["down", "--yes", "--cluster", NAME], project, env)


def node_dir(hosts: Hosts, index: int) -> Path:
    return hosts.hosts[index].home / ".skyinfra" / NAME / f"node-{index}"


def test_up_enrols_each_host_in_a_folder_of_its_own_with_pinned_keys(
    cluster: subprocess.CompletedProcess[str], project: Path, hosts: Hosts
) -> None:
    for i, host in enumerate(hosts.hosts):
        assert f"node-{i}: {hosts.user}@{host.address}:22 -> {node_dir(hosts, i)}" in cluster.stdout
        # Only the node's folder in the host's home, owned by the login user, with its venv.
        top = {p.split("/")[0] for p in hosts.home_listing(host)}
        assert top == {".skyinfra"}
        assert sorted(p.name for p in (host.home / ".skyinfra" / NAME).iterdir()) == [f"node-{i}"]
        assert (node_dir(hosts, i) / ".skyinfra-ready").is_file()
        assert (node_dir(hosts, i) / "venv" / "bin" / "python").exists()
        assert node_dir(hosts, i).stat().st_uid == hosts.uid
        assert (node_dir(hosts, i) / "gpus").read_text().strip() == "0"
        # No nvidia-smi on the stand-ins: no GPU in the topology, said by `up` and `status`.
        assert f"{node_dir(hosts, i)} (venv made" in cluster.stdout
    assert cluster.stdout.count("; no GPU)") == 2, cluster.stdout
    ws = workspace(project)
    topology = json.loads((ws / "topology.json").read_text())
    assert [n["accelerator"] for n in topology["nodes"]] == [None, None]
    known = ws / "known_hosts"
    assert stat.S_IMODE(known.stat().st_mode) == 0o600
    pinned = known.read_text()
    for host in hosts.hosts:
        key = Path(f"{host.host_key}.pub").read_text().split()[1]
        assert f"{host.address} ssh-ed25519 {key}" in pinned
    # The root module names each host, its folder and its pinned key, for review.
    tfvars = json.loads((ws / "terraform.tfvars.json").read_text())
    assert [h["host"] for h in tfvars["hosts"].values()] == hosts.addresses
    main = (ws / "main.tf").read_text()
    for host in hosts.addresses:
        assert f"{hosts.user}@{host}:22" in main


def test_status_and_verify_reach_every_host(
    cluster: subprocess.CompletedProcess[str], project: Path, env: dict[str, str]
) -> None:
    status = cli(["status", "--cluster", NAME], project, env)
    assert status.returncode == 0, status.stderr
    assert status.stdout.count(" ready (bootstrap took ") == 2, status.stdout
    assert status.stdout.count("), no GPU\n") == 2, status.stdout
    verify = cli(["verify", "--cluster", NAME], project, env)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_a_job_runs_on_each_host_with_identical_results(
    cluster: subprocess.CompletedProcess[str], project: Path, env: dict[str, str], hosts: Hosts
) -> None:
    run = cli(["run", "--cluster", NAME, "job.py:main"], project, env)
    assert run.returncode == 0, run.stdout + run.stderr
    runs = sorted(p for p in (workspace(project) / "runs").iterdir() if p.is_dir())
    summary = json.loads((runs[-1] / "summary.json").read_text())
    values = [w["value"] for n in summary["nodes"] for w in n["result"]["workers"]]
    assert len(values) == 2  # one worker process on each host: it has no GPU
    assert values[0]["digest"] == values[1]["digest"]
    # Each ran on its own host: its home, its network namespace, its node's folder.
    assert [v["home"] for v in values] == [str(h.home) for h in hosts.hosts]
    assert values[0]["netns"] != values[1]["netns"]
    for i, v in enumerate(values):
        assert v["cwd"].startswith(str(node_dir(hosts, i)) + "/")
        assert v["netns"] == os.readlink(f"/proc/{hosts.hosts[i].ns}/ns/net")


def test_keras_on_the_hosts_same_weights_and_a_killed_worker_resumes_bit_identical(
    cluster: subprocess.CompletedProcess[str], project: Path, env: dict[str, str], hosts: Hosts
) -> None:
    """The seeds' Keras example (on JAX, installed by each host's enrolment) trains across
    both hosts to the same weights; node 1's worker SIGKILLed in epoch 3 of a job with
    --max-restarts 1 restarts it, which resumes from epoch 2's backup in the checkpoint folder
    on the hosts and ends with the uninterrupted run's weights, bit for bit."""
    ws = workspace(project)
    reference = {v["weights_sha256"] for v in results(ws, cli(["run", "--cluster", NAME,
                 "--checkpoints", "ref", "train.py:main"], project, env))}  # fmt: skip
    assert len(reference) == 1
    run, summary = restarted_after_kill(
        project, env, ws, "restart", ["--cluster", NAME, "train.py:main"],
        node_1_dir=node_dir(hosts, 1),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout
    attempts = summary["attempts"]
    assert isinstance(attempts, list) and [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[0]["cause"]["kind"] == "signal", attempts
    step = node_dir(hosts, 0) / "checkpoints" / "restart" / "step-00000016"
    assert f"resumed from {step} (epoch 2, step 16)" in run.stdout, run.stdout
    values = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]  # type: ignore[index]
    assert {v["resumed_step"] for v in values} == {16}
    assert {v["weights_sha256"] for v in values} == reference


def test_checkpoints_in_s3_resume_a_killed_worker_with_no_secret_on_the_hosts(
    cluster: subprocess.CompletedProcess[str],
    project: Path,
    env: dict[str, str],
    hosts: Hosts,
    store: str,
) -> None:
    """ssh.checkpoints_url: each host keeps its checkpoint sets in S3 too (moto, reached from
    the hosts' namespaces), signing with the operator's credentials that came on its agent's
    stdin. Node 1's worker is SIGKILLed in attempt 1 after node 0 committed step 3; node 1
    never wrote a checkpoint, so attempt 2 resumes there from step 3 only through S3 (node 0's
    upload, restored into node 1's folder) and both end with an uninterrupted run's total.
    The secret is in no file on either host, and on no command line of theirs."""
    secret = STORE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"].encode()
    on_command_lines: list[str] = []

    def kill(ws: Path, job: str) -> None:
        on_command_lines.extend(p for p in hosts.user_processes() if secret.decode() in p)
        kill_worker(ws, job)

    run, summary = restarted_after_kill(
        project, env, workspace(project), "s3ck", ["--cluster", NAME, "ck.py:main"],
        lose=kill, node_1_dir=node_dir(hosts, 1),
    )  # fmt: skip
    assert run.returncode == 0, run.stdout
    assert f"checkpoint sets kept in s3://{BUCKET}/{PREFIX}" in cluster.stdout
    assert [a["attempt"] for a in summary["attempts"]] == [1, 2]  # type: ignore[index]
    values = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]  # type: ignore[index]
    assert [v["resumed_from"] for v in values] == [PAUSE_AT, PAUSE_AT], values
    total = 0
    for i in range(STEPS):
        total = (total * 31 + i + 1) % (2**61)
    assert [v["total"] for v in values] == [total, total]
    # Node 0's manifest in the bucket names step 3; node 1's folder got it from there.
    keys = bucket_keys(store, f"{PREFIX}/s3ck/")
    assert f"{PREFIX}/s3ck/nodes/node-0/manifest.json" in keys, keys
    restored = node_dir(hosts, 1) / "checkpoints" / "s3ck" / f"step-{PAUSE_AT:08d}" / "COMMITTED"
    assert restored.is_file()
    settings = json.loads((node_dir(hosts, 1) / "checkpoints.json").read_text())
    assert settings["bucket_url"] == f"{store}/{BUCKET}" and settings["credentials"] == "operator"
    assert on_command_lines == []
    for i, host in enumerate(hosts.hosts):
        venv = node_dir(hosts, i) / "venv"  # the packages installed at enrolment (GBs of them)
        for path in host.home.rglob("*"):
            if path.is_file() and not path.is_symlink() and venv not in path.parents:
                assert secret not in path.read_bytes(), path


def test_checkpoints_lists_the_sets_on_each_host_and_in_s3_and_deletes_one_everywhere(
    cluster: subprocess.CompletedProcess[str],
    project: Path,
    env: dict[str, str],
    hosts: Hosts,
    store: str,
) -> None:
    """`checkpoints` lists the sets the jobs above left (each host's folder asked, the store
    listed with the operator's credentials), each with the nodes that hold it; `delete NAME
    --yes` removes it from both hosts' folders and from S3, and no other set; a set that
    does not exist is exit 2, naming it."""
    listed = cli(["checkpoints", "--cluster", NAME, "--json"], project, env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    sets = {s["name"]: s for s in json.loads(listed.stdout)}
    assert {"ref", "restart", "s3ck"} <= set(sets), sets
    # Node 0 wrote s3ck's steps; node 1 got them from S3 when its worker resumed.
    s3ck = sets["s3ck"]
    assert s3ck["nodes"] == [0, 1] and len(s3ck["jobs"]) == 1, s3ck
    assert f"s3://{BUCKET}/{PREFIX}/s3ck" in s3ck["places"], s3ck
    on_hosts = [
        sum(p.stat().st_size for p in (node_dir(hosts, i) / "checkpoints" / "s3ck").rglob("*")
            if p.is_file() and not p.is_symlink())
        for i in range(2)
    ]  # fmt: skip
    assert all(on_hosts) and s3ck["size_bytes"] > sum(on_hosts), (on_hosts, s3ck)
    table = cli(["checkpoints", "--cluster", NAME], project, env)
    assert table.returncode == 0, table.stderr
    assert re.search(r"^s3ck +\S+ \S+ +\d+ +0,1 ", table.stdout, re.M), table.stdout
    assert f"and under s3://{BUCKET}/{PREFIX}/" in table.stdout

    gone = cli(["checkpoints", "--cluster", NAME, "delete", "s3ck", "--yes"], project, env)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert f"under s3://{BUCKET}/{PREFIX}/s3ck/" in gone.stdout, gone.stdout
    for i in range(2):
        left = sorted(p.name for p in (node_dir(hosts, i) / "checkpoints").iterdir())
        assert "s3ck" not in left and ("restart" in left or i == 1), (i, left)
    assert bucket_keys(store, f"{PREFIX}/s3ck/") == []
    assert bucket_keys(store, f"{PREFIX}/restart/") != []

    missing = cli(["checkpoints", "--cluster", NAME, "delete", "no-such-set", "--yes"],
                  project, env)  # fmt: skip
    assert missing.returncode == 2, missing.stdout + missing.stderr
    assert "checkpoint set 'no-such-set'" in missing.stderr and "no such set" in missing.stderr


def test_a_torchrun_ddp_script_trains_across_both_hosts(
    cluster: subprocess.CompletedProcess[str], project: Path, env: dict[str, str], hosts: Hosts
) -> None:
    """The examples' torchrun script, unmodified, as a script entry with its own arguments: one
    process on each host (no GPU) in one process group of world size 2 (gloo, rendezvous on
    host 0's address), each starting from different weights; DDP leaves both with the same.
    gloo binds the interface holding the node's address: the stand-ins' hostname resolves to
    127.0.0.1, which the other host's process cannot reach."""
    argv = ["run", "--cluster", NAME, "--all-logs", "torchrun_ddp.py", "--", "--epochs", "2"]
    run = cli(argv, project, env)
    assert run.returncode == 0, run.stdout + run.stderr
    # "[node-N] " starts each line of node N's output.
    line = re.compile(
        r"^\[node-(\d)\] rank (\d)/(\d) epochs=2 loss=\S+ weights_sha256=([0-9a-f]{64})$", re.M
    )
    found = line.findall(run.stdout)
    # Rank 0 on host 0 and rank 1 on host 1, in one group of world size 2.
    assert sorted((node, rank, world) for node, rank, world, _ in found) == [
        ("0", "0", "2"),
        ("1", "1", "2"),
    ], run.stdout
    assert len({digest for *_, digest in found}) == 1  # rank 0's weights, broadcast and trained


def test_a_detached_job_and_its_logs(
    cluster: subprocess.CompletedProcess[str], project: Path, env: dict[str, str]
) -> None:
    started = cli(["run", "--cluster", NAME, "--detach", "job.py:main"], project, env)
    assert started.returncode == 0, started.stdout + started.stderr
    job = started.stdout.split("job ", 1)[1].split()[0]
    follow = cli(["logs", "--cluster", NAME, job, "--follow", "--all"], project, env)
    assert follow.returncode == 0, follow.stderr
    lines = [line for line in follow.stdout.splitlines() if " digest " in line]
    assert len(lines) == 2 and lines[0].split()[-1] == lines[1].split()[-1], follow.stdout
    record = cli(["jobs", "--cluster", NAME, job, "--json"], project, env)
    assert json.loads(record.stdout)["state"] == "succeeded", record.stdout


def test_ssh_reaches_a_host_held_to_its_pinned_key(
    cluster: subprocess.CompletedProcess[str], project: Path, env: dict[str, str], hosts: Hosts
) -> None:
    """`skyinfra ssh` is the system's ssh with the cluster's known_hosts, strictly: CMD runs in
    the node's folder with its venv first on PATH; `--config` writes a block per host."""
    remote = ["echo", "$SKYINFRA_NODE", "$PWD", "$(command -v python)"]
    shell = cli(["ssh", "--cluster", NAME, "1", "--", *remote], project, env)
    assert shell.returncode == 0, shell.stderr
    index, cwd, python = shell.stdout.split()
    assert index == "1" and cwd == str(node_dir(hosts, 1))
    assert python == f"{node_dir(hosts, 1)}/venv/bin/python"
    config = cli(["ssh", "--cluster", NAME, "--config"], project, env)
    assert config.returncode == 0, config.stderr
    for i, host in enumerate(hosts.hosts):
        assert f"Host {NAME}-node-{i}\n    HostName {host.address}\n" in config.stdout
    assert "StrictHostKeyChecking yes" in config.stdout
    assert stat.S_IMODE((workspace(project) / "ssh_config").stat().st_mode) == 0o600


def _standbys_ready(hosts: Hosts) -> bool:
    """Every node's standby slot holds a ready standby, and none is still importing."""
    for host in hosts.hosts:
        for folder in host.home.glob(".skyinfra/*/node-*/standby"):
            if list(folder.glob("*.importing")) or not list(folder.glob("w0-*.sock")):
                return False
    return True


def test_a_changed_host_key_is_refused_and_nothing_runs(
    cluster: subprocess.CompletedProcess[str], project: Path, env: dict[str, str], hosts: Hosts
) -> None:
    changed = hosts.hosts[1]
    # What changes on a host by itself first settles: the standbys the last job's end asked
    # for finish their imports (a socket renamed from .importing to .sock).
    until = time.monotonic() + 300  # a bound on the wait, not an assertion on time
    while not _standbys_ready(hosts):
        assert time.monotonic() < until, [hosts.home_listing(h) for h in hosts.hosts]
        time.sleep(0.2)
    before = [hosts.home_listing(h) for h in hosts.hosts]
    hosts.new_host_key(changed)
    try:
        run = cli(["run", "--cluster", NAME, "job.py:main"], project, env)
        assert run.returncode != 0
        assert changed.address in run.stderr and "host key changed" in run.stderr, run.stderr
        up = cli(["up", "--yes"], project, env)
        assert up.returncode != 0
        assert f"host {changed.address} (ssh.hosts[1]) presented another host key" in up.stderr
        assert "nothing was run on any host" in up.stderr
        # Nothing was copied or started on either host.
        after = [hosts.home_listing(h) for h in hosts.hosts]
        changed_paths = [sorted(set(a) ^ set(b)) for a, b in zip(after, before, strict=True)]
        assert after == before, changed_paths
    finally:
        hosts.old_host_key(changed)


def test_a_drill_notice_is_saved_within_and_the_node_enrolled_again_on_its_host(
    cluster: subprocess.CompletedProcess[str], project: Path, env: dict[str, str], hosts: Hosts
) -> None:
    """`drill interrupt node-1` reaches node 1's stand-in on its host over SSH; the job's
    workers get SIGTERM and the deadline, node 0 saves step 3 within the notice, node 1 goes
    (its folder, as an interrupted instance's disk) and `run --max-restarts 1` enrols it again
    on the same host (the host stays: it is the user's) and attempt 2 resumes from step 3 and
    ends with an uninterrupted run's total. Bad input first: exit 2, nothing sent."""
    for bad, word in ((["node-0"], "node-0 is the head"), (["node-2"], "node-1 to node-1"),
                      (["--notice-seconds", "-1", "node-1"], "-1")):  # fmt: skip
        refused = cli(["drill", "interrupt", "--cluster", NAME, *bad], project, env)
        assert refused.returncode == 2 and word in refused.stderr, refused.stderr
    assert not (node_dir(hosts, 1) / "interruption.json").exists()
    drills: list[subprocess.CompletedProcess[str]] = []

    def drill(ws: Path, job: str) -> None:
        argv = ["drill", "interrupt", "--cluster", NAME, "node-1", "--notice-seconds", "120"]
        drills.append(cli(argv, project, env))
        assert drills[0].returncode == 0, drills[0].stdout + drills[0].stderr  # else: stop now

    run, summary = restarted_after_kill(
        project, env, workspace(project), "drill", ["--cluster", NAME, "notice.py:main"],
        lose=drill, node_1_dir=node_dir(hosts, 1),
    )  # fmt: skip
    said = drills[0]
    assert said.returncode == 0, said.stdout + said.stderr
    assert f"notice sent to node-1 (host {hosts.addresses[1]}): terminate at" in said.stdout
    assert run.returncode == 0, run.stdout
    assert "node-1 interrupted: replacing it" in run.stdout, run.stdout
    attempts = summary["attempts"]
    assert isinstance(attempts, list) and [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[0]["cause"]["kind"] == "interrupted", attempts
    notice = attempts[0]["interruptions"][0]
    assert notice["node"] == 1 and notice["action"] == "terminate", notice
    saved = [line for line in run.stdout.splitlines() if "saved step 3 on the notice" in line]
    assert len(saved) == 1, run.stdout  # node 0's (run shows node 0)
    assert notice["noticed_at"] <= float(saved[0].split(" at ")[1].split(",")[0]) < notice["time"]
    values = [n["result"]["workers"][0]["value"] for n in summary["nodes"]]  # type: ignore[index]
    assert [v["resumed_from"] for v in values] == [PAUSE_AT, PAUSE_AT], values
    total = 0
    for i in range(STEPS):
        total = (total * 31 + i + 1) % (2**61)
    assert [v["total"] for v in values] == [total, total]
    # Enrolled again on the same host (Terraform's -replace): its own stand-in again.
    assert 'replacing broken node(s): module.nodes.terraform_data.node["node-1"]' in run.stdout
    assert (node_dir(hosts, 1) / "notice.json").is_file()
    assert not (node_dir(hosts, 1) / "interruption.json").exists()


def test_down_leaves_each_host_as_it_was(
    cluster: subprocess.CompletedProcess[str], project: Path, env: dict[str, str], hosts: Hosts
) -> None:
    # Both nodes there whatever the tests before left (a failed one may leave a node gone):
    # an `up` with nothing to do, or one that enrols such a node again.
    again = cli(["up", "--yes"], project, env)
    assert again.returncode == 0, again.stdout + again.stderr
    # Host 1 off the network: `down` removes host 0's node, names host 1 and what is left to
    # clean there, fails as an unreachable host fails `up`, and keeps host 1 in the state.
    lost = hosts.hosts[1]
    hosts.cut_link(lost)
    try:
        partial = cli(["down", "--yes", "--cluster", NAME], project, env)
    finally:
        hosts.cut_link(lost, up=True)
    assert partial.returncode == 1, partial.stdout + partial.stderr
    said = partial.stdout + partial.stderr
    assert f"host {hosts.addresses[0]}: nothing left" in said
    assert f"host {lost.address}: not reachable" in partial.stderr, partial.stderr
    assert f"left to clean there: the node folder {node_dir(hosts, 1)}" in partial.stderr
    assert "processes may still run there" in partial.stderr
    assert f"run `skyinfra down --cluster {NAME}` again" in partial.stderr
    assert not node_dir(hosts, 0).exists() and node_dir(hosts, 1).is_dir()
    # Host 0 as it was already: not even the destroy provisioner's empty script beside its
    # node's folder (~/.skyinfra/lab/.node-0-remove.sh), nor the folders above it.
    assert hosts.home_listing(hosts.hosts[0]) == []
    # The later `down` finishes it.
    down = cli(["down", "--yes", "--cluster", NAME], project, env)
    assert down.returncode == 0, down.stdout + down.stderr
    for host in hosts.hosts:
        assert f"host {host.address}: nothing left" in down.stdout
        assert hosts.home_listing(host) == []
    assert hosts.user_processes() == []
    assert "checked with ssh: nothing of cluster 'lab' is left" in down.stdout
