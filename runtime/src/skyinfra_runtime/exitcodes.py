"""Exit codes of ``skyinfra-runtime launch`` (the operator reads them per node)."""

from __future__ import annotations

import signal

OK = 0
USER_FAILED = 1  # the user's code raised; its traceback was printed
USAGE = 2  # bad command line or entrypoint
SETUP_FAILED = 3  # topology or plugin set-up failed
INTERRUPTED = 130  # SIGINT/SIGTERM
# 128 + N: a worker was killed by signal N while the entry ran (137: SIGKILL, e.g. the
# kernel's OOM killer), as a shell reports it; not an exception of the user's code.
SIGNALLED = 128

# What each code means, in words (the operator prints these beside a node's code).
MEANINGS: dict[int, str] = {
    OK: "ok",
    USER_FAILED: "user code raised",
    USAGE: "bad usage or entrypoint",
    SETUP_FAILED: "topology or plugin set-up failed",
    INTERRUPTED: "interrupted",
}


def describe(code: int | None) -> str:
    """``code``'s meaning; a negative code is a signal (as subprocess reports it)."""
    if code is None:
        return "no exit code (the node did not report one)"
    if code < 0:
        return f"killed by signal {signal_name(-code)}"
    if code in MEANINGS:
        return MEANINGS[code]
    if SIGNALLED < code < SIGNALLED + 65:
        return f"a worker was killed by signal {signal_name(code - SIGNALLED)}"
    return "unknown exit code"


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; the number itself when it names no signal."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)
