"""Where the time of `up` goes: each stage printed as it finishes, with its duration, and the
whole timeline written to the workspace (``timeline.json``).

A :class:`Timeline` is active while `up` runs (:func:`active`); code deeper down (a target's
preflight, its wheel build) marks its own stages with :func:`stage` or :func:`lap` without a
timeline being passed to it, and is untimed outside `up`. Terraform's per-resource progress
comes from its JSON events (:meth:`Timeline.on_event`): the time between a resource's
``apply_start`` and ``apply_complete``, which for a local node is its whole bootstrap.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

Echo = Callable[[str], None]
TIMELINE_FILE = "timeline.json"

_ACTIVE: contextvars.ContextVar[Timeline | None] = contextvars.ContextVar(
    "skyinfra_timeline", default=None
)


@dataclass
class Stage:
    name: str
    # Seconds from the timeline's start to the stage's start, and its length.
    start_s: float
    seconds: float
    # Nesting depth: a stage inside another (the wheel build inside "prepare") is 1.
    depth: int = 0
    kind: str = "stage"  # or "resource": one Terraform resource's apply

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "depth": self.depth,
            "start_s": round(self.start_s, 3),
            "seconds": round(self.seconds, 3),
        }


@dataclass
class Timeline:
    """Stages of one command, in the order they finished."""

    command: str
    echo: Echo
    clock: Callable[[], float] = time.monotonic
    stages: list[Stage] = field(default_factory=list)
    started_at: str = field(
        default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    )
    _t0: float = field(default=0.0, init=False)
    _t0_wall: float = field(default=0.0, init=False)
    _depth: int = field(default=0, init=False)
    # Where the next lap starts: the last lap's or stage's start or end.
    _last: float = field(default=0.0, init=False)
    _applying: dict[str, float] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._t0 = self.clock()
        self._t0_wall = time.time()

    def elapsed(self) -> float:
        return self.clock() - self._t0

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block; print ``name: N.N s`` when it ends (also when it fails)."""
        start = self._last = self.elapsed()
        depth = self._depth
        self._depth += 1
        try:
            yield
        finally:
            self._depth = depth
            self._record(name, start, depth)

    def lap(self, name: str) -> None:
        """A stage that ran from the last lap (or the enclosing stage's start) until now:
        one line after each step, where wrapping the step in a block would not fit."""
        self._record(name, self._last, self._depth)

    def _record(self, name: str, start: float, depth: int) -> None:
        self._last = now = self.elapsed()
        self.stages.append(Stage(name, start, now - start, depth))
        self.echo(f"[skyinfra] {'  ' * depth}{name}: {now - start:.1f} s")

    def on_event(self, event: dict[str, Any]) -> None:
        """Time each resource's apply from Terraform's ``apply_start``/``apply_complete``
        events (their ``@timestamp``s; the arrival time when a timestamp is missing)."""
        kind = event.get("type")
        if kind not in ("apply_start", "apply_complete", "apply_errored"):
            return
        hook = event.get("hook") or {}
        address = str((hook.get("resource") or {}).get("addr", ""))
        action = str(hook.get("action", ""))
        if not address:
            return
        wall = _timestamp(event)
        at = wall - self._t0_wall if wall is not None else self.elapsed()
        key = f"{action} {address}"
        if kind == "apply_start":
            self._applying[key] = at
            return
        began = self._applying.pop(key, None)
        if began is None:
            return
        outcome = "" if kind == "apply_complete" else " (failed)"
        self.stages.append(
            Stage(f"{action} {address}{outcome}", began, at - began, self._depth, "resource")
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "started_at": self.started_at,
            "total_s": round(self.elapsed(), 3),
            "stages": [s.to_dict() for s in self.stages],
        }

    def resources_summary(self) -> list[str]:
        """One line per timed resource, slowest first (what `up` prints after apply)."""
        timed = sorted((s for s in self.stages if s.kind == "resource"), key=lambda s: -s.seconds)
        return [f"{s.name}: {s.seconds:.1f} s" for s in timed]


def _timestamp(event: dict[str, Any]) -> float | None:
    """Terraform's ``@timestamp`` as seconds since the epoch (microseconds in its JSON UI)."""
    raw = event.get("@timestamp")
    if not isinstance(raw, str):
        return None
    try:
        return dt.datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@contextlib.contextmanager
def active(timeline: Timeline) -> Iterator[Timeline]:
    """Make ``timeline`` the one :func:`stage` records into, for the block."""
    token = _ACTIVE.set(timeline)
    try:
        yield timeline
    finally:
        _ACTIVE.reset(token)


def lap(name: str) -> None:
    """A lap of the active timeline (see :meth:`Timeline.lap`); nothing when none is active."""
    timeline = _ACTIVE.get()
    if timeline is not None:
        timeline.lap(name)


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """A stage of the active timeline; nothing when none is active."""
    timeline = _ACTIVE.get()
    if timeline is None:
        yield
        return
    with timeline.stage(name):
        yield
