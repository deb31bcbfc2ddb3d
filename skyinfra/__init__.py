"""skyinfra: multi-node GPU clusters from reviewable Terraform (operator side).

The Python API is :class:`Cluster`; the errors it raises derive from :class:`SkyinfraError`.
Importing skyinfra loads neither Terraform nor any cloud SDK: each method imports what it
needs when it runs.
"""

from skyinfra.api.cluster import Cluster
from skyinfra.api.errors import PythonVersionError, RemoteError
from skyinfra.errors import (
    ClusterDownError,
    ConfirmationRequired,
    RunError,
    RunTimeoutError,
    SkyinfraError,
    SpecError,
    UsageError,
)

__version__ = "0.1.0"

__all__ = [
    "Cluster",
    "ClusterDownError",
    "ConfirmationRequired",
    "PythonVersionError",
    "RemoteError",
    "RunError",
    "RunTimeoutError",
    "SkyinfraError",
    "SpecError",
    "UsageError",
]
