"""For one node of the init-barrier test: torch's init_process_group returns 3 s late there (a
rank slow to finish connecting to its peers) and then writes the time to $INIT_RETURNED_FILE.
Patched on the first import after torch.distributed is loaded, so the plugin's own
``import torch`` still comes after its environment is set."""

import builtins
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_import = builtins.__import__
SLOWED = "_skyinfra_test_slowed"


def _slow(real: Callable[..., Any]) -> Callable[..., Any]:
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        time.sleep(3)
        Path(os.environ["INIT_RETURNED_FILE"]).write_text(repr(time.time()))
        return result

    setattr(init_process_group, SLOWED, True)
    return init_process_group


def _patching_import(name: str, *args: Any, **kwargs: Any) -> Any:
    module = _import(name, *args, **kwargs)
    dist = sys.modules.get("torch.distributed")
    real = getattr(dist, "init_process_group", None)
    if dist is not None and real is not None and not getattr(real, SLOWED, False):
        dist.init_process_group = _slow(real)  # type: ignore[attr-defined]
    return module


builtins.__import__ = _patching_import
