"""The Python API: :class:`Cluster` (skyinfra.api.cluster), its calls (calls.py) and the
handle of a detached job (jobs.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyinfra.lazy_names import lazy_getattr

if TYPE_CHECKING:
    from skyinfra.api.cluster import Cluster

__all__ = ["Cluster"]

# Loaded when first used: `skyinfra run` imports skyinfra.api.subset, not the API.
__getattr__ = lazy_getattr(__name__, {"Cluster": "skyinfra.api.cluster"}, globals())
