"""A live progress line: a bar redrawn in place on a terminal, plain lines in a log.

On a terminal every update redraws one line (``\\r``) with a bar of the done fraction; off a
terminal (a CI log, a pipe) a line is written only when its text changes or ``every_s``
seconds passed since the last one, so a log stays short and still shows that time passes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

Echo = Callable[[str], None]
BAR_WIDTH = 20


def bar(done: int, total: int, width: int = BAR_WIDTH) -> str:
    """``[#####...............]`` for ``done`` of ``total``."""
    filled = 0 if total <= 0 else min(width, round(width * done / total))
    return "[" + "#" * filled + "." * (width - filled) + "]"


class ProgressLine:
    def __init__(
        self,
        echo: Echo,
        *,
        stream: TextIO | None = None,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``stream``: the terminal to redraw on; None: plain lines through ``echo`` (also
        what a stream that is not a terminal gets)."""
        self._echo = echo
        self._tty = stream if stream is not None and stream.isatty() else None
        self._every_s = every_s
        self._clock = clock
        self._last: tuple[str, float] | None = None
        self._width = 0

    @property
    def on_terminal(self) -> bool:
        return self._tty is not None

    def update(self, text: str, done: int, total: int, *, key: str | None = None) -> None:
        """Show ``text``: on a terminal after a bar of ``done``/``total``, off it as it is (the
        caller puts the counts in). Off a terminal, ``key`` (default ``text``) is what counts
        as a change: leave counters that tick every second out of it."""
        if self._tty is not None:
            line = f"{bar(done, total)} {done}/{total} {text}"
            pad = max(0, self._width - len(line))
            self._tty.write("\r" + line + " " * pad)
            self._tty.flush()
            self._width = len(line)
            return
        key = text if key is None else key
        now = self._clock()
        if self._last is None or self._last[0] != key or now - self._last[1] >= self._every_s:
            self._echo(text)
            self._last = (key, now)

    def said_something(self) -> bool:
        return self._last is not None or self._width > 0

    def close(self) -> None:
        """End the redrawn line (a terminal's next output starts on a line of its own)."""
        if self._tty is not None and self._width:
            self._tty.write("\n")
            self._tty.flush()
            self._width = 0


def terminal_or_none(stream: TextIO = sys.stdout) -> TextIO | None:
    return stream if stream.isatty() else None
