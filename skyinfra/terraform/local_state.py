"""Reading a workspace's local state file without starting Terraform.

`terraform state list` and `terraform output -json` start a process that loads the whole
Terraform library to read one JSON file (about 0.2 s of CPU each; `up`, `status`, `down` and
`run` ask several times). Where the state is the workspace's own ``terraform.tfstate`` (no
shared backend, no Terraform workspace other than ``default``), these answer the same
questions from the file itself; anything else (a backend, another state format version)
returns None and the caller asks Terraform as before.

The state format is Terraform's documented JSON state, version 4 (Terraform 0.13 and later):
``resources[]`` with ``module`` (the module instance's address), ``mode``, ``type``, ``name``
and ``instances[].index_key``; ``outputs`` with each output's ``value``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skyinfra.terraform.backend import has_backend

STATE_FILE = "terraform.tfstate"
STATE_VERSION = 4


def _index(key: Any) -> str:
    """An instance key as Terraform prints it: [0] for count, ["name"] for for_each."""
    if key is None:
        return ""
    if isinstance(key, bool) or not isinstance(key, int | str):
        raise ValueError(f"unexpected instance key {key!r}")
    if isinstance(key, int):
        return f"[{key}]"
    return f"[{json.dumps(key)}]"


_MODULE_STEP = re.compile(r'module\.([^.\[]+)(?:\[(\d+|"(?:[^"\\]|\\.)*")\])?(?:\.|$)')


def module_order(module: str) -> tuple[int, list[tuple[str, tuple[int, int | str]]]]:
    """Terraform's order of module instances (addrs.ModuleInstance.Less): shorter paths
    first, then step by step by name and by instance key (numbers as numbers)."""
    steps: list[tuple[str, tuple[int, int | str]]] = []
    for match in _MODULE_STEP.finditer(module):
        name, key = match.group(1), match.group(2)
        if key is None:
            order: tuple[int, int | str] = (0, 0)
        elif key.startswith('"'):
            order = (2, json.loads(key))
        else:
            order = (1, int(key))
        steps.append((name, order))
    return len(steps), steps


def addresses(state: Mapping[str, Any]) -> list[str]:
    """Every resource instance's address, as `terraform state list` prints them: module by
    module in Terraform's order; within a module, in the state file's (Terraform sorts it)."""
    found: list[str] = []
    resources = list(state.get("resources") or [])
    resources.sort(key=lambda resource: module_order(resource.get("module") or ""))
    for resource in resources:
        prefix = f"{resource['module']}." if resource.get("module") else ""
        kind = "data." if resource.get("mode") == "data" else ""
        base = f"{prefix}{kind}{resource['type']}.{resource['name']}"
        for instance in resource.get("instances") or []:
            found.append(base + _index(instance.get("index_key")))
    return found


def output_values(state: Mapping[str, Any]) -> dict[str, Any]:
    """The root module's outputs, name -> value (what `terraform output -json` holds)."""
    outputs = state.get("outputs") or {}
    return {name: entry["value"] for name, entry in outputs.items()}


def read(workdir: Path, environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The workspace's local state as JSON ({} where there is none yet), or None where only
    Terraform can answer: a shared backend, a non-default Terraform workspace, or a state
    file of another format version."""
    if has_backend(workdir) or environ.get("TF_WORKSPACE", "default") != "default":
        return None
    # A backend configured by hand in the root module: `init` records it here.
    backend_cache = workdir / ".terraform" / STATE_FILE
    if backend_cache.is_file():
        try:
            backend = json.loads(backend_cache.read_text()).get("backend") or {}
        except (OSError, json.JSONDecodeError, AttributeError):
            return None
        if backend.get("type", "local") != "local" or (backend.get("config") or {}).get("path"):
            return None
    path = workdir / STATE_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError:
        return None
    if not text.strip():
        return {}
    try:
        state = json.loads(text)
    except json.JSONDecodeError:
        return None  # mid-write or damaged: Terraform says what is wrong
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        return None
    return state
