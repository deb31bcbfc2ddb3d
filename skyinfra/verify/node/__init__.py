"""Scripts `skyinfra verify` runs on the nodes with the node's own Python (sent as ``python -c``
source: the nodes hold only the runtime and the frameworks, never skyinfra). Standard library
only at import; frameworks are imported inside, when asked for."""

from __future__ import annotations

from importlib import resources


def script(name: str) -> str:
    """The source text of ``<name>.py`` in this folder."""
    return resources.files(__package__).joinpath(f"{name}.py").read_text(encoding="utf-8")
