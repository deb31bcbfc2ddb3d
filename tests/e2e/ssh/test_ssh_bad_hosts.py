"""The ssh target's refusals that only a host can tell (issue 45's bad input): a key the host
refuses, a host whose sshd does not answer, a Python older than 3.10. Each `up` stops before
Terraform, names the host and what to do, and writes nothing: no workspace here, nothing on
any host. And `plan`: plan.md shows the hosts, and planning puts nothing on them."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyinfra import exitcodes
from tests.conftest import skyinfra_argv
from tests.support.local_jobs import module_env
from tests.support.ssh_hosts import Hosts, stand_in_hosts

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    with stand_in_hosts(2) as made:
        yield made


@pytest.fixture
def env(tmp_path_factory: pytest.TempPathFactory, tf_plugin_cache: Path) -> dict[str, str]:
    made = module_env(tmp_path_factory, tf_plugin_cache, "ssh-bad")
    made["HOME"] = str(tmp_path_factory.mktemp("operator-home"))
    return made


def project(tmp_path: Path, hosts: Hosts, extra: str = "", key: Path | None = None) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    addresses = ", ".join(f'"{a}"' for a in hosts.addresses)
    (root / "skyinfra.toml").write_text(
        f'name = "lab"\nprovider = "ssh"\nnodes = 2\n\n[ssh]\nhosts = [{addresses}]\n'
        f'user = "{hosts.user}"\nkey = "{key or hosts.key}"\n{extra}'
    )
    return root


def up(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*skyinfra_argv(), "up", "--yes"], cwd=root, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def nothing_written(root: Path, hosts: Hosts) -> None:
    assert not (root / ".skyinfra").exists()
    for host in hosts.hosts:
        assert hosts.home_listing(host) == []


def test_a_key_the_host_refuses(tmp_path: Path, hosts: Hosts, env: dict[str, str]) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    root = project(tmp_path, hosts, key=other)
    done = up(root, env)
    assert done.returncode == exitcodes.USAGE, done.stdout + done.stderr
    assert "'ssh.key'" in done.stderr and f"a key that host {hosts.addresses[0]}" in done.stderr
    assert "authorized_keys" in done.stderr
    nothing_written(root, hosts)


def test_a_host_that_does_not_answer(tmp_path: Path, hosts: Hosts, env: dict[str, str]) -> None:
    root = project(tmp_path, hosts)
    hosts.stop_sshd(hosts.hosts[1])
    try:
        done = up(root, env)
    finally:
        hosts.start_sshd(hosts.hosts[1])
    assert done.returncode == exitcodes.ERROR, done.stdout + done.stderr
    assert f"host {hosts.addresses[1]} (ssh.hosts[1]): cannot log in" in done.stderr
    assert "check that the host is up" in done.stderr
    nothing_written(root, hosts)


def test_a_python_older_than_3_10(tmp_path: Path, hosts: Hosts, env: dict[str, str]) -> None:
    old = hosts.base / "python3.8"  # where the login user can run it
    old.write_text("#!/bin/sh\necho 3.8\n")
    old.chmod(0o755)
    root = project(tmp_path, hosts, extra=f'python = "{old}"\n')
    done = up(root, env)
    assert done.returncode == exitcodes.USAGE, done.stdout + done.stderr
    assert "'ssh.python'" in done.stderr and "Python 3.8 there" in done.stderr
    assert f"3.10 or newer on host {hosts.addresses[0]}" in done.stderr
    nothing_written(root, hosts)


def test_plan_shows_the_hosts_and_puts_nothing_on_them(
    tmp_path: Path, hosts: Hosts, env: dict[str, str]
) -> None:
    root = project(tmp_path, hosts)
    done = subprocess.run(
        [*skyinfra_argv(), "plan"], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == exitcodes.PLAN_CHANGES, done.stdout + done.stderr
    for host in hosts.addresses:
        assert f"host {host}: host key ssh-ed25519 SHA256:" in done.stdout, done.stdout
    plan = (root / ".skyinfra" / "clusters" / "lab" / "plan" / "plan.md").read_text()
    assert "| nodes x type | - | 2 x SSH host |" in plan
    for i, host in enumerate(hosts.hosts):
        assert f'host            = "{host.address}"' in plan
        assert f'node_dir        = "{host.home}/.skyinfra/lab/node-{i}"' in plan
    for host in hosts.hosts:
        assert hosts.home_listing(host) == []


def test_a_key_the_users_own_known_hosts_does_not_match(
    tmp_path: Path, hosts: Hosts, env: dict[str, str]
) -> None:
    """The user's ~/.ssh/known_hosts is honoured: a host whose key differs from it is refused
    at first contact, named, and nothing is written."""
    wrong = tmp_path / "wrong_host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    ssh_dir = Path(env["HOME"]) / ".ssh"
    ssh_dir.mkdir()
    kind, blob = Path(f"{wrong}.pub").read_text().split()[:2]
    (ssh_dir / "known_hosts").write_text(f"{hosts.addresses[1]} {kind} {blob}\n")
    root = project(tmp_path, hosts)
    done = up(root, env)
    assert done.returncode == exitcodes.ERROR, done.stdout + done.stderr
    assert f"host {hosts.addresses[1]} (ssh.hosts[1]) presented another host key" in done.stderr
    assert "your ~/.ssh/known_hosts holds for it" in done.stderr
    nothing_written(root, hosts)


def test_a_host_failing_the_node_check_and_down_after_it(
    tmp_path: Path, hosts: Hosts, env: dict[str, str]
) -> None:
    """The bootstrap's node check runs on each host: a plugin whose framework the host's venv
    lacks (torch: no python_packages install it) fails the enrolment, naming the check and
    leaving nothing on the hosts; `down` then empties Terraform's state (tainted nodes)."""
    root = project(tmp_path, hosts)
    spec = root / "skyinfra.toml"
    spec.write_text(spec.read_text().replace("nodes = 2\n", 'nodes = 2\nplugins = ["torch"]\n'))
    done = up(root, env)
    assert done.returncode == exitcodes.ERROR, done.stdout + done.stderr
    assert "node check failed" in done.stdout + done.stderr, done.stdout + done.stderr
    for host in hosts.hosts:  # each failed enrolment took off what it had put there
        assert f"host {host.address}: enrolment failed: the bootstrap failed" in done.stdout
        assert hosts.home_listing(host) == []
    down = subprocess.run(
        [*skyinfra_argv(), "down", "--yes", "--cluster", "lab"], cwd=root, env=env,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert down.returncode == 0, down.stdout + down.stderr
    for host in hosts.hosts:
        assert hosts.home_listing(host) == []
