"""The spec from its sources: the TOML file (``skyinfra.toml`` or ``--spec``) under the CLI's
flags, a problem in a flag's value named as the flag; and, for a cluster that exists, the
applied values it keeps (:func:`load_spec_keeping_applied`, :class:`KeptValue`).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyinfra.errors import SpecError, spec_problems
from skyinfra.spec.cluster import ClusterSpec, validate_spec


def read_spec_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError("--spec", str(path), f"a readable TOML file ({err.strerror})") from err
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError("--spec", str(path), f"valid TOML ({_toml_problem(err, text)})") from err


_TOML_POSITION = re.compile(r"\(at line (\d+), column \d+\)")
_TOML_KEY = re.compile(r"^\s*([A-Za-z0-9_.\-\"' ]+?)\s*=")


def _toml_problem(err: ValueError, text: str) -> str:
    """tomllib's message, plus the key when it is a duplicate ("Cannot overwrite a value"
    names only a position)."""
    message = str(err)
    where = _TOML_POSITION.search(message)
    if "overwrite" in message and where:
        lines = text.splitlines()
        number = int(where.group(1))
        key = _TOML_KEY.match(lines[number - 1]) if 0 < number <= len(lines) else None
        if key:
            return f"{message}: the key {key.group(1).strip()!r} is given twice"
    return message


def merge_overrides(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Flags that were given (not None) replace the file's values."""
    merged = dict(base)
    for key, value in overrides.items():
        if value is not None:
            merged[key] = value
    return merged


def load_spec(
    spec_path: Path | None, overrides: Mapping[str, Any], *, default_path: Path | None = None
) -> ClusterSpec:
    """Read the spec file (explicit, else ``default_path`` when it exists) and apply flags.
    A problem in a value a flag gave is named as that flag (``--nodes``), not as the field."""
    raw: dict[str, Any] = {}
    if spec_path is not None:
        raw = read_spec_file(spec_path)
    elif default_path is not None and default_path.is_file():
        raw = read_spec_file(default_path)
    return validate_with_flags(merge_overrides(raw, overrides), overrides)


def validate_with_flags(merged: Mapping[str, Any], overrides: Mapping[str, Any]) -> ClusterSpec:
    """``validate_spec`` of the file's values merged with the flags', a problem in a value a
    flag gave named as that flag (``--nodes``), not as the field."""
    try:
        return validate_spec(merged)
    except SpecError as err:
        found = getattr(err, "problems", (err,))
        named = spec_problems([as_flag_problem(problem, overrides) for problem in found])
        raise (named or err) from None


# The command-line flags (`up`, `plan`, `render`) that stand for a spec field.
FLAG_OF_FIELD = {
    "name": "--name",
    "provider": "--provider",
    "nodes": "--nodes",
    "procs_per_node": "--procs-per-node",
    "plugins": "--plugin",
    "python_packages": "--package",
    "backend": "--backend",
    "engine": "--terraform-bin",
}
_FIELD_PATH = re.compile(r"(?P<key>[a-z_]+)(?:\[(?P<index>\d+)\])?(?:\.(?P<rest>.+))?$")


def as_flag_problem(problem: SpecError, overrides: Mapping[str, Any]) -> SpecError:
    """``problem`` named as the flag that gave its field's value (``plugins[1].options.backend``
    from ``--plugin keras:backend=x``: ``--plugin keras:backend``); as it is otherwise."""
    path = _FIELD_PATH.match(problem.field)
    if path is None or path["key"] not in FLAG_OF_FIELD or overrides.get(path["key"]) is None:
        return problem
    flag = FLAG_OF_FIELD[path["key"]]
    given = overrides[path["key"]]
    if path["key"] == "plugins" and path["index"] is not None and path["rest"] != "name":
        entry = given[int(path["index"])] if int(path["index"]) < len(given) else None
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str):
            option = (path["rest"] or "").removeprefix("options.")
            flag = f"{flag} {name}" + (f":{option}" if option else "")
    return SpecError(flag, problem.value, problem.expected)


# The fields `up`'s flags set, each with its flag, but the name. Neither in the spec file nor
# given as a flag, such a field of an existing cluster keeps the value the cluster was applied
# with: a bare `up --name X` again must not shrink the cluster or drop its plugins.
FLAG_KEYS: dict[str, str] = {k: flag for k, flag in FLAG_OF_FIELD.items() if k != "name"}


@dataclass(frozen=True)
class KeptValue:
    """A field an existing cluster keeps from its applied spec (spec.json)."""

    key: str
    value: Any  # in the spec file's shape (ClusterSpec.to_dict)
    flag: str | None  # the command's flag that changes it (None: only the file does)

    def line(self, spec_file: str) -> str:
        how = f"{self.flag} or {spec_file}" if self.flag else spec_file
        return (
            f"[skyinfra] kept {self.key} = {_shown(self.key, self.value)} from the applied "
            f"cluster (change it with {how})"
        )


def _shown(key: str, value: Any) -> str:
    if key == "plugins":  # as --plugin takes them
        return json.dumps([_plugin_flag(p["name"], p.get("options") or {}) for p in value])
    return json.dumps(value)


def _plugin_flag(name: str, options: Mapping[str, Any]) -> str:
    if not options:
        return name
    shown = (f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in options.items())
    return f"{name}:{','.join(shown)}"


def load_spec_keeping_applied(
    spec_path: Path | None,
    overrides: Mapping[str, Any],
    *,
    default_path: Path | None,
    applied: Callable[[Any], ClusterSpec | None],
    flags: Mapping[str, str],
    overrides_are_flags: bool = True,
) -> tuple[ClusterSpec, list[KeptValue]]:
    """``load_spec``, where the cluster exists already (``applied(name)``: its spec.json, or
    None) keeping its applied value of each field that no flag gives and the spec file does
    not hold: a field of :data:`FLAG_KEYS`, or, with no spec file at all, every field.

    The kept values that differ from the defaults come back, each with the flag among
    ``flags`` (field -> flag of the calling command) that changes it. A problem in a value of
    ``overrides`` is named as the CLI's flag for it unless ``overrides_are_flags`` is False
    (the Python API's arguments: named as the spec's field)."""

    def validated(merged: Mapping[str, Any]) -> ClusterSpec:
        if overrides_are_flags:
            return validate_with_flags(merged, overrides)
        return validate_spec(merged)

    file = spec_path
    if file is None and default_path is not None and default_path.is_file():
        file = default_path
    raw = read_spec_file(file) if file is not None else {}
    merged = merge_overrides(raw, overrides)
    previous = applied(merged.get("name"))
    if previous is None:
        return validated(merged), []
    try:  # what a bare name would get on the cluster's target: keeping those says nothing
        defaults = validate_spec({"name": previous.name, "provider": previous.provider}).to_dict()
    except SpecError:
        defaults = {}
    kept: list[KeptValue] = []
    for key, value in previous.to_dict().items():
        if key == "name" or overrides.get(key) is not None or key in raw:
            continue
        if file is not None and key not in FLAG_KEYS:
            continue  # the file is the place for it, and it leaves it out: its default
        merged[key] = value
        if defaults.get(key) != value:
            kept.append(KeptValue(key, value, flags.get(key)))
    return validated(merged), kept
