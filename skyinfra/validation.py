"""Every check of a cluster spec that needs no cloud and no workspace: `skyinfra validate`,
and the first thing every command that reads a spec does.

No credentials, no network, nothing written: the spec's fields and every target table in the
file (:func:`skyinfra.spec.validate_spec`, which collects every problem), plugin options (the
runtime's plugin table), the files the spec names and the guardrails the spec alone breaks
(each target's ``offline_problems``). So a bad spec gets the same answer with and without
credentials, in a CI job as on a laptop. `validate` also lists what this machine lacks to run
the spec (``environment_problems``: on the local target, a plugin's framework).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyinfra.errors import GuardrailError, SpecError, spec_problems
from skyinfra.spec import ClusterSpec, merge_overrides, read_spec_file, validate_spec
from skyinfra.target_registry import declaration

GUARDRAIL_PREFIX = "guardrails."


@dataclass(frozen=True)
class Problem:
    """One problem, in a shape a CI job can turn into an annotation of the spec file."""

    file: str | None  # the spec file (None: the spec came from flags alone)
    line: int | None  # where in the file the field is set, when it is
    field: str
    value: Any
    expected: str  # what would be valid
    message: str

    @property
    def is_guardrail(self) -> bool:
        return self.field.startswith(GUARDRAIL_PREFIX)

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "field": self.field,
            "value": self.value,
            "expected": self.expected,
            "message": self.message,
        }


def _flat(errors: Sequence[SpecError]) -> list[SpecError]:
    return [e for err in errors for e in getattr(err, "problems", (err,))]


def offline_errors(spec: ClusterSpec, *, guardrails: bool = True) -> list[SpecError]:
    """What a valid spec still gets wrong on this machine alone (files it names; with
    ``guardrails``, the guardrails it breaks by itself)."""
    found = declaration(spec.provider).offline_problems(spec.section, spec.guardrails)
    return [e for e in _flat(found) if guardrails or not e.field.startswith(GUARDRAIL_PREFIX)]


def environment_errors(spec: ClusterSpec) -> list[SpecError]:
    """What this machine lacks to run ``spec`` (local: a plugin's framework that does not
    import where the nodes find their packages): `validate` lists it, `up` raises it."""
    return _flat(declaration(spec.provider).environment_problems(spec))


def require_valid(spec: ClusterSpec, *, guardrails: bool = True) -> None:
    """Raise what :func:`offline_errors` finds, before any credential or network call:
    SpecError (exit 2) for the spec's own mistakes, then GuardrailError (exit 8) for a
    guardrail it breaks by itself."""
    errors = offline_errors(spec, guardrails=guardrails)
    error = spec_problems([e for e in errors if not e.field.startswith(GUARDRAIL_PREFIX)])
    if error is not None:
        raise error
    broken = [e for e in errors if e.field.startswith(GUARDRAIL_PREFIX)]
    if broken:
        raise GuardrailError(
            "a guardrail fails on the spec alone; nothing was changed: "
            + "; ".join(f"{e.field}: {e.expected}" for e in broken)
        )


def validate_file(
    path: Path | None, overrides: Mapping[str, Any] | None = None
) -> tuple[ClusterSpec | None, list[Problem]]:
    """Check the spec file ``path`` (with ``overrides``, as flags give them) completely:
    the spec when it is valid, and every problem found."""
    text = ""
    raw: dict[str, Any] = {}
    errors: list[SpecError] = []
    spec = None
    if path is not None:
        try:
            raw = read_spec_file(path)
            text = path.read_text(encoding="utf-8")
        except SpecError as err:
            errors.append(err)
    if not errors:
        try:
            spec = validate_spec(merge_overrides(raw, overrides or {}))
        except SpecError as err:
            errors += _flat([err])
    if spec is not None:
        errors += offline_errors(spec) + environment_errors(spec)
    file = str(path) if path is not None else None
    return (spec if not errors else None), [
        Problem(file, _line_of(text, e.field), e.field, e.value, e.expected, str(e)) for e in errors
    ]


_INDEX = re.compile(r"\[[^\]]*\]")


def _line_of(text: str, field: str) -> int | None:
    """The line (1-based) that sets ``field`` (``nodes``, ``aws.ssh_key``,
    ``plugins[1].options.backend``...) in the TOML ``text``: a cheap look for the key in its
    table, good enough to annotate; None when it is not written there (a default, a flag)."""
    if not text or field.startswith("-"):
        return None
    parts = _INDEX.sub("", field).split(".")
    table, key = ("", parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    current = ""
    header_line = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        header = re.match(r"^\[\[?\s*([A-Za-z0-9_.\-]+)\s*\]\]?", stripped)
        if header:
            current = header.group(1)
            if current == table:
                header_line = header_line or number
            continue
        if re.match(rf"^{re.escape(key)}\s*=", stripped):
            if current == table:
                return number
            if current == "" and table and key != table:
                continue
        # `plugins = [...]` at top level holds plugins[i].options...
        if current == "" and table and re.match(rf"^{re.escape(table)}\s*=", stripped):
            return number
    return header_line
