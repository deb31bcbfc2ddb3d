"""For the tests that change what torch's init_process_group does on one node (a sitecustomize
on that node's PYTHONPATH imports this from entries/hooks): wrap it on the first import after
torch.distributed is loaded, so that the plugin's own ``import torch`` still comes after its
environment is set."""

import builtins
import sys
from collections.abc import Callable
from typing import Any

WRAPPED = "_skyinfra_test_wrapped"


def wrap_init_process_group(wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    plain_import = builtins.__import__

    def patching_import(name: str, *args: Any, **kwargs: Any) -> Any:
        module = plain_import(name, *args, **kwargs)
        dist = sys.modules.get("torch.distributed")
        real = getattr(dist, "init_process_group", None)
        if dist is not None and real is not None and not getattr(real, WRAPPED, False):
            wrapped = wrap(real)
            setattr(wrapped, WRAPPED, True)
            dist.init_process_group = wrapped  # type: ignore[attr-defined]
        return module

    builtins.__import__ = patching_import
