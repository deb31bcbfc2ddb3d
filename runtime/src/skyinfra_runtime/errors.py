"""Errors of the worker runtime. The launcher maps each to one exit code and one clear line."""

from __future__ import annotations


class RuntimeSetupError(Exception):
    """Topology or plugin set-up failed (launcher exit code 3)."""


class TopologyError(RuntimeSetupError):
    """The topology is missing, malformed, or does not contain this node."""


class PluginError(RuntimeSetupError):
    """A plugin could not set up its framework (peer missing, wrong order, bad option)."""


class EntrypointError(Exception):
    """The entrypoint is malformed or cannot be found (launcher exit code 2)."""
