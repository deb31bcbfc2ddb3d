"""The one Jinja2 environment: every template skyinfra renders (root modules, tfvars,
cloud-init user data) comes from ``infra/templates`` through :mod:`skyinfra.resources`.

Rendering is strict (an undefined variable is an error naming it), never HTML-escapes, and
keeps the template's trailing newline. Filters beside Jinja's own (``tojson`` among them):

- ``hcl``: an HCL literal of a Python value;
- ``shquote``: a POSIX shell word (:func:`shlex.quote`);
- ``yaml_str``: a YAML double-quoted scalar of a text (a JSON string: unlike ``tojson``, no
  HTML escapes, which cost cloud-init user data bytes for nothing).
"""

from __future__ import annotations

import functools
import json
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from skyinfra import resources

if TYPE_CHECKING:
    import jinja2

TEMPLATES = "templates"


def hcl(value: Any) -> str:
    """An HCL literal for a string, number, bool, None, list or map (maps keep key order)."""
    import jinja2  # loaded: a filter runs inside a template

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


def yaml_str(value: Any) -> str:
    """A text as a YAML double-quoted scalar (JSON's escapes are YAML's)."""
    return json.dumps(str(value))


def shquote(value: Any) -> str:
    return shlex.quote(str(value))


def _load(name: str) -> tuple[str, None, Any]:
    # Templates are package data: they cannot change while the process runs.
    return resources.read_text(f"{TEMPLATES}/{name}"), None, lambda: True


@functools.cache
def environment() -> jinja2.Environment:
    """The shared environment; template names are relative to infra/templates."""
    # Imported here: Jinja is a quarter of the start of a command that imports this module
    # (the local target's does) and renders nothing (`jobs`, `logs`, `run`).
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(_load),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["hcl"] = hcl
    env.filters["shquote"] = shquote
    env.filters["yaml_str"] = yaml_str
    return env


def render(name: str, context: Mapping[str, Any]) -> str:
    """Render ``infra/templates/<name>`` with ``context``."""
    return environment().get_template(name).render(**context)


def template_names(folder: str) -> list[str]:
    """The ``*.j2`` templates directly in ``infra/templates/<folder>``, sorted, relative to
    infra/templates (``local/root/main.tf.j2``)."""
    prefix = f"{TEMPLATES}/"
    return [name[len(prefix) :] for name in resources.list_files(f"{TEMPLATES}/{folder}", (".j2",))]
