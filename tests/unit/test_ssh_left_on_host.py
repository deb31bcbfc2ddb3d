"""`down`'s look at what is left of a node on a host (skyinfra/targets/ssh/hosts.py,
left_on_host): a process that ends between the listing of /proc and the read of its command
line is gone, not something left. The script runs against a /proc of the test's own (a tmpfs
in a mount namespace) with one entry whose cmdline has already vanished: it says nothing, where
the shell's "cannot open" once came out with the output and failed `down`."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from skyinfra.targets.ssh.hosts import left_on_host


def test_a_process_gone_while_listed_is_not_reported() -> None:
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode
    ):
        pytest.skip("needs unshare --mount (root)")
    fake_proc = (
        "mount -t tmpfs none /proc && mkdir /proc/4242 && ln -s /tmp /proc/4242/cwd && "
        + left_on_host("/nonexistent/.skyinfra/lab/node-0")
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", fake_proc],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("", "")
