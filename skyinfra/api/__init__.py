"""The Python API: :class:`Cluster` (skyinfra.api.cluster), its calls (calls.py) and the
handle of a detached job (jobs.py)."""

from skyinfra.api.cluster import Cluster

__all__ = ["Cluster"]
