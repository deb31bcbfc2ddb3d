"""How the operator reaches nodes: the NodeTransport protocol and its local implementation."""

from skyinfra.transport.base import NodeProcess, NodeTransport, Readiness
from skyinfra.transport.local import LocalTransport

__all__ = ["LocalTransport", "NodeProcess", "NodeTransport", "Readiness"]
