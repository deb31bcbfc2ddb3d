"""The state Terraform could not save: where it is now (errored.tfstate, or the state it
printed, written to a private file here) and the command that pushes it back."""

from __future__ import annotations

import json
import os
import shlex
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeGuard

# Where Terraform puts the state it could not save (in its working directory).
ERRORED_STATE = "errored.tfstate"


def _is_state(value: object) -> TypeGuard[dict[str, Any]]:
    return isinstance(value, dict) and "lineage" in value and "version" in value


def _state_dump(events: Sequence[dict[str, Any]], printed: str) -> dict[str, Any] | None:
    """The state Terraform printed when it could write it nowhere, or None: with -json an
    "Emergency state dump" event holding it, otherwise an indented JSON object from a line
    ``{`` to a line ``}`` among the lines that are not events."""
    for event in events:
        state = event.get("state")
        if _is_state(state):
            return state
    lines = printed.splitlines()
    for start, line in enumerate(lines):
        if line.rstrip() != "{":
            continue
        for end in range(start + 1, len(lines)):
            if lines[end].rstrip() != "}":
                continue
            try:
                value = json.loads("\n".join(lines[start : end + 1]))
            except json.JSONDecodeError:
                continue
            if _is_state(value):
                return value
    return None


def _save_private(path: Path, text: str) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return True
    except OSError:
        path.unlink(missing_ok=True)
        return False


def rescue_state(
    workdir: Path, since: float, events: Sequence[dict[str, Any]], printed: str
) -> str:
    """When Terraform failed to write its state: where the state is now and how to push it
    back ("" when Terraform left no state behind). ``events``: its JSON events, ``printed``:
    what else it wrote; ``since``: when the command started."""
    errored = workdir / ERRORED_STATE
    where: Path | None = None
    if errored.is_file() and errored.stat().st_mtime >= since - 1:
        where = errored
    else:
        dump = _state_dump(events, printed)
        if dump is None:
            return ""
        text = json.dumps(dump, indent=2) + "\n"
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for candidate in (
            errored,
            workdir / f"errored-{stamp}.tfstate",
            Path(tempfile.gettempdir()) / f"skyinfra-{workdir.name}-errored-{stamp}.tfstate",
        ):
            if _save_private(candidate, text):
                where = candidate
                break
        else:
            return (
                "\nTerraform could not save the state and skyinfra could not write it to a "
                "file either; here it is, save it as errored.tfstate in "
                f"{workdir} and push it back with `skyinfra tf -- state push errored.tfstate`:"
                f"\n{text}"
            )
    arg = where.name if where.parent == workdir else str(where)
    command = (
        f"skyinfra tf --dir {shlex.quote(str(workdir.parent))} "
        f"--cluster {shlex.quote(workdir.name)} -- state push {shlex.quote(arg)}"
    )
    return (
        f"\nTerraform could not save its state; the state it holds is in {where}. "
        "Run no other `up` or `down` first: make the state location writable again (free "
        f"space, permissions), then push it back with:\n    {command}"
    )
