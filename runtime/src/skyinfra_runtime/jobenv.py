"""A job's own environment variables (a user's ``env`` and secrets): which names a user may
set, and how a secret's value is masked in output.

The names the runtime and its plugins set for every worker are not the user's to set: the
topology's (``SKYINFRA_*``), torchrun's rank variables (torchrun.py, set by the torch plugin)
and JAX's (plugins/jax.py). A user's value there would be overwritten, or would break the
rendezvous, so it is refused before anything starts. Standard library only: this runs on the
nodes, and the operator checks names with the same rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# Shell-safe: what `export NAME=...` accepts in every POSIX shell.
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NAME_EXPECTED = "letters, digits and '_', not starting with a digit (a shell variable name)"
RESERVED_PREFIX = "SKYINFRA_"
# torchrun.torchrun_env's rank and rendezvous variables (not the three a user's value wins
# for: OMP_NUM_THREADS, TORCH_NCCL_ASYNC_ERROR_HANDLING, TORCHELASTIC_SIGNALS_TO_HANDLE).
TORCH_NAMES = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "GROUP_RANK",
        "ROLE_RANK",
        "ROLE_NAME",
        "LOCAL_WORLD_SIZE",
        "WORLD_SIZE",
        "GROUP_WORLD_SIZE",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "NODE_RANK",
        "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS",
        "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_USE_AGENT_STORE",
        "TORCHELASTIC_ERROR_FILE",
    }
)
# plugins.jax.jax_env's variables.
JAX_NAMES = frozenset(
    {"JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_LOCAL_DEVICE_IDS"}
)
# The node's Python environment: the runtime runs from the node's venv.
PYTHON_NAMES = frozenset({"PATH", "VIRTUAL_ENV", "PYTHONHOME"})
RESERVED = TORCH_NAMES | JAX_NAMES | PYTHON_NAMES

MASK = "***"
# Shorter values are not masked in output (masking "a" would garble every line).
MIN_MASKED = 4


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a job's variable (None: it can), in words naming what is valid."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        return f"a variable name: {NAME_EXPECTED}"
    if name.upper().startswith(RESERVED_PREFIX):
        return f"a name not starting with {RESERVED_PREFIX} (skyinfra's own variables)"
    if name in TORCH_NAMES:
        return "a name the runtime does not set: the torch plugin sets the rank variables"
    if name in JAX_NAMES:
        return "a name the runtime does not set: the jax plugin sets JAX's process variables"
    if name in PYTHON_NAMES:
        return "a name the runtime does not set: nodes run the runtime from their own venv"
    return None


def value_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return 'a string (quote numbers: "4")'
    if "\0" in value:
        return "a string without NUL characters"
    return None


def masks(secrets: Iterable[str]) -> list[bytes]:
    """The byte strings to hide: each secret, and each line of a multi-line one, longest
    first (a secret that contains another is masked whole)."""
    found: set[bytes] = set()
    for value in secrets:
        for part in (value, *value.splitlines()):
            if len(part) >= MIN_MASKED:
                found.add(part.encode())
    return sorted(found, key=len, reverse=True)


def mask_bytes(data: bytes, hidden: Iterable[bytes]) -> bytes:
    for value in hidden:
        data = data.replace(value, MASK.encode())
    return data


def mask_text(text: str, secrets: Iterable[str]) -> str:
    return mask_bytes(text.encode(), masks(secrets)).decode(errors="replace")


# The names (never the values) of a job's secrets, in its workers' environment: what a
# worker masks in the value it returns before that is written anywhere.
SECRET_NAMES_ENV = "SKYINFRA_SECRET_NAMES"


def secret_names_env(secrets: Iterable[str]) -> dict[str, str]:
    """The workers' variable naming the job's secrets (empty: no variable)."""
    names = sorted(secrets)
    return {SECRET_NAMES_ENV: ",".join(names)} if names else {}


def mask_value(value: Any, environ: Mapping[str, str]) -> Any:
    """A JSON value (what a function entry returned) with every string masked as output lines
    are: each secret named by $SKYINFRA_SECRET_NAMES, taken from ``environ``, and each line
    of one, becomes ***, in keys and values at any depth."""
    names = [n for n in environ.get(SECRET_NAMES_ENV, "").split(",") if n]
    hidden = masks(environ[n] for n in names if n in environ)
    if not hidden:
        return value

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return mask_bytes(item.encode(errors="surrogatepass"), hidden).decode(
                errors="surrogatepass"
            )
        if isinstance(item, list):
            return [walk(x) for x in item]
        if isinstance(item, dict):
            return {walk(k): walk(v) for k, v in item.items()}
        return item

    return walk(value)
