"""The loopback guard trips: in this process, in a child Python, in Terraform's Go code, and
it fails a test that swallowed the refusal. Every destination here is refused before a packet
leaves (TEST-NET addresses from RFC 5737 and a reserved name, never dialled)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback_guard import LOG_ENV, NonLoopbackConnectionError
from pytest_loopback_guard import guard_log

from skyinfra.errors import TerraformError
from skyinfra.terraform import MIRROR_ENV, EmbeddedTerraform

OUTSIDE = "192.0.2.1"  # TEST-NET-1


@pytest.fixture
def refusals() -> Iterator[list[str]]:
    """What the guard records during the test; taken back out of the log afterwards, so the
    suite's autouse check does not fail these tests for doing what they test."""
    log = guard_log()
    start = log.stat().st_size
    seen: list[str] = []
    yield seen
    with log.open("rb") as f:
        f.seek(start)
        seen.extend(f.read().decode().splitlines())
    with log.open("r+b") as f:
        f.truncate(start)


def logged(refusals: list[str]) -> str:
    with guard_log().open() as f:
        return f.read()


def test_connection_beyond_loopback_is_refused_and_named(refusals: list[str]) -> None:
    with pytest.raises(NonLoopbackConnectionError, match=re.escape(f"connection to {OUTSIDE}:9")):
        socket.create_connection((OUTSIDE, 9), timeout=1)
    with pytest.raises(
        NonLoopbackConnectionError, match=re.escape("name lookup of 'example.invalid'")
    ):
        socket.getaddrinfo("example.invalid", 443)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with (
        udp,
        pytest.raises(NonLoopbackConnectionError, match=re.escape(f"datagram to {OUTSIDE}:53")),
    ):
        udp.sendto(b"x", (OUTSIDE, 53))
    assert f"connection to {OUTSIDE}:9" in logged(refusals)


def test_loopback_still_works() -> None:
    with socket.create_server(("127.0.0.3", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.3", port), timeout=5):
            conn, _ = server.accept()
            conn.close()
    assert socket.getaddrinfo("localhost", 80)


def test_a_child_python_is_guarded(refusals: list[str]) -> None:
    code = f"import socket; socket.create_connection(({OUTSIDE!r}, 22), timeout=1)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert f"loopback guard: refused connection to {OUTSIDE}:22" in proc.stderr
    assert f"connection to {OUTSIDE}:22" in logged(refusals)


def test_terraform_go_code_goes_through_the_refusing_proxy(
    tmp_path: Path, refusals: list[str]
) -> None:
    """Without the provider mirror, `terraform init` asks registry.terraform.io: the request
    reaches the guard's proxy on loopback, which records it and refuses."""
    (tmp_path / "main.tf").write_text(
        'terraform {\n  required_providers {\n    random = { source = "hashicorp/random" }\n'
        "  }\n}\n"
    )
    env = {k: v for k, v in os.environ.items() if k != MIRROR_ENV}
    env["SKYINFRA_TF_PLUGIN_CACHE"] = str(tmp_path / "plugins")
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        with pytest.raises(TerraformError, match=re.escape("registry.terraform.io")):
            EmbeddedTerraform(tmp_path).init()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert "CONNECT registry.terraform.io:443" in logged(refusals)


def test_a_test_that_swallows_the_refusal_still_fails(tmp_path: Path) -> None:
    """Product code catches OSError (an SSH node reads as unreachable); the guard's autouse
    check fails the test anyway, naming the address."""
    test_file = tmp_path / "test_swallow.py"
    test_file.write_text(
        "import socket\n\n\n"
        "def test_swallows():\n"
        "    try:\n"
        f"        socket.create_connection(({OUTSIDE!r}, 22), timeout=1)\n"
        "    except OSError:\n"
        "        pass\n"
    )
    env = {**os.environ, LOG_ENV: str(tmp_path / "inner-guard.log")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "pytest_loopback_guard",
            "-p",
            "no:cacheprovider",
            "-c",
            os.devnull,
            "--rootdir",
            str(tmp_path),
            str(test_file),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "tried to reach beyond loopback" in proc.stdout
    assert f"connection to {OUTSIDE}:22" in proc.stdout
