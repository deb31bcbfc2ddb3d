"""The field readers every table's parser uses, the common fields' and each target's: a value
of the right type and range or a SpecError naming the field, and :class:`Problems`, which
collects the errors of independent checks so that one pass names them all.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from skyinfra.errors import SpecError, spec_problems

T = TypeVar("T")


class Problems:
    """Collects every SpecError of independent checks, so that one pass names them all
    (`skyinfra validate`, and every command's first message), not only the first."""

    def __init__(self) -> None:
        self.found: list[SpecError] = []

    def check(self, read: Callable[[], T], fallback: T) -> T:
        """``read()``'s value; on a SpecError, note it and go on with ``fallback``."""
        try:
            return read()
        except SpecError as err:
            self.found.append(err)
            return fallback

    def raise_any(self) -> None:
        error = spec_problems(self.found)
        if error is not None:
            raise error


# ---------------------------------------------------------------- field readers (pure)


def reject_unknown(raw: Mapping[str, Any], allowed: Sequence[str], prefix: str) -> None:
    """A SpecError for each key not in ``allowed``: the closest known key first when one is
    near (a typo), then the list."""
    problems = Problems()
    for key in raw:
        if key not in allowed:
            near = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
            hint = f" (did you mean {prefix + near[0]!r}?)" if near else ""
            problems.found.append(
                SpecError(
                    f"{prefix}{key}", raw[key], f"one of the known keys{hint} {list(allowed)}"
                )
            )
    problems.raise_any()


def read_int(raw: Mapping[str, Any], key: str, path: str, default: int, lo: int, hi: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise SpecError(path, value, f"an integer from {lo} to {hi}")
    return value


def read_bool(raw: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(path, value, "true or false")
    return value


def read_str(
    raw: Mapping[str, Any], key: str, path: str, pattern: re.Pattern[str], expected: str
) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not pattern.match(value):
        raise SpecError(path, value, expected)
    return value
