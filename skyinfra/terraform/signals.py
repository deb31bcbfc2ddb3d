"""The operator's signals while Terraform runs: Terraform is never killed half-way through
writing its state by what happens to the operator (a terminal's Ctrl-C or hang-up), and a
``finally`` block still runs on SIGTERM or SIGHUP."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from types import FrameType

# Signals that stop Terraform gracefully instead of ending the operator on the spot.
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt like SIGINT does, so that ``finally``
    blocks run (main thread only; elsewhere a no-op). While a Terraform command runs, the
    engine's own handlers take over (they stop Terraform gracefully first)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


def say(text: str) -> None:
    """A line on stderr, safe in a signal handler and when the terminal is gone."""
    with contextlib.suppress(OSError):
        os.write(2, text.encode())


@contextlib.contextmanager
def forwarding_signals(proc: subprocess.Popen[str]) -> Iterator[list[int]]:
    """While ``proc`` (Terraform) runs: SIGINT, SIGTERM and SIGHUP to the operator send one
    SIGINT to Terraform (its graceful stop; a second would make it exit at once) and the
    operator goes on waiting for it. Yields the signals received (main thread only)."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def forward(signum: int, frame: FrameType | None) -> None:
        if not received:
            say(
                f"[skyinfra] {signal.Signals(signum).name}: stopping Terraform gracefully; "
                f"waiting for it to save its state (pid {proc.pid})\n"
            )
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
        received.append(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
