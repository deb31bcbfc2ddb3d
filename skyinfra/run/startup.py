"""How long the head (node 0) took from `run`'s start to its entrypoint's start, and where
that time went: waiting for ready nodes, copying the code, launching the runtime, and each
plugin's set-up (the runtime logs ``skyinfra-runtime: plugin NAME ready in N.Ns`` per worker,
before the entrypoint is called).

The entrypoint's start is when the head's last plugin line arrived; the launch is what is
left between the start of the nodes and the first plugin's set-up. A run without plugins logs
nothing before the entrypoint, so it shows copy and wait only.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# worker.py's log line (runtime/src/skyinfra_runtime/worker.py, run_worker).
PLUGIN_READY = re.compile(r"^skyinfra-runtime: plugin (\S+) ready in ([0-9.]+)s$")


@dataclass
class HeadStartup:
    clock: Callable[[], float] = time.monotonic
    began: float = 0.0
    marks: dict[str, float] = field(default_factory=dict)
    # Each plugin's first ready line on the head: (arrival time, set-up seconds it reports).
    plugins: dict[str, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.began = self.clock()

    def mark(self, name: str) -> None:
        """``ready`` (after the readiness wait), ``copied``, ``started``: when each ended."""
        self.marks[name] = self.clock()

    def on_head_line(self, line: str) -> None:
        match = PLUGIN_READY.match(line.strip())
        if match and match.group(1) not in self.plugins:
            self.plugins[match.group(1)] = (self.clock(), float(match.group(2)))

    def summary(self) -> str | None:
        """One line for the operator; None before the nodes were started."""
        ready, copied = self.marks.get("ready"), self.marks.get("copied")
        if ready is None or copied is None:
            return None
        parts = [f"ready check {ready - self.began:.1f} s", f"copy {copied - ready:.1f} s"]
        if not self.plugins:
            return "[skyinfra] node-0: " + ", ".join(parts) + " (no plugin set-up logged)"
        entry = max(arrival for arrival, _ in self.plugins.values())
        setup = sum(seconds for _, seconds in self.plugins.values())
        parts.append(f"launch {max(0.0, entry - copied - setup):.1f} s")
        parts += [f"plugin {name} {seconds:.1f} s" for name, (_, seconds) in self.plugins.items()]
        return (
            f"[skyinfra] node-0 reached its entrypoint {entry - self.began:.1f} s after `run` "
            "began: " + ", ".join(parts)
        )
