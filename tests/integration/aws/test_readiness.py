"""Node readiness over SSH, against the real sshd on 127.0.0.1 (conftest's ``sshd``).

The node's markers live under a temporary node root instead of /var/lib/skyinfra; the SSH
transport takes their paths as arguments, as it takes the port. cloud-init's status is asked
through a small stand-in script where a test needs it (this machine's own cloud-init never
ran, so its answer says nothing about a node). The provision.sh tests run the script that
cloud-init would run, rendered from the real template with its directories moved to tmp.
"""

from __future__ import annotations

import functools
import getpass
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from skyinfra.errors import NodesNotReadyError
from skyinfra.run.launch import ClusterNodes, JobLaunch
from skyinfra.run.session import run_on_cluster
from skyinfra.spec import validate_spec
from skyinfra.targets.aws.cloudinit import NodeUserData, default_bootstrap_script, render_user_data
from skyinfra.targets.aws.endpoints import ENDPOINT_ENV_VAR
from skyinfra.targets.aws.target import console_host_keys
from skyinfra.topology import Node, Topology
from skyinfra.transport.readiness import wait_until_ready
from skyinfra.transport.ssh import ReadinessProbe, SshKeys, SshTarget, SshTransport
from skyinfra.wheel import build_runtime_wheel
from tests.conftest import content_of
from tests.support.aws import REGION
from tests.support.aws_fixtures import free_port

LOG = "/var/log/cloud-init-output.log"


@pytest.fixture
def node_root(tmp_path: Path) -> Path:
    root = tmp_path / "node"
    (root / "state").mkdir(parents=True)
    return root


@pytest.fixture
def make_transport(
    sshd: tuple[SshTarget, Path], node_root: Path, tmp_path: Path
) -> Iterator[Callable[..., SshTransport]]:
    """SshTransports whose node 0 is the real sshd and whose markers are under node_root."""
    target, key = sshd
    made: list[SshTransport] = []

    def make(
        targets: dict[int, SshTarget] | None = None, cloud_init_status: str | None = None
    ) -> SshTransport:
        ssh = SshTransport(
            targets or {0: target},
            keys=SshKeys(key, tmp_path / "known_hosts"),
            node_root=str(node_root),
            connect_timeout_s=5,
            probe=ReadinessProbe(
                ready_marker=str(node_root / "state" / "ready"),
                failed_marker=str(node_root / "state" / "failed"),
                cloud_init_status=cloud_init_status,
                bootstrap_log=LOG,
            ),
        )
        made.append(ssh)
        return ssh

    yield make
    for ssh in made:
        ssh.close()


def fake_cloud_init(tmp_path: Path, answer: str) -> str:
    """A stand-in for `cloud-init status` that prints ``answer``."""
    script = tmp_path / f"cloud-init-{answer.split()[-1]}"
    script.write_text(f"#!/bin/sh\necho '{answer}'\n")
    script.chmod(0o755)
    return f"{script} status"


def closed_port_target() -> SshTarget:
    return SshTarget(host="127.0.0.1", user=getpass.getuser(), port=free_port())


def test_marker_absent_is_pending_then_created_is_ready(
    make_transport: Callable[..., SshTransport], node_root: Path
) -> None:
    ssh = make_transport()
    pending = ssh.readiness(0)
    assert (pending.state, pending.ready) == ("pending", False)
    assert f"no {node_root}/state/ready yet" in pending.detail and LOG in pending.detail
    (node_root / "state" / "ready").write_text("2026-11-23T10:00:00Z\n")
    assert ssh.readiness(0).ready


def test_failed_marker_names_the_failure_and_where_to_look(
    make_transport: Callable[..., SshTransport], node_root: Path, sshd: tuple[SshTarget, Path]
) -> None:
    target, key = sshd
    (node_root / "state" / "failed").write_text("provision.sh line 9: curl --fail ... (exit 22)\n")
    state = make_transport().readiness(0)
    assert state.state == "failed"
    assert "bootstrap failed: provision.sh line 9: curl --fail ... (exit 22)" in state.detail
    # Where to look, and the command that shows it.
    assert f"see {LOG} on the node" in state.detail
    assert f"ssh -i {key} -o IdentitiesOnly=yes" in state.detail
    assert f"-p {target.port} {target.user}@127.0.0.1 sudo tail" in state.detail


@pytest.mark.parametrize(
    ("answer", "state", "words"),
    [
        ("status: running", "pending", "bootstrap still running"),
        ("status: error", "failed", "cloud-init reported an error (status: error)"),
        ("status: done", "failed", "cloud-init finished but the bootstrap left no"),
    ],
)
def test_cloud_init_status_without_markers(
    make_transport: Callable[..., SshTransport],
    tmp_path: Path,
    answer: str,
    state: str,
    words: str,
) -> None:
    ssh = make_transport(cloud_init_status=fake_cloud_init(tmp_path, answer))
    found = ssh.readiness(0)
    assert found.state == state
    assert words in found.detail


def test_unreachable_node_reads_as_unreachable(
    make_transport: Callable[..., SshTransport],
) -> None:
    found = make_transport({0: closed_port_target()}).readiness(0)
    assert found.state == "unreachable"
    assert "not reachable over SSH" in found.detail and "cannot connect to" in found.detail


def test_wait_returns_once_the_marker_appears(
    make_transport: Callable[..., SshTransport], node_root: Path
) -> None:
    ssh = make_transport()
    lines: list[str] = []
    timer = threading.Timer(0.8, (node_root / "state" / "ready").write_text, args=("now\n",))
    timer.start()
    try:
        wait_until_ready(
            ssh,
            topology_of(1),
            timeout_s=30,
            echo=lines.append,
            poll_s=0.1,
        )
    finally:
        timer.cancel()
    assert lines[0].startswith("[skyinfra] waiting for node-0 to finish bootstrap (0/1 ready, ")
    assert lines[-1].startswith("[skyinfra] all 1 node(s) ready after")


def topology_of(count: int) -> Topology:
    return Topology(
        cluster="ready",
        provider="aws",
        head_addr="127.0.0.1",
        head_port=29500,
        nodes=tuple(Node(i, f"node-{i}", "127.0.0.1", None, None) for i in range(count)),
    )


def test_run_waits_then_fails_naming_the_node_not_ready(
    make_transport: Callable[..., SshTransport],
    sshd: tuple[SshTarget, Path],
    node_root: Path,
    tmp_path: Path,
) -> None:
    """node-0 is ready, node-1 does not answer: after the timeout the run fails naming
    node-1 only, and nothing was copied or started on node-0."""
    (node_root / "state" / "ready").write_text("now\n")
    ssh = make_transport({0: sshd[0], 1: closed_port_target()})
    topology = topology_of(2)
    (tmp_path / "topology.json").write_text(json.dumps(topology.to_dict()))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("def main():\n    return 0\n")
    lines: list[str] = []
    started = time.monotonic()
    with pytest.raises(NodesNotReadyError) as err:
        run_on_cluster(
            JobLaunch(
                entry="train.py:main",
                src=tmp_path / "src",
            ),
            ClusterNodes(ssh, topology, tmp_path / "topology.json", tmp_path / "runs"),
            echo=lines.append,
            wait_ready_s=2,
            ready_poll_s=0.2,
        )
    assert time.monotonic() - started < 30
    message = str(err.value)
    assert message.startswith("1 of 2 node(s) not ready after 2 s: node-1: not reachable over SSH")
    assert "node-0" not in message
    assert "--wait-ready SECONDS" in message
    assert err.value.nodes == {"node-1": "unreachable"}
    assert lines[0].startswith(
        "[skyinfra] waiting for node-1 (not reachable yet) to finish bootstrap (1/2 ready, "
    )
    assert not (tmp_path / "runs").exists() and not (node_root / "work").exists()


def test_run_fails_at_once_when_a_bootstrap_failed(
    make_transport: Callable[..., SshTransport], node_root: Path, tmp_path: Path
) -> None:
    (node_root / "state" / "failed").write_text("provision.sh line 7: sha256sum (exit 1)\n")
    started = time.monotonic()
    with pytest.raises(NodesNotReadyError, match=r"cannot run: node-0: bootstrap failed: ") as err:
        wait_until_ready(make_transport(), topology_of(1), timeout_s=600, echo=lambda _: None)
    assert time.monotonic() - started < 30  # not the 600 s timeout
    assert LOG in str(err.value)


def test_run_with_no_wait_fails_for_a_pending_node(
    make_transport: Callable[..., SshTransport], node_root: Path
) -> None:
    with pytest.raises(NodesNotReadyError) as err:
        wait_until_ready(make_transport(), topology_of(1), timeout_s=0, echo=lambda _: None)
    assert str(err.value).startswith(
        f"1 of 1 node(s) not ready: node-0: bootstrap still running (no {node_root}/state/ready"
    )


# ---------------------------------------------------------------- provision.sh for real


@pytest.fixture(scope="module")
def wheel_server(
    minimal_runtime_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """The minimal runtime wheel served over HTTP on 127.0.0.1: (base URL, wheel path)."""
    served = tmp_path_factory.mktemp("served")
    wheel = build_runtime_wheel(minimal_runtime_dir, cache=tmp_path_factory.mktemp("wheels"))
    shutil.copy(wheel.path, served / wheel.path.name)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served / wheel.path.name
    finally:
        server.shutdown()


def provision(
    node_root: Path, wheel_url: str, wheel: Path, sha256: str, *, idle_shutdown_minutes: int = 0
) -> subprocess.Popen[str]:
    """Render the user data with its directories under node_root, write the scripts cloud-init
    would write (the document itself goes to ``<node_root>/../user-data``), and start
    provision.sh."""
    scripts = node_root.parent / "scripts"
    document = render_user_data(
        NodeUserData(
            cluster_name="ready",
            node_index=0,
            topology_json=json.dumps(
                {"schema": 1, "nodes": [{"index": 0, "accelerator": None}], "plugins": []}
            ),
            wheel_url=wheel_url,
            wheel_sha256=sha256,
            wheel_filename=wheel.name,
            bootstrap_script=default_bootstrap_script(),
            jax_extra=None,
            idle_shutdown_minutes=idle_shutdown_minutes,
            ssh_user=getpass.getuser(),
            python=sys.executable,
            node_dir=str(node_root),
            state_dir=str(node_root / "state"),
            script_dir=str(scripts),
            config_dir=str(node_root.parent / "etc"),
        )
    )
    (node_root.parent / "user-data").write_text(document)
    for entry in yaml.safe_load(document)["write_files"]:
        path = Path(entry["path"])
        if path.parent in (scripts, node_root.parent / "etc"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content_of(entry))
            path.chmod(0o755)
    # The node signs its S3 GET with its role's credentials; here a test server that ignores
    # the signature serves the wheel, and these stand in for the instance metadata service.
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "node-role", "AWS_SECRET_ACCESS_KEY": "node-role"}
    env["FETCH_DEADLINE_S"] = "5"
    return subprocess.Popen(
        ["bash", str(scripts / "provision.sh")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def test_provision_script_marks_the_node_ready(
    make_transport: Callable[..., SshTransport],
    node_root: Path,
    wheel_server: tuple[str, Path],
) -> None:
    base, wheel = wheel_server
    sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
    ssh = make_transport()
    proc = provision(node_root, f"{base}/{wheel.name}", wheel, sha256)
    # While provision.sh runs (a venv, a pip install: seconds) the node is not ready.
    lines: list[str] = []
    wait_until_ready(ssh, topology_of(1), timeout_s=120, echo=lines.append, poll_s=0.2)
    # The wait shows the bootstrap phase the node reports over SSH (provision.sh and
    # bootstrap-node.sh append them to the phases file beside the markers).
    assert lines[0].startswith("[skyinfra] waiting for node-0 (")
    # The seconds waited so far depend on the machine's load (the first SSH poll took over a
    # second here under `make test`): the count and the limit are the facts, not the time.
    assert re.search(r"to finish bootstrap \(0/1 ready, \d+/120 s\)$", lines[0]), lines[0]
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, output
    assert (node_root / "venv" / "bin" / "python").is_file()
    # No uv version was rendered: the node falls back to pip and its log says so.
    assert "falling back to pip" in output
    phases = [line.split()[0] for line in (node_root / "state" / "phases").read_text().splitlines()]
    assert phases == ["uv", "fetch", "venv", "wheel", "ready"]
    ready = ssh.readiness(0)
    assert ready.ready and ready.phase == "ready" and ready.bootstrap_s is not None
    assert not (node_root / "state" / "failed").exists()


def test_provision_script_failure_is_reported_with_the_failing_step(
    make_transport: Callable[..., SshTransport],
    node_root: Path,
    wheel_server: tuple[str, Path],
) -> None:
    base, wheel = wheel_server
    proc = provision(node_root, f"{base}/{wheel.name}", wheel, "0" * 64)  # wrong checksum
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode != 0, output
    assert not (node_root / "state" / "ready").exists()
    found = make_transport().readiness(0)
    assert found.state == "failed"
    assert "bootstrap failed: provision.sh line" in found.detail
    assert "sha256sum --check --strict" in found.detail
    assert f"see {LOG} on the node" in found.detail


def idle_check(node_root: Path, tmp_path: Path, **overrides: str) -> bool:
    """Run the node's idle-check.sh as its systemd unit would (the unit's Environment line,
    ``overrides`` on top), with stand-ins for shutdown, logger and who; True: it shut down."""
    document = yaml.safe_load((node_root.parent / "user-data").read_text())
    files = {f["path"]: content_of(f) for f in document["write_files"]}
    (line,) = [
        x
        for x in files["/etc/systemd/system/skyinfra-idle.service"].splitlines()
        if x.startswith("Environment=")
    ]
    env = dict(pair.split("=", 1) for pair in line.removeprefix("Environment=").split())
    env.update(overrides)
    stubs = tmp_path / "stubs"
    stubs.mkdir(exist_ok=True)
    shut = tmp_path / "shutdown-called"
    for name, body in {"shutdown": f'echo "$@" > {shut}', "logger": ":", "who": ":"}.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    env["PATH"] = f"{stubs}:/usr/bin:/bin"
    script = node_root.parent / "scripts" / "idle-check.sh"
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return shut.is_file()


def test_a_node_whose_bootstrap_failed_shuts_itself_down(
    node_root: Path, wheel_server: tuple[str, Path], tmp_path: Path
) -> None:
    """The idle timer is armed before provision.sh (test_aws_cloudinit checks the order); a
    bootstrap still running counts as busy, a failed one as idle: the node ends itself."""
    base, wheel = wheel_server
    proc = provision(node_root, f"{base}/{wheel.name}", wheel, "0" * 64, idle_shutdown_minutes=1)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode != 0, output
    assert (node_root / "state" / "failed").is_file()
    stamp = node_root / "state" / "last-busy"

    def aged() -> None:
        old = time.time() - 120
        os.utime(stamp, (old, old))

    # Still bootstrapping (no marker), well within PROVISION_MINUTES: busy, never shut down.
    failed = (node_root / "state" / "failed").read_text()
    (node_root / "state" / "failed").unlink()
    assert not idle_check(node_root, tmp_path, PROVISION_MINUTES="100000")
    aged()
    assert not idle_check(node_root, tmp_path, PROVISION_MINUTES="100000")
    # The bootstrap failed: idle from then on, so the node shuts down IDLE_MINUTES later.
    (node_root / "state" / "failed").write_text(failed)
    stamp.unlink()
    assert not idle_check(node_root, tmp_path)  # the first look only starts the clock
    aged()
    assert idle_check(node_root, tmp_path)
    assert (tmp_path / "shutdown-called").read_text().split() == ["-h", "now"]


# ---------------------------------------------------------------- host keys


def console_with(public_key_file: Path) -> str:
    """What cloud-init prints to the serial console at first boot, with this host key."""
    key = " ".join(public_key_file.read_text().split()[:2])
    return (
        "Cloud-init v. 24.1 running 'modules:final'\n"
        "ec2: #############################################################\n"
        "-----BEGIN SSH HOST KEY KEYS-----\n"
        "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY= root@ip-10-42-0-10\n"
        f"{key} root@ip-10-42-0-10\n"
        "-----END SSH HOST KEY KEYS-----\n"
    )


@pytest.fixture
def moto_console(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Set what moto's GetConsoleOutput answers (its server runs in this process)."""
    import moto.ec2.responses.general as general

    return lambda text: monkeypatch.setattr(general, "SAMPLE_CONSOLE_OUTPUT", text)


def test_host_key_is_pinned_from_the_console_output(
    sshd: tuple[SshTarget, Path],
    ec2: Any,
    moto_console: Callable[[str], None],
    node_root: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    aws_env: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The AWS target's transport accepts only the host key the node printed on its console
    (read through EC2 GetConsoleOutput, here moto's); without one on the console it does
    not connect, and a different key is refused. The first contact names the fingerprint."""
    target, key = sshd
    monkeypatch.setenv(ENDPOINT_ENV_VAR, aws_env)
    host_pub = key.parent / "host_ed25519.pub"
    instance = ec2.run_instances(ImageId="ami-dca37ea5", MinCount=1, MaxCount=1)
    instance_id = instance["Instances"][0]["InstanceId"]
    spec = validate_spec(
        {
            "name": "pin",
            "provider": "aws",
            "nodes": 1,
            "aws": {
                "region": REGION,
                "instance_type": "t3.micro",
                "ssh_cidrs": ["203.0.113.7/32"],
                "ssh_key": str(key),
            },
        }
    )
    topology = Topology(
        cluster="pin",
        provider="aws",
        head_addr="10.42.0.10",
        head_port=29500,
        nodes=(Node(0, "node-0", "10.42.0.10", None, instance_id),),
    )
    keys = console_host_keys(spec, topology)
    (node_root / "state" / "ready").write_text("now\n")

    def transport(known: str) -> SshTransport:
        return SshTransport(
            {0: target},
            keys=SshKeys(
                key, tmp_path / known, host_keys=keys, on_new_host_key=lambda line: print(line)
            ),
            node_root=str(node_root),
            connect_timeout_s=5,
            probe=ReadinessProbe(
                ready_marker=str(node_root / "state" / "ready"),
                failed_marker=str(node_root / "state" / "failed"),
                cloud_init_status=None,
                bootstrap_log=LOG,
            ),
        )

    # Not on the console yet (moto's stock output has no key block): no connection at all.
    assert keys(0) == []
    waiting = transport("known_hosts_a").readiness(0)
    assert waiting.state == "unreachable" and "not on its console yet" in waiting.detail
    assert not (tmp_path / "known_hosts_a").exists()

    # Another key on the console than the one sshd presents: refused, naming what it saw.
    other = tmp_path / "other_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    moto_console(console_with(other.with_suffix(".pub")))
    refused = transport("known_hosts_b").readiness(0)
    assert refused.state == "failed", refused.detail
    assert "not a key the node published on its console" in refused.detail
    expected = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(host_pub)], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    assert expected in refused.detail  # the fingerprint it was shown

    # The node's own key on the console: connects, records it and says which key it was.
    moto_console(console_with(host_pub))
    assert keys(0) != []
    ssh = transport("known_hosts_c")
    try:
        assert ssh.readiness(0).ready
    finally:
        ssh.close()
    said = capsys.readouterr().out
    assert f"host key ssh-ed25519 {expected} matches the key it published on its console" in said
    recorded = (tmp_path / "known_hosts_c").read_text()
    assert host_pub.read_text().split()[1] in recorded
