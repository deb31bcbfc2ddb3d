"""How the operator reaches nodes, whatever the target: the NodeTransport protocol (base.py)
and readiness. Each target brings its own transport (skyinfra/targets/<name>/)."""

from skyinfra.transport.base import NodeProcess, NodeTransport, Readiness

__all__ = ["NodeProcess", "NodeTransport", "Readiness"]
