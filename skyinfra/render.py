"""Render the per-cluster Terraform root module and its tfvars from Jinja2 templates.

Only the root module is rendered; the reusable modules under ``infra/modules`` are static HCL.
Rendering is pure and deterministic: the same context gives the same bytes (no timestamps,
sorted nothing implicit), and every undefined template variable is an error (StrictUndefined).
The templates are written `terraform fmt`-clean; tests check that with the engine.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from skyinfra.spec import ClusterSpec

REPO_ROOT = Path(__file__).resolve().parent.parent
INFRA_DIR = REPO_ROOT / "infra"
TEMPLATES_DIR = INFRA_DIR / "templates"


def hcl(value: Any) -> str:
    """An HCL literal for a string, number, bool, None, list or map (maps keep key order)."""
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined raises UndefinedError naming the missing variable
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str):
        # JSON string escapes are valid HCL; `${` and `%{` would start a template sequence.
        return json.dumps(value).replace("${", "$${").replace("%{", "%%{")
    if isinstance(value, list | tuple):
        return "[" + ", ".join(hcl(v) for v in value) + "]"
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        inner = "\n".join(f"  {json.dumps(str(k))} = {hcl(v)}" for k, v in value.items())
        return "{\n" + inner + "\n}"
    raise TypeError(f"no HCL literal for {type(value).__name__}: {value!r}")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["hcl"] = hcl
    return env


def render_root(provider: str, context: Mapping[str, Any]) -> dict[str, str]:
    """Render every ``infra/templates/<provider>/*.j2``: output file name -> text."""
    env = _environment()
    names = sorted(
        p.name for p in (TEMPLATES_DIR / provider).iterdir() if p.is_file() and p.suffix == ".j2"
    )
    return {
        name[: -len(".j2")]: env.get_template(f"{provider}/{name}").render(**context)
        for name in names
    }


def module_source(workspace_dir: Path, module: str) -> str:
    """Terraform wants local module sources relative and starting with ./ or ../."""
    rel = os.path.relpath(INFRA_DIR / "modules" / module, workspace_dir.resolve())
    return rel if rel.startswith("../") else f"./{rel}"


def local_context(
    spec: ClusterSpec,
    *,
    workspace_dir: Path,
    node_root: Path,
    python: str,
    wheel_path: Path,
    wheel_sha256: str,
) -> dict[str, Any]:
    if spec.local is None:
        raise ValueError("local_context needs a spec with provider 'local'")
    return {
        "cluster_name": spec.name,
        "module_source": module_source(workspace_dir, "local"),
        "node_count": spec.nodes,
        "base_address": spec.local.base_address,
        "head_port": spec.head_port,
        "node_root": str(node_root),
        "python": python,
        "wheel_path": str(wheel_path),
        "wheel_sha256": wheel_sha256,
        "python_packages": list(spec.python_packages),
    }
