"""What a plugin is: set-up before the user's code, teardown after, in a fixed order."""

from __future__ import annotations

import os
from typing import Protocol

from skyinfra_runtime.errors import PluginError
from skyinfra_runtime.info import InstanceInfo
from skyinfra_runtime.topology import Topology

INIT_TIMEOUT_ENV = "SKYINFRA_INIT_TIMEOUT"
# Nodes finish booting at different times (cloud-init installs CUDA wheels): wait long by
# default for every peer to reach the rendezvous; tests pass a short timeout.
DEFAULT_INIT_TIMEOUT = 600.0


class Plugin(Protocol):
    name: str

    def setup(self, info: InstanceInfo, topology: Topology, script: bool = False) -> None:
        """``script``: the entry is a script or ``-m`` module, which runs as ``__main__``
        and may initialise the framework itself (as under torchrun)."""

    def explain(self, exc: BaseException) -> str | None:
        """A line on how to fix it when the user's code failed because of this plugin's
        set-up (e.g. initialising twice), else None."""

    def teardown(self, failed: bool = False) -> None: ...


def init_timeout(option: float | str | None) -> float:
    """Seconds to wait for peers: the plugin option, else SKYINFRA_INIT_TIMEOUT, else 600."""
    raw: float | str | None = option if option is not None else os.environ.get(INIT_TIMEOUT_ENV)
    if raw is None or raw == "":
        return DEFAULT_INIT_TIMEOUT
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise PluginError(
            f"init_timeout {raw!r} is not a number of seconds (option or {INIT_TIMEOUT_ENV})"
        ) from None
    if value <= 0:
        raise PluginError(f"init_timeout must be > 0 seconds, got {value}")
    return value
