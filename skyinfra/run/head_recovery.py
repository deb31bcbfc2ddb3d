"""Unattended recovery (issue 26): node 0's supervisor replaces a job's lost nodes itself.

A detached job that loses a node (its machine gone, or a Spot notice) ends its attempt and
waits as ``needs_nodes``. Without this, someone has to run `skyinfra jobs recover JOB`; at
3 a.m. nobody does. With the target's ``recover`` on, the job carries a ``HeadRecovery``: the
command node 0's supervisor runs once the attempt has ended that way (the runtime runs it; it
never imports skyinfra). The command is `skyinfra jobs recover --unattended JOB`: the node is
replaced as `up` replaces it, the project copied from node 0's copy of it, and the job started
as its next attempt, with its env from the record and its secrets from the supervisor's memory
(handed to the command's environment, never written down or put on a command line).

What travels with the job (on the agents' stdin, with the token and the secrets, not in the
record): the command's argv (the job id is appended) and the settings it needs from the
operator's environment (where Terraform's providers and caches are; never a credential).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# In the command and its settings: node 0's directory, which the runtime fills in there.
from skyinfra.transport.base import NodeTransport

# The operator's settings the recovery command needs as `up` had them: where skyinfra keeps
# clusters and caches, which Terraform and provider mirror it uses, its Go settings.
# SKYINFRA_NODE* and the shared dir are a node process's own, not the operator's.
_SETTINGS = ("TF_CLI_CONFIG_FILE", "TF_PLUGIN_CACHE_DIR", "GOGC", "GOMEMLIMIT", "PATH", "HOME")
_NODE_OWN = ("SKYINFRA_NODE", "SKYINFRA_SHARED_DIR", "SKYINFRA_LOCAL_NODE_DIR")


@dataclass(frozen=True)
class HeadRecovery:
    """The command node 0's supervisor runs (with the job's id appended) when the job lost
    nodes and has a restart left, and the environment it runs in (the job's secrets added)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    # What must be on node 0 before the job starts (AWS: the kit, targets/aws/head.py),
    # given the cluster's transport; None: nothing (the local target, or node 0 itself).
    prepare: Callable[[NodeTransport], None] | None = field(default=None, compare=False)
    # Whether an attached `run` leaves the recovery to node 0 and follows its attempt (AWS:
    # two replacing the same node would race). On the local target the attached run holds
    # the workspace node 0's command needs, so it recovers the job itself, as without this.
    attached_run_waits: bool = False

    def private(self) -> dict[str, Any]:
        """As the agents' stdin carries it (skyinfra_runtime.jobs.supervise.read_private)."""
        return {"argv": list(self.argv), "env": dict(self.env)}


def operator_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The part of the operator's environment a recovery command run elsewhere needs."""
    environ = os.environ if environ is None else environ
    return {
        k: v
        for k, v in sorted(environ.items())
        if k in _SETTINGS or (k.startswith("SKYINFRA_") and not k.startswith(_NODE_OWN))
    }
