"""A package's public names, each loaded from its module on first use (PEP 562): importing
the package then costs nothing for what a command does not use."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(
    package: str, modules: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """The package's module ``__getattr__``: ``modules`` maps each public name to the module
    that defines it; a name once loaded is a plain attribute in ``namespace`` (the package's
    globals())."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
