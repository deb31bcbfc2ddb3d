"""The one place that reads what ships with skyinfra: Terraform modules, templates, scripts.

They live in the repository's top-level ``infra/`` folder. ``skyinfra/_infra`` is a symlink to
it, so the same files are package data of ``skyinfra``: an editable install and a checkout
read ``infra/`` itself, a built wheel carries a copy (pyproject.toml's package-data). Every
read goes through :mod:`importlib.resources`, never through a path computed from
``__file__``, so skyinfra also runs from a wheel installed anywhere.

Names are ``/``-separated and relative to ``infra/``: ``templates/local/root/main.tf.j2``,
``modules/aws/network``, ``scripts/bootstrap-node.sh``.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

from skyinfra.errors import ResourceError

PACKAGE = "skyinfra"
INFRA = "_infra"
BOOTSTRAP_SCRIPT = "scripts/bootstrap-node.sh"
# What a module folder holds that a workspace needs: its HCL files (not its tests/).
MODULE_SUFFIXES = (".tf",)


def _node(name: str) -> Traversable:
    node = files(PACKAGE).joinpath(INFRA)
    for part in name.split("/"):
        if part in ("", ".", ".."):
            raise ValueError(f"resource names are plain relative paths, got {name!r}")
        node = node.joinpath(part)
    return node


def _missing(name: str) -> ResourceError:
    return ResourceError(
        f"skyinfra's packaged file infra/{name} is missing; the installation is incomplete "
        "(reinstall skyinfra, or from a checkout check that skyinfra/_infra links to ../infra)"
    )


def read_text(name: str) -> str:
    """The text of a shipped file, e.g. ``read_text("scripts/bootstrap-node.sh")``."""
    node = _node(name)
    if not node.is_file():
        raise _missing(name)
    return node.read_text(encoding="utf-8")


def list_files(folder: str, suffixes: tuple[str, ...] = ()) -> list[str]:
    """Names of the files directly in ``folder`` (sorted; sub-folders are not entered),
    optionally only those ending in one of ``suffixes``."""
    node = _node(folder)
    if not node.is_dir():
        raise _missing(folder)
    return sorted(
        f"{folder}/{child.name}"
        for child in node.iterdir()
        if child.is_file() and (not suffixes or child.name.endswith(suffixes))
    )


def module_files(module: str) -> dict[str, str]:
    """Every HCL file of ``modules/<module>`` (e.g. ``aws/nodes``): name -> text, sorted."""
    return {name: read_text(name) for name in list_files(f"modules/{module}", MODULE_SUFFIXES)}


def bootstrap_script() -> str:
    """The node bootstrap both targets run (infra/scripts/bootstrap-node.sh)."""
    return read_text(BOOTSTRAP_SCRIPT)


def tree_texts(folder: str, suffixes: tuple[str, ...]) -> dict[str, str]:
    """Every file under ``folder``, sub-folders included, ending in one of ``suffixes``:
    name -> text (for a scan such as the modules' ``required_version``)."""
    out: dict[str, str] = {}
    pending = [(folder, _node(folder))]
    while pending:
        name, node = pending.pop()
        for child in node.iterdir() if node.is_dir() else ():
            if child.is_dir():
                pending.append((f"{name}/{child.name}", child))
            elif child.name.endswith(suffixes):
                out[f"{name}/{child.name}"] = child.read_text(encoding="utf-8")
    return dict(sorted(out.items()))
