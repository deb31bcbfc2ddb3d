"""The environment torchrun gives each worker, built for one worker of a skyinfra cluster.

The set is torch's own: ``LocalElasticAgent._start_workers``
(torch/distributed/elastic/agent/server/local_elastic_agent.py, torch 2.13) plus what torchrun
sets for its workers around it (``TORCHELASTIC_ERROR_FILE`` in elastic/multiprocessing/api.py,
``TORCHELASTIC_SIGNALS_TO_HANDLE`` in launcher/api.py, ``OMP_NUM_THREADS=1`` with several
processes per node in run.py). ``TORCHELASTIC_RUN_ID`` is what
``torch.distributed.is_torchelastic_launched()`` checks (Lightning and Accelerate use it).

``TORCHELASTIC_USE_AGENT_STORE=True`` as torchrun's: the torch plugin in rank 0's worker hosts
the TCPStore on ``MASTER_ADDR:MASTER_PORT`` as torchrun's agent does (on the head's own address,
not every interface), so every ``init_process_group`` connects to it as a client
(torch/distributed/rendezvous.py, ``_create_c10d_store``).

One value differs from torchrun's, on purpose:
- ``TORCHELASTIC_ERROR_FILE=""``: no agent reads an error file (torchrun's own value when it
  keeps no logs); the worker's traceback goes to the run's log instead.
``NODE_RANK`` is added (torchrun's ``--node-rank``; Lightning reads it).
"""

from __future__ import annotations

from collections.abc import Mapping

# What torchrun writes when no run id is given (--rdzv-id defaults to "none").
DEFAULT_RUN_ID = "none"
SIGNALS_TO_HANDLE = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
OMP_NUM_THREADS = "OMP_NUM_THREADS"


def torchrun_env(
    *,
    node: int,
    nodes: int,
    local_rank: int,
    procs_per_node: int,
    master_addr: str,
    master_port: int,
    run_id: str | None,
    inherited: Mapping[str, str],
) -> dict[str, str]:
    """The variables for worker ``local_rank`` on ``node``; ``inherited`` is the environment
    the worker starts with (a user's OMP_NUM_THREADS or TORCH_NCCL_ASYNC_ERROR_HANDLING wins,
    as under torchrun)."""
    rank = node * procs_per_node + local_rank
    world = nodes * procs_per_node
    env = {
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "GROUP_RANK": str(node),
        "ROLE_RANK": str(rank),
        "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": str(procs_per_node),
        "WORLD_SIZE": str(world),
        "GROUP_WORLD_SIZE": str(nodes),
        "ROLE_WORLD_SIZE": str(world),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        # Restarts so far: the job's attempt (SKYINFRA_ATTEMPT, set by the node's agent) - 1.
        "TORCHELASTIC_RESTART_COUNT": _restarts_so_far(inherited),
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": run_id or DEFAULT_RUN_ID,
        "TORCHELASTIC_USE_AGENT_STORE": str(True),
        "TORCHELASTIC_ERROR_FILE": "",
        "TORCHELASTIC_SIGNALS_TO_HANDLE": inherited.get(
            "TORCHELASTIC_SIGNALS_TO_HANDLE", SIGNALS_TO_HANDLE
        ),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": inherited.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        "NODE_RANK": str(node),
    }
    threads = omp_num_threads(procs_per_node, inherited)
    if threads is not None:
        env[OMP_NUM_THREADS] = threads
    return env


def omp_num_threads(procs_per_node: int, inherited: Mapping[str, str]) -> str | None:
    """The worker's OMP_NUM_THREADS (None: unset): the user's, else torchrun's default of 1
    with several processes per node, so that N processes do not oversubscribe the cores.
    Read when torch loads its OpenMP runtime: a torch standby imports torch with it set."""
    if OMP_NUM_THREADS in inherited:
        return inherited[OMP_NUM_THREADS]
    return "1" if procs_per_node > 1 else None


def _restarts_so_far(inherited: Mapping[str, str]) -> str:
    attempt = inherited.get("SKYINFRA_ATTEMPT", "1")
    return str(int(attempt) - 1) if attempt.isdigit() and int(attempt) >= 1 else "0"
