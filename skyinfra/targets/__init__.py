"""Targets: the places clusters run, as peers behind one protocol (base.py).

The registry of which targets exist is skyinfra/target_registry.py (below the spec, which
parses each target's table through it); here a target's name becomes its Target. Nothing else
in skyinfra branches on a target's name.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from skyinfra.target_registry import TARGETS, load_target, target_names

if TYPE_CHECKING:
    from skyinfra.targets.base import Target

__all__ = ["TARGETS", "all_targets", "get_target", "target_names"]


@functools.cache
def get_target(name: str) -> Target:
    """The target called ``name`` (the spec's ``provider``)."""
    target: Target = load_target(name)
    return target


def all_targets() -> tuple[Target, ...]:
    return tuple(get_target(name) for name in TARGETS)
