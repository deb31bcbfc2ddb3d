"""The Python API: :class:`Cluster` (skyinfra.api.cluster), its calls (calls.py) and the
handle of a detached job (jobs.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyinfra.api.cluster import Cluster

__all__ = ["Cluster"]


def __getattr__(name: str) -> Any:
    # Loaded when first used: `skyinfra run` imports skyinfra.api.subset, not the API.
    if name != "Cluster":
        raise AttributeError(f"module 'skyinfra.api' has no attribute {name!r}")
    from skyinfra.api.cluster import Cluster

    globals()["Cluster"] = Cluster
    return Cluster
