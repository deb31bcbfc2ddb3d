"""Errors of the worker runtime. The launcher maps each to one exit code and one clear line."""

from __future__ import annotations


class RuntimeSetupError(Exception):
    """Topology or plugin set-up failed (launcher exit code 3)."""


class TopologyError(RuntimeSetupError):
    """The topology is missing, malformed, or does not contain this node."""


class PluginError(RuntimeSetupError):
    """A plugin could not set up its framework (peer missing, wrong order, bad option)."""


class PluginOptionError(PluginError):
    """A plugin name or option is not valid; says where and what would be.

    ``index`` is the plugin's position in its list (None for a single plugin), ``field`` the
    part of that plugin that is wrong (``"name"``, ``"options.backend"``, or ``""`` for the
    plugin as a whole), ``value`` what was given and ``expected`` what is valid. The operator
    turns these into its own spec errors (``plugins[1].options.backend``).
    """

    def __init__(
        self, message: str, *, field: str, value: object, expected: str, index: int | None = None
    ) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        self.index = index
        super().__init__(message)


class EntrypointError(Exception):
    """The entrypoint is malformed or cannot be found (launcher exit code 2)."""


class UsageError(Exception):
    """A bad command line (launcher exit code 2)."""


class PluginFlagError(UsageError):
    """A ``--plugin`` value is not ``NAME[:key=value,...]``; ``expected`` says what is."""

    def __init__(self, message: str, *, text: str, expected: str) -> None:
        self.text = text
        self.expected = expected
        super().__init__(message)
