"""Whether the plugins' frameworks import where local nodes will look for them.

A local node's environment holds the runtime wheel and the spec's python_packages, and sees
the site-packages of the interpreter it is made from (``local.python``, else the operator's
own): jax, keras and torch come from there. An installation without them would bring the
nodes up ready and fail only at `run`; `validate` and `up` ask that interpreter first.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from skyinfra.errors import MissingFrameworkError, SpecError
from skyinfra.spec import ClusterSpec

# Finds each module named in argv without importing it (importing jax or torch takes
# seconds); -I: the interpreter's own paths, as a node sees them (no user site, no
# PYTHONPATH, not the current directory).
PROBE = (
    "import importlib.util, sys; "
    "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
)
PROBE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Framework:
    module: str
    # The distributions that provide the module: one of them in python_packages installs it.
    distributions: tuple[str, ...]
    install: str  # what to give `pip install` (shell words)


FRAMEWORKS = {
    "jax": Framework("jax", ("jax",), '"jax[cpu]"'),
    "keras": Framework("keras", ("keras",), "keras"),
    # The CPU build: PyPI's torch is the CUDA build (several GB of nvidia-* packages).
    "torch": Framework(
        "torch", ("torch",), "torch --index-url https://download.pytorch.org/whl/cpu"
    ),
    "tensorflow": Framework("tensorflow", ("tensorflow", "tensorflow-cpu"), "tensorflow"),
}
# The keras plugin's backend when the spec names none (the runtime's plugin table).
KERAS_DEFAULT_BACKEND = "jax"


@dataclass(frozen=True)
class Need:
    field: str  # where the spec asks for it: plugins[0], plugins[1].options.backend
    value: str
    what: str  # the same in words: plugin 'jax', keras backend 'torch'
    framework: Framework


def needs(spec: ClusterSpec) -> list[Need]:
    """Each framework the plugins need, once, where the spec first asks for it."""
    found: dict[str, Need] = {}
    for i, plugin in enumerate(spec.plugins):
        wanted = [(f"plugins[{i}]", plugin.name, f"plugin {plugin.name!r}")]
        if plugin.name == "keras":
            backend = str(plugin.options.get("backend", KERAS_DEFAULT_BACKEND))
            wanted.append((f"plugins[{i}].options.backend", backend, f"keras backend {backend!r}"))
        for field, module, what in wanted:
            if module in FRAMEWORKS and module not in found:
                found[module] = Need(field, module, what, FRAMEWORKS[module])
    return list(found.values())


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements: Sequence[str]) -> set[str]:
    """The project names of pip requirements such as ``jax[cpu]==0.4.30`` (canonical)."""
    names = set()
    for requirement in requirements:
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
        if match:
            names.add(_canonical(match.group(0)))
    return names


def missing_modules(python: str, modules: Sequence[str]) -> list[str]:
    """The ``modules`` that ``python`` cannot find (none asked: no process)."""
    if not modules:
        return []
    try:
        probe = subprocess.run(
            [python, "-I", "-c", PROBE, *modules],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SpecError("local.python", python, f"a Python interpreter that runs ({err})") from None
    if probe.returncode != 0:
        said = (probe.stderr.strip().splitlines() or ["no message"])[-1]
        raise SpecError(
            "local.python",
            python,
            f"a Python interpreter that runs (it exited {probe.returncode}: {said})",
        )
    return probe.stdout.split()


def framework_problems(spec: ClusterSpec, python: str) -> list[SpecError]:
    """A MissingFrameworkError for each framework the plugins need that neither ``python``
    (the nodes' interpreter) has nor the spec's python_packages install."""
    installed_on_nodes = requirement_names(spec.python_packages)
    wanted = [
        need
        for need in needs(spec)
        if not installed_on_nodes & {_canonical(d) for d in need.framework.distributions}
    ]
    missing = set(missing_modules(python, [n.framework.module for n in wanted]))
    return [
        MissingFrameworkError(
            need.field,
            need.value,
            what=need.what,
            needs=need.framework.module,
            python=shlex.quote(python),
            install=need.framework.install,
        )
        for need in wanted
        if need.framework.module in missing
    ]
