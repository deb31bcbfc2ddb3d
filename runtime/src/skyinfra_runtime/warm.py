"""Warm workers' decisions (pure): what a node's standby imports, what environment it is
started with, and whether a job may use it or must start cold.

A standby is an interpreter started (never forked) in the node's environment that imported
the frameworks the cluster's plugins name and initialised nothing (no distributed runtime,
device or backend). A job may use one only when nothing it sets would have changed those
imports: a framework variable read at import time (``KERAS_BACKEND``, ``XLA_FLAGS``,
``JAX_*``, ``OMP_NUM_THREADS``, ...) or an interpreter one (``PYTHON*``, read when the
interpreter starts). The processes live in standbys.py and standby.py.

torch reads OMP_NUM_THREADS once, as it is imported (its intra-op thread count; setting the
variable later changes nothing), and the torch plugin chooses it per node from the worker
count (torchrun's 1 with several): a torch standby imports torch with the value the plugin
would set, which is part of its key, so a job with another worker count starts cold. It
touches no other thread setting: the inter-op pool is sized on first use, in the job.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyinfra_runtime import startwork
from skyinfra_runtime.topology import PluginRef
from skyinfra_runtime.torchrun import OMP_NUM_THREADS, omp_num_threads

# Read when a framework is imported (or its backend chosen): a job that sets one starts cold.
FRAMEWORK_NAMES = frozenset({"KERAS_BACKEND", "XLA_FLAGS", "JAX_PLATFORMS"})
FRAMEWORK_PREFIXES = (
    *("JAX_", "XLA_", "KERAS_", "TORCH_", "PYTORCH_", "CUDA_", "NCCL_"),
    # torch._dynamo's and inductor's configs, read as a torch standby imports them.
    *("TORCHDYNAMO_", "TORCHINDUCTOR_"),
    # Thread pools sized as their library loads (torch's OpenMP and MKL, NumPy's OpenBLAS).
    *("OMP_", "MKL_", "OPENBLAS_"),
)
# What a torch standby imports: torch, and torch._dynamo, which DDP's construction imports
# (about 1 s of CPU). The torch plugin keeps a job's process groups from being destroyed
# with the GIL held (plugins/torch.py), which, with dynamo imported first, could hang.
TORCH_IMPORTS = ("torch", "torch._dynamo")
# Read when the interpreter starts (hash seed, unbuffered output, warnings, ...).
INTERPRETER_PREFIX = "PYTHON"
# The launcher puts the project on the workers' PYTHONPATH; a standby gets it on sys.path
# when it takes the job, as the interpreter would have put it there.
PATH_NAME = "PYTHONPATH"
# skyinfra's own variables a standby keeps: where the node is (a local node's processes are
# found, and ended by `down`, by the second). Every other SKYINFRA_* belongs to a job.
NODE_NAMES = frozenset({"SKYINFRA_NODE_DIR", "SKYINFRA_LOCAL_NODE_DIR"})
# The names (never the values) of a job's own env and secrets, in its launcher's
# environment: what a standby's environment leaves out.
JOB_ENV_NAMES_ENV = "SKYINFRA_JOB_ENV_NAMES"


@dataclass(frozen=True)
class Warmup:
    """What a standby does before it waits: set these variables, import these modules."""

    imports: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """One string naming it: a standby serves only a job whose warmup has its key."""
        sets = ",".join(f"{k}={v}" for k, v in self.env)
        return f"{'+'.join(self.imports)}|{sets}"

    def to_dict(self) -> dict[str, Any]:
        return {"imports": list(self.imports), "env": [list(kv) for kv in self.env]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Warmup:
        return cls(
            tuple(str(m) for m in data.get("imports", [])),
            tuple((str(k), str(v)) for k, v in data.get("env", [])),
        )


def standby_warmup(
    plugins: Sequence[PluginRef], procs: int = 1, environ: Mapping[str, str] | None = None
) -> Warmup | None:
    """The standby the plugins call for on a node with ``procs`` workers whose environment
    (less the job's own variables) is ``environ``; None: no standby (no framework plugin, or
    keras on tensorflow, whose own start is not warmed)."""
    imports: list[str] = []
    env: list[tuple[str, str]] = []
    for plugin in plugins:
        if plugin.name == "jax":
            imports.append(plugin.name)
        if plugin.name == "torch":
            imports += TORCH_IMPORTS
            threads = omp_num_threads(procs, environ or {})
            if threads is not None:  # what the plugin sets before a cold worker imports torch
                env.append((OMP_NUM_THREADS, threads))
        elif plugin.name == "keras":
            backend = str(plugin.options.get("backend", "jax"))
            if backend not in ("jax", "torch"):
                return None
            env.append(("KERAS_BACKEND", backend))
            imports += [backend, "keras"]
    if not imports:
        return None
    return Warmup(tuple(dict.fromkeys(imports)), tuple(dict.fromkeys(env)))


def node_warmup(
    plugins: Sequence[PluginRef], procs: int, environ: Mapping[str, str]
) -> Warmup | None:
    """The standby a node keeps for a job of ``procs`` workers, the one both the launcher
    asks for and `warm-up` starts (one place, so that their keys always match): the plugins'
    warmup in the node's environment ``environ`` less the job's own variables."""
    return standby_warmup(plugins, procs, standby_env(environ))


def import_sensitive(name: str) -> bool:
    """A variable read by the frameworks' imports or by the interpreter's start."""
    return (
        name in FRAMEWORK_NAMES
        or name.startswith(FRAMEWORK_PREFIXES)
        or (name.startswith(INTERPRETER_PREFIX) and name != PATH_NAME)
    )


def job_sets_framework(job_names: Iterable[str]) -> str | None:
    """Why a job whose own env and secrets have these names starts cold (None: it need not)."""
    for name in sorted(job_names):
        if import_sensitive(name):
            return f"the job sets {name}, which is read before or when a framework is imported"
    return None


def cold_reason(
    job_names: Iterable[str], worker_env: Mapping[str, str], standby_env: Mapping[str, str]
) -> str | None:
    """Why this job's worker must start cold rather than on a standby started with
    ``standby_env`` (None: it may use it). ``job_names``: the job's own env and secrets."""
    reason = job_sets_framework(job_names)
    if reason:
        return reason
    for name in sorted(set(worker_env) | set(standby_env)):
        if import_sensitive(name) and worker_env.get(name) != standby_env.get(name):
            return f"{name} on this node differs from the standby's"
    return None


def job_env_names(environ: Mapping[str, str]) -> list[str]:
    return [n for n in environ.get(JOB_ENV_NAMES_ENV, "").split(",") if n]


def standby_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The node's environment for standbys: the launcher's, less the job's own variables
    and secrets, skyinfra's per-job variables, and PYTHONPATH (the project's, per job)."""
    job = set(job_env_names(environ))
    return {
        name: value
        for name, value in environ.items()
        if name not in job
        and name != PATH_NAME
        and (not name.startswith("SKYINFRA_") or name in NODE_NAMES)
    }


def job_names_env(names: Iterable[str]) -> dict[str, str]:
    """The launcher's variable naming the job's env and secrets (empty: none)."""
    joined = ",".join(sorted(names))
    return {JOB_ENV_NAMES_ENV: joined} if joined else {}


def nodes_on_host(addresses: Sequence[str], mine: str) -> int:
    """How many of a job's nodes share this node's host: those at its address, and every
    loopback one when its own is (a local cluster's nodes, each at its own 127.x address)."""

    def loopback(address: str) -> bool:
        try:
            return ipaddress.ip_address(address).is_loopback
        except ValueError:  # a name, not an address: only an equal one is the same host
            return False

    return sum(1 for a in addresses if a == mine or (loopback(a) and loopback(mine)))


def cores_to_spare(cores: int, nodes_on_host: int, procs: int) -> bool:
    """Whether a node has cores beyond its worker slots: its share of the host's cores (see
    nodes_on_host) more than its workers. Such a node
    asks for standbys as a job starts and refills a taken one at once, so that a restart
    within the job (its first included) starts warm; any other waits until the job's workers
    there are past their start (past_start), so that standbys' imports never compete with
    the job's own start, and a restart later in the job still starts warm."""
    return cores // max(1, nodes_on_host) > procs


# How long every worker of a job on a node without cores to spare must have run its entry
# with no start-up work (a compile) before the node's standbys are refilled beside it: the
# gaps between a Keras model's compiles and its first step's are well under a second.
START_QUIET_S = 3.0


def past_start(
    phases: Sequence[tuple[str, float] | None], now: float, quiet_s: float = START_QUIET_S
) -> bool:
    """Whether every worker on a node is past its start: each is done, or runs its entry and
    did no start-up work for ``quiet_s``. ``phases``: each worker's phase and the time it
    last entered one or did start-up work (its status file; None: none written yet)."""
    return all(
        phase is not None
        and (
            phase[0] == startwork.DONE
            or (phase[0] == startwork.RUNNING and now - phase[1] >= quiet_s)
        )
        for phase in phases
    )


def slots_to_fill(slots: int, waiting: Iterable[int], taken: Iterable[int]) -> list[int]:
    """The keeper's slots to start a standby in: those with none waiting, less those whose
    standby a job took since the launcher last asked (it asks again after the job, or at once
    on a node with cores to spare); a standby that died waiting is replaced at once."""
    busy = set(waiting) | set(taken)
    return [slot for slot in range(slots) if slot not in busy]


# A node's standby folder: the names a standby (standby.py), its keeper and the launchers
# (standbys.py) find each other by.
def socket_path(folder: Path, slot: int, pid: int) -> Path:
    return folder / f"w{slot}-{pid}.sock"


def importing_path(folder: Path, slot: int, pid: int) -> Path:
    """The socket's name while the standby imports (connectable: the launcher may wait)."""
    return folder / f"w{slot}-{pid}.importing"


def taken_file(folder: Path, pid: int) -> Path:
    """Written by a standby as it takes a job: its keeper then waits for it as a worker."""
    return folder / f"taken-{pid}"
