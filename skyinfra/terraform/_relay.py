"""Child-process entry point for an external binary: ``python -m skyinfra.terraform._relay
BINARY ARGS...`` runs ``BINARY ARGS...`` and relays its output line by line, as
``_embedded.py`` does for the embedded Terraform, with the same guarantees:

- SIGINT and SIGTERM become one SIGINT to the binary (Terraform's graceful stop); a second is
  ignored, never Terraform's "exit immediately". SIGHUP is ignored.
- A broken stdout (the operator died) never reaches the binary: Terraform, a Go program,
  would die of SIGPIPE at its next line of output, half-way through an apply. The rest of its
  output goes to ``DETACHED_LOG`` in the working directory instead.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from typing import Any

from skyinfra.terraform._embedded import _Relay


def main(argv: list[str]) -> int:
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    out = _Relay(sys.stdout)
    err = _Relay(sys.stderr)
    assert proc.stdout is not None and proc.stderr is not None
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    for line in proc.stdout:
        out.write(line)
    proc.wait()
    reader.join()
    if errors and errors[0]:
        err.write(errors[0])
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
