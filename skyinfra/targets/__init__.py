"""Targets: the places clusters run, as peers behind one protocol (base.py).

``TARGETS`` is the registry, in the manner of pytest-testinfra's backend table: a name and
where its class lives, imported on first use, so naming every target costs nothing and a
target whose SDK is missing fails only when asked for. A new target is one folder under
skyinfra/targets/ with a class satisfying :class:`skyinfra.targets.base.Target`, plus one
line here. Nothing else in skyinfra branches on a target's name.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING

from skyinfra.errors import ProviderUnavailableError, SpecError

if TYPE_CHECKING:
    from skyinfra.targets.base import Target

TARGETS: dict[str, str] = {
    "local": "skyinfra.targets.local.target:LocalTarget",
    "aws": "skyinfra.targets.aws.target:AwsTarget",
}


def target_names() -> tuple[str, ...]:
    return tuple(TARGETS)


@functools.cache
def get_target(name: str) -> Target:
    """The target called ``name`` (the spec's ``provider``)."""
    try:
        module_name, _, class_name = TARGETS[name].partition(":")
    except KeyError:
        raise SpecError("provider", name, f"one of {list(TARGETS)}") from None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        raise ProviderUnavailableError(
            f"target {name!r} cannot be loaded in this installation: {err}"
        ) from err
    target: Target = getattr(module, class_name)()
    return target


def all_targets() -> tuple[Target, ...]:
    return tuple(get_target(name) for name in TARGETS)
