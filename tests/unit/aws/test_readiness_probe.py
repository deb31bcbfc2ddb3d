"""The readiness protocol without sshd: the pure parser of the probe's output, and the probe
script itself run by a local shell against marker files under tmp.

The same protocol over a real SSH connection is tested in test_aws_readiness.py.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from skyinfra.transport.base import Readiness
from skyinfra.transport.bootstrap import (
    DETAIL_CHARS,
    parse_phase_line,
    parse_probe_output,
    probe_script,
)

READY = "/var/lib/skyinfra/ready"
LOG = "/var/log/cloud-init-output.log"
TAIL = "ssh -i key ubuntu@203.0.113.9 sudo tail -n 50 /var/log/cloud-init-output.log"


def parse(output: str) -> Readiness:
    return parse_probe_output(output, ready_marker=READY, bootstrap_log=LOG, tail_command=TAIL)


def test_ready() -> None:
    assert parse("ready\n") == Readiness("ready")


def test_failed_with_detail_names_where_to_look() -> None:
    found = parse("failed\nprovision.sh line 9: curl --fail ...\n  (exit 22)\n")
    assert found.state == "failed"
    # The detail on one line, whitespace folded.
    assert found.detail == (
        f"bootstrap failed: provision.sh line 9: curl --fail ... (exit 22); see {LOG} on the "
        f"node ({TAIL})"
    )


def test_failed_without_detail_and_long_detail_cut() -> None:
    assert parse("failed\n").detail.startswith("bootstrap failed: no detail; see ")
    long = parse("failed\n" + "x" * (DETAIL_CHARS * 2))
    assert f"bootstrap failed: {'x' * DETAIL_CHARS}; see" in long.detail


def test_cloud_init_error() -> None:
    found = parse("cloud-init-error\nstatus: error\n")
    assert found.state == "failed"
    assert found.detail.startswith("cloud-init reported an error (status: error); see ")


def test_cloud_init_done_without_the_marker() -> None:
    found = parse("cloud-init-done\nstatus: done\n")
    assert found.state == "failed"
    assert f"cloud-init finished but the bootstrap left no {READY} (status: done)" in found.detail
    assert TAIL in found.detail


@pytest.mark.parametrize("output", ["pending\n", "", "something else\n"])
def test_pending_and_unknown_output(output: str) -> None:
    found = parse(output)
    assert found.state == "pending"
    assert (
        found.detail == f"bootstrap still running (no {READY} yet; progress in {LOG} on the node)"
    )


def run_probe(tmp_path: Path, cloud_init_answer: str | None) -> Readiness:
    """Run the probe script in a local shell with its markers under tmp_path."""
    state = tmp_path / "state"
    status = None
    if cloud_init_answer is not None:
        fake = tmp_path / "cloud-init"
        fake.write_text(f"#!/bin/sh\necho '{cloud_init_answer}'\n")
        fake.chmod(0o755)
        status = f"{fake} status"
    script = probe_script(str(state / "ready"), str(state / "failed"), status)
    output = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout
    return parse_probe_output(
        output, ready_marker=str(state / "ready"), bootstrap_log=LOG, tail_command=TAIL
    )


def test_probe_script_reads_the_markers_then_cloud_init(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    assert run_probe(tmp_path, None).state == "pending"
    assert run_probe(tmp_path, "status: running").state == "pending"
    assert "cloud-init reported an error" in run_probe(tmp_path, "status: error").detail
    assert "cloud-init finished but" in run_probe(tmp_path, "status: done").detail
    (tmp_path / "state" / "failed").write_text("provision.sh line 3: false (exit 1)\n")
    failed = run_probe(tmp_path, "status: done")
    assert failed.state == "failed" and "provision.sh line 3: false (exit 1)" in failed.detail
    (tmp_path / "state" / "ready").write_text("2026-11-23T10:00:00Z\n")
    assert run_probe(tmp_path, "status: error").ready


def test_probe_reports_the_bootstrap_phase_and_its_time(tmp_path: Path) -> None:
    """The phases file provision.sh and bootstrap-node.sh append to: the last phase and how
    long it and the whole bootstrap have run show in a pending node's readiness."""
    state = tmp_path / "state"
    state.mkdir()
    now = int(time.time())
    (state / "phases").write_text(f"packages {now - 100}\nuv {now - 90}\njax {now - 30}\n")
    pending = run_probe(tmp_path, None)
    assert pending.state == "pending" and pending.phase == "jax"
    assert pending.phase_s is not None and 30 <= pending.phase_s <= 40
    assert pending.bootstrap_s is not None and 100 <= pending.bootstrap_s <= 110
    assert "bootstrap at phase jax for 3" in pending.detail
    with (state / "phases").open("a") as phases:
        phases.write(f"ready {now - 5}\n")
    (state / "ready").write_text("2026-11-23T10:00:00Z\n")
    ready = run_probe(tmp_path, None)
    assert ready.ready and ready.phase == "ready" and ready.bootstrap_s == 95.0


def test_a_torn_phase_line_reads_as_no_phase() -> None:
    assert parse_phase_line("phase jax 12") is None
    assert parse_phase_line("phase jax x 1 2") is None
    assert parse("pending\nphase jax") == parse("pending")
