"""Render the per-cluster Terraform root module and its tfvars from Jinja2 templates.

Only the root module is rendered; the reusable modules under ``infra/modules`` are static HCL.
A root module is self-contained: the modules it calls are copied into the workspace
(``modules/<name>/``, see :func:`module_files`) and referred to as ``./modules/<name>``, and
the node bootstrap script goes to ``scripts/``. Nothing written points into where skyinfra is
installed, so a workspace survives an upgrade or a moved virtual environment and can be
committed and reviewed as it is.

Rendering is pure and deterministic: the same context gives the same bytes (no timestamps,
sorted nothing implicit), and every undefined template variable is an error (StrictUndefined).
The templates are written `terraform fmt`-clean; tests check that with the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skyinfra import resources, templating

# Where a workspace keeps its copies of the modules and scripts (relative to the workspace).
MODULES_DIR = "modules"
SCRIPTS_DIR = "scripts"
BOOTSTRAP_FILE = f"{SCRIPTS_DIR}/bootstrap-node.sh"
# Folders of a workspace that rendering owns entirely: files in them that a render does not
# produce are stale copies from an older skyinfra and are removed when the workspace is written.
OWNED_DIRS = (MODULES_DIR, SCRIPTS_DIR)
# Root-module variables are JSON, written with json.dumps (no HCL serialiser needed).
TFVARS_JSON = "terraform.tfvars.json"
# Files older skyinfra versions rendered that Terraform would still read: removed on write.
RETIRED_FILES = ("terraform.tfvars",)


# A target's root-module templates: ``infra/templates/<target>/root/``. Its other templates
# (the AWS cloud-init user data) live in folders of their own beside it, so rendering a root
# module can never emit one of them as a root-module file.
ROOT_TEMPLATES = "root"


def render_root(target: str, context: Mapping[str, Any]) -> dict[str, str]:
    """Render every ``infra/templates/<target>/root/*.j2``: output file name -> text."""
    return {
        name.rsplit("/", 1)[-1][: -len(".j2")]: templating.render(name, context)
        for name in templating.template_names(f"{target}/{ROOT_TEMPLATES}")
    }


def module_source(module: str) -> str:
    """How a root module refers to its copy of ``infra/modules/<module>`` (Terraform wants
    local sources to start with ./)."""
    return f"./{MODULES_DIR}/{module}"


def module_files(*modules: str) -> dict[str, str]:
    """The workspace copies of ``infra/modules/<module>`` for each module the root calls:
    ``modules/<module>/<file>.tf`` -> text."""
    out: dict[str, str] = {}
    for module in modules:
        for name, text in resources.module_files(module).items():
            out[f"{MODULES_DIR}/{module}/{name.rsplit('/', 1)[-1]}"] = text
    return out


def bootstrap_files() -> dict[str, str]:
    """The node bootstrap script, as the workspace file the local module runs."""
    return {BOOTSTRAP_FILE: resources.bootstrap_script()}
