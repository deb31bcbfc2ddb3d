"""Figure 8's second part: the same 200 MB project copied by the AWS target's transport
(SshTransport: SFTP and a Python on the node) to an sshd on 127.0.0.1 with throwaway keys,
one node, in-process: a full copy against a re-run's after a one-line change. The time is
`copy_tree`'s alone (the scan is figure 8's first part); the network is loopback, so a real
one makes the full copy slower still and the re-run hardly so."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import stats

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sshd(base: Path) -> tuple[subprocess.Popen[str], int, Path]:
    for name in ("host", "user"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / name)], check=True
        )
    (base / "authorized_keys").write_text((base / "user.pub").read_text())
    port = _free_port()
    (base / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {base / 'host'}\n"
        f"AuthorizedKeysFile {base / 'authorized_keys'}\nPidFile {base}/sshd.pid\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(base / "sshd_config")], stderr=subprocess.DEVNULL, text=True
    )
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port, base / "user"
        except OSError:
            time.sleep(0.1)
    proc.terminate()
    raise RuntimeError("sshd did not start")


def ssh_copy(reps: int, data_files: int, file_mb: int) -> dict[str, Any]:
    if not os.access(SSHD, os.X_OK):
        return {"skipped": f"no sshd at {SSHD}"}
    from skyinfra.run.ignore import make_ignore, read_ignore_patterns
    from skyinfra.transport.ssh import SshKeys, SshTarget, SshTransport
    from skyinfra.transport.tree import scan

    with tempfile.TemporaryDirectory(prefix="skyinfra-bench-ssh-") as tmp:
        base = Path(tmp)
        proc, port, key = _sshd(base)
        root = base / "node"
        (root / "venv" / "bin").mkdir(parents=True)
        (root / "venv" / "bin" / "python").symlink_to(sys.executable)
        src = base / "project"
        (src / "data").mkdir(parents=True)
        for i in range(data_files):
            (src / "data" / f"part-{i:02d}.bin").write_bytes(os.urandom(file_mb * 1024 * 1024))
        (src / "config.py").write_text("LR = 0.1\n")
        ignore = make_ignore(read_ignore_patterns(src))
        target = SshTarget("127.0.0.1", user=getpass.getuser(), port=port)
        ssh = SshTransport({0: target}, keys=SshKeys(key, base / "kh"), node_root=str(root))
        n = 0

        def copy() -> tuple[float, int]:
            nonlocal n
            wanted = scan(src, ignore)
            started = time.perf_counter()
            n += 1
            done = ssh.copy_tree(0, src, wanted, f"20261125-000000-{n:06d}-0000")
            return time.perf_counter() - started, done.sent_bytes

        try:
            full = []
            for _ in range(reps):
                shutil.rmtree(root / "runs", ignore_errors=True)
                full.append(copy())
            again = []
            for rep in range(reps):
                with (src / "config.py").open("a") as f:
                    f.write(f"EPOCHS = {rep + 2}\n")
                again.append(copy())
        finally:
            ssh.close()
            proc.terminate()
            proc.wait(10)
    return {
        "full_copy_s": stats([t for t, _ in full]),
        "full_copy_sent_bytes": max(b for _, b in full),
        "rerun_s": stats([t for t, _ in again]),
        "rerun_sent_bytes": max(b for _, b in again),
    }
