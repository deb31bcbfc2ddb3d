"""For one node of the failed-barrier test: torch's init_process_group returns, and 1 s later
(the peer has finished its own init and waits in the plugin's barrier) the process is gone,
as a rank killed there would be. Patched on the first import after torch.distributed is loaded,
so the plugin's own ``import torch`` still comes after its environment is set."""

import builtins
import os
import sys
import time
from collections.abc import Callable
from typing import Any

_import = builtins.__import__
PATCHED = "_skyinfra_test_gone_after_init"


def _gone_after(real: Callable[..., Any]) -> Callable[..., Any]:
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        time.sleep(1)
        os._exit(9)

    setattr(init_process_group, PATCHED, True)
    return init_process_group


def _patching_import(name: str, *args: Any, **kwargs: Any) -> Any:
    module = _import(name, *args, **kwargs)
    dist = sys.modules.get("torch.distributed")
    real = getattr(dist, "init_process_group", None)
    if dist is not None and real is not None and not getattr(real, PATCHED, False):
        dist.init_process_group = _gone_after(real)  # type: ignore[attr-defined]
    return module


builtins.__import__ = _patching_import
