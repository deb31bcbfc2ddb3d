"""skyinfra: multi-node GPU clusters from reviewable Terraform (operator side).

The Python API is :class:`Cluster`; the errors it raises derive from :class:`SkyinfraError`.
Importing skyinfra loads neither Terraform nor any cloud SDK: each method imports what it
needs when it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyinfra.lazy_names import lazy_getattr

if TYPE_CHECKING:
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

# Each name from its module when first used: every `skyinfra` command imports this package
# (skyinfra.errors is in it), and only the Python API needs the API's modules.
_PUBLIC = {
    "Cluster": "skyinfra.api.cluster",
    "ClusterDownError": "skyinfra.errors",
    "ConfirmationRequired": "skyinfra.errors",
    "PythonVersionError": "skyinfra.api.errors",
    "RemoteError": "skyinfra.api.errors",
    "RunError": "skyinfra.errors",
    "RunTimeoutError": "skyinfra.errors",
    "SkyinfraError": "skyinfra.errors",
    "SpecError": "skyinfra.errors",
    "UsageError": "skyinfra.errors",
}


__getattr__ = lazy_getattr(__name__, _PUBLIC, globals())
