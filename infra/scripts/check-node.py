#!/usr/bin/env python3
"""Check a freshly bootstrapped node: every framework the plugins name imports and, on a node
whose topology says it has accelerators, sees that many GPUs.

Run by bootstrap-node.sh (--check-topology) with the node venv's python, last, so a node that
would train on the wrong hardware never gets its ready marker: pip drops an unknown extra
such as jax[cuda13] with a warning and installs a CPU-only jaxlib, and an old Python gets an
old jax; both would otherwise only show as slow training.

Usage: check-node.py TOPOLOGY_JSON NODE_INDEX
Exit 0: all good (one line per framework on stdout); 3: a check failed (the reasons on
stderr); 2: bad arguments or topology. Reads only the schema-1 topology JSON, so it needs
nothing beyond the frameworks themselves.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

# The frameworks each plugin needs on the node; keras also needs its backend's.
PLUGIN_FRAMEWORKS = {"jax": ("jax",), "torch": ("torch",), "keras": ("keras",)}
KERAS_DEFAULT_BACKEND = "jax"


def jax_gpus() -> int:
    import jax

    try:
        return len(jax.devices("gpu"))
    except RuntimeError:  # no GPU backend: a CPU-only jaxlib, or no driver
        return 0


def torch_gpus() -> int:
    import torch

    return int(torch.cuda.device_count())


# How each framework counts the GPUs it can use (keras uses its backend's devices).
GPU_COUNTERS: dict[str, Callable[[], int]] = {"jax": jax_gpus, "torch": torch_gpus}


def frameworks(topology: dict[str, Any]) -> list[str]:
    """The modules to import, in the plugins' order, keras's backend after keras."""
    wanted: list[str] = []
    for plugin in topology.get("plugins") or []:
        name = str(plugin.get("name"))
        for module in PLUGIN_FRAMEWORKS.get(name, ()):
            wanted.append(module)
        if name == "keras":
            backend = str((plugin.get("options") or {}).get("backend", KERAS_DEFAULT_BACKEND))
            os.environ.setdefault("KERAS_BACKEND", backend)
            if backend in GPU_COUNTERS:
                wanted.append(backend)
    return list(dict.fromkeys(wanted))


def expected_gpus(topology: dict[str, Any], index: int) -> int:
    for node in topology.get("nodes") or []:
        if node.get("index") == index:
            accelerator = node.get("accelerator") or {}
            return int(accelerator.get("count", 0))
    raise LookupError(f"node {index} is not in the topology")


def check(modules: list[str], gpus: int) -> list[str]:
    """The problems found (empty: the node is fit); prints what was seen."""
    problems: list[str] = []
    python = ".".join(map(str, sys.version_info[:3]))
    for module in modules:
        try:
            imported = importlib.import_module(module)
        except Exception as err:  # any import failure makes the node unfit
            problems.append(f"{module} does not import with Python {python}: {err!r}")
            continue
        version = getattr(imported, "__version__", "?")
        if gpus and module in GPU_COUNTERS:
            try:
                seen = GPU_COUNTERS[module]()
            except Exception as err:  # a broken CUDA setup raises here
                problems.append(f"{module} {version} cannot list GPUs: {err!r}")
                continue
            print(f"check-node: {module} {version} sees {seen} of {gpus} GPU(s)")
            if seen != gpus:
                problems.append(
                    f"{module} {version} sees {seen} GPU(s) but this node has {gpus} (topology): "
                    f"a CPU-only or wrong-CUDA build (check aws.jax_extra and the node's "
                    f"driver), or a Python ({python}) too old for a current release"
                )
        else:
            print(f"check-node: {module} {version} imports")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    try:
        with open(argv[0], encoding="utf-8") as f:
            topology = json.load(f)
        gpus = expected_gpus(topology, int(argv[1]))
        modules = frameworks(topology)
    except (OSError, ValueError, LookupError, AttributeError, TypeError) as err:
        print(f"check-node: cannot read the topology {argv[0]}: {err}", file=sys.stderr)
        return 2
    problems = check(modules, gpus)
    for problem in problems:
        print(f"check-node: {problem}", file=sys.stderr)
    return 3 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
