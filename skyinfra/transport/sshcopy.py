"""`run`'s incremental copy over SSH: nodesync.py's source runs on the node's own Python
(the source and the request, the wanted entries, as JSON on stdin), the files the node lacks
travel over SFTP as new files, then ``finish`` records the node's manifest. Three round trips
whatever the project's size; the bytes that travel are only the new and changed files'."""

from __future__ import annotations

import json
import posixpath
import shlex
import time
from pathlib import Path
from typing import Any, Protocol

import paramiko

from skyinfra.errors import TransportError
from skyinfra.transport import nodesync, tree
from skyinfra.transport.nodesync import Entries
from skyinfra.transport.tree import CopyStats


class SshTransport(Protocol):
    """What this needs of ssh.SshTransport (which imports this module)."""

    def node_root(self, node: int) -> str: ...
    def check_call(
        self, node: int, script: str, *, timeout: float | None = None, stdin: bytes = b""
    ) -> str: ...
    def open_sftp(self, node: int) -> paramiko.SFTPClient: ...


# Runs nodesync.py's source, sent with the request on stdin (a short command line: it is what
# an error shows), in the node's venv Python (a node always has one), else python3.
_BOOTSTRAP = (
    "import json, sys; r = json.load(sys.stdin); g = {'__name__': 'nodesync'}; "
    "exec(compile(r.pop('source'), 'nodesync.py', 'exec'), g); g['serve'](r)"
)


def _nodesync(ssh: SshTransport, node: int, step: str, request: dict[str, Any]) -> Any:
    python = shlex.quote(posixpath.join(request["root"], "venv", "bin", "python"))
    command = f'PY={python}; [ -x "$PY" ] || PY=python3; exec "$PY" -c {shlex.quote(_BOOTSTRAP)}'
    source = Path(nodesync.__file__).read_text(encoding="utf-8")
    payload = json.dumps({**request, "step": step, "source": source}).encode()
    output = ssh.check_call(node, command, stdin=payload)
    last = output.strip().splitlines()[-1] if output.strip() else ""
    try:
        return json.loads(last)
    except ValueError as err:
        raise TransportError(
            f"node {node}: the copy's {step} step answered no JSON: {output[-500:]!r}"
        ) from err


def copy_tree(ssh: SshTransport, node: int, src: Path, wanted: Entries, run_id: str) -> CopyStats:
    started = time.monotonic()
    root = ssh.node_root(node)
    work = nodesync.run_paths(root, run_id)[1]
    src = src.resolve()
    request: dict[str, Any] = {"root": root, "run_id": run_id, "wanted": wanted}
    prepared = _nodesync(ssh, node, "prepare", request)
    sent: dict[str, str] = {}
    sent_bytes = 0
    sftp = ssh.open_sftp(node)
    try:
        for rel in prepared["send"]:
            remote = posixpath.join(work, rel)
            with sftp.open(remote, "wxb") as out:  # x: a new file, never one another run holds
                out.set_pipelined(True)
                size, sent[rel] = tree.stream(src / rel, out.write)
            sent_bytes += size
            sftp.chmod(remote, wanted[rel]["mode"])
            mtime = wanted[rel]["mtime_ns"] / 1e9
            sftp.utime(remote, (mtime, mtime))
    except OSError as err:
        raise TransportError(f"node {node}: copying {src} to {work} failed: {err}") from err
    finally:
        sftp.close()
    _nodesync(ssh, node, "finish", {**request, "sent": sent})
    return tree.stats(prepared, sent_bytes, time.monotonic() - started)
