"""Exit codes of ``skyinfra-runtime launch`` (the operator reads them per node)."""

from __future__ import annotations

OK = 0
USER_FAILED = 1  # the user's code raised; its traceback was printed
USAGE = 2  # bad command line or entrypoint
SETUP_FAILED = 3  # topology or plugin set-up failed
INTERRUPTED = 130  # SIGINT/SIGTERM

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
        return f"killed by signal {-code}"
    return MEANINGS.get(code, "unknown exit code")
