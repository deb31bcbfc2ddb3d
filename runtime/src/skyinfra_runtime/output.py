"""Output control: ``stdout(only=...)``, ``stderr(only=...)`` and ``silent``.

Used as decorators (``@stdout(only="head")`` directly on the function that prints) or as
context managers (``with stdout(only="head"): ...``). On the processes that are not selected
the stream is silenced at the file-descriptor level as well as ``sys.stdout``/``sys.stderr``,
so output written by C extensions (XLA, NCCL, gloo) or child processes is suppressed too.
The decision is taken when the function is called (not when it is decorated), from
:func:`instance_info`, so it is right on every node.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from skyinfra_runtime.info import InstanceInfo, instance_info

F = TypeVar("F", bound=Callable[..., Any])
Selector = str | Callable[[InstanceInfo], bool]

_STREAMS = {"stdout": 1, "stderr": 2}


def _selected(only: Selector) -> bool:
    info = instance_info()
    if callable(only):
        return bool(only(info))
    if only == "head":
        return info.is_head
    if only == "all":
        return True
    raise ValueError(f"only={only!r} is not valid; expected 'head', 'all' or a predicate")


@contextlib.contextmanager
def _silenced(stream_name: str) -> Iterator[None]:
    fd = _STREAMS[stream_name]
    current = getattr(sys, stream_name)
    with contextlib.suppress(Exception):
        current.flush()
    saved_fd = None
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        try:
            saved_fd = os.dup(fd)
            os.dup2(devnull, fd)
        except OSError:
            saved_fd = None  # no real descriptor (e.g. under a test harness): Python level only
        with open(os.devnull, "w") as sink:
            setattr(sys, stream_name, sink)
            try:
                yield
            finally:
                setattr(sys, stream_name, current)
    finally:
        if saved_fd is not None:
            os.dup2(saved_fd, fd)
            os.close(saved_fd)
        os.close(devnull)


class _OutputGate:
    def __init__(self, streams: tuple[str, ...], only: Selector) -> None:
        if not callable(only) and only not in ("head", "all"):
            raise ValueError(f"only={only!r} is not valid; expected 'head', 'all' or a predicate")
        self._streams = streams
        self._only = only
        self._stack: list[contextlib.ExitStack] = []

    def __enter__(self) -> None:
        stack = contextlib.ExitStack()
        if not _selected(self._only):
            for name in self._streams:
                stack.enter_context(_silenced(name))
        self._stack.append(stack)

    def __exit__(self, *exc: object) -> None:
        self._stack.pop().close()

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def stdout(only: Selector = "head") -> _OutputGate:
    """Keep stdout only on the selected processes ('head', 'all' or a predicate on InstanceInfo)."""
    return _OutputGate(("stdout",), only)


def stderr(only: Selector = "head") -> _OutputGate:
    """Keep stderr only on the selected processes ('head', 'all' or a predicate on InstanceInfo)."""
    return _OutputGate(("stderr",), only)


def silent(fn: F) -> F:
    """Run ``fn`` with stdout and stderr silenced on every process."""
    return _OutputGate(("stdout", "stderr"), lambda _info: False)(fn)
