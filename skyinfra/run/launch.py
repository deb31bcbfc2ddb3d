"""What a launch of code on a cluster carries (`skyinfra run`, the Python API, a recovery)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from skyinfra_runtime.s3 import Credentials
from skyinfra_runtime.topology import Topology

from skyinfra.run import DEFAULT_KEEP_RUNS
from skyinfra.run.head_recovery import HeadRecovery
from skyinfra.run.jobenv import JobEnv
from skyinfra.transport.base import NodeTransport


@dataclass(frozen=True)
class Restarts:
    """How often the head's supervisor restarts a failed job on the same nodes, and after
    which failures (skyinfra_runtime.restarts); ``head_recovery``: what the head runs itself
    when the job lost nodes with restarts left (None: it waits for `jobs recover`)."""

    max_restarts: int = 0
    retry_on: str = "signal"
    head_recovery: HeadRecovery | None = None


@dataclass(frozen=True)
class JobLaunch:
    """What one launch of code on a cluster carries, built once by `skyinfra run`, the Python
    API or a job's recovery and passed whole (skyinfra.run.session.run_on_cluster).

    ``entry``/``args``: what runs (ENTRY [-- ARGS]); ``src``: the folder copied to every node.
    ``job_env``: the user's env and secrets, for a job only (secrets reach the nodes on the
    agents' stdin). ``checkpoints``: the job's checkpoint set's name (None: the job id).
    ``restarts``: how often the head's supervisor restarts the job after a failure (a job
    only; None: never). ``run_files``: name -> local file, put in every node's run directory
    (beside work/) after the copy: the Python API's pickled call (ENTRY ``../call.pkl``,
    skyinfra_runtime.call). ``timeout_s``: end every node when the run (from the start of the
    nodes) takes longer. ``keep_runs``: run directories each node keeps (0: all).
    ``as_job``: the nodes run the job (skyinfra.run.job), this process follows it and can go
    (SIGHUP: ``Detached``) without ending it; ``detach``: start the job, return once every
    node started. ``all_logs``: stream every node's output, not only node 0's.
    ``extra_ignores``: patterns left out of the copy besides .skyinfraignore's.
    ``copy_cache``: where the project's file hashes are kept between runs (tree.scan; None:
    hash every file). ``world``: a job on that many of the cluster's nodes, any free ones the
    head picks as it starts it (None: every node); ``on``: exactly those nodes, in rank order,
    once they are free (the Python API's ``nodes=[...]``). ``priority``: its place in the head's
    queue (higher first; it may preempt lower-priority jobs: skyinfra_runtime.jobprio).
    ``store_credentials``: what the nodes' agents sign their checkpoint store's requests with
    (the target's store_credentials: the ssh target's hosts have no role), on their stdin
    with the secrets; None: the nodes have their own."""

    entry: str
    src: Path
    args: tuple[str, ...] = ()
    job_env: JobEnv = field(default_factory=JobEnv)
    checkpoints: str | None = None
    restarts: Restarts | None = None
    run_files: Mapping[str, Path] = field(default_factory=dict)
    timeout_s: float | None = None
    keep_runs: int = DEFAULT_KEEP_RUNS
    as_job: bool = False
    detach: bool = False
    all_logs: bool = False
    extra_ignores: tuple[str, ...] = ()
    copy_cache: Path | None = None
    world: int | None = None
    on: tuple[int, ...] | None = None
    priority: int = 0
    store_credentials: Credentials | None = field(default=None, repr=False)
    # Ctrl-C on an attached run while its job waits in the queue cancels it (default: left).
    ctrl_c_cancels_queued: bool = False

    @property
    def is_job(self) -> bool:
        """The nodes run a job (skyinfra.run.job) that outlives this process."""
        return self.as_job or self.detach


# Replaces a job's lost nodes (their indexes): the transport and topology to go on with.
ReplaceNodes = Callable[[list[int]], tuple[NodeTransport, Topology]]
# The cluster as it is now (its transport and topology), after someone else replaced nodes.
ReloadNodes = Callable[[], tuple[NodeTransport, Topology]]


@dataclass(frozen=True)
class ClusterNodes:
    """The cluster a launch runs on: its nodes' transport and topology, the topology's file
    (copied to every node) and the workspace's runs/ folder. ``replace_nodes``: when a job
    lost a node and restarts are left (state needs_nodes), called with the lost nodes; it
    replaces them (Terraform, as `up`) and gives the transport and topology to go on with
    (None: the job ends needs_nodes). ``reload_nodes``: the cluster as it is now, after node
    0 replaced nodes itself (unattended recovery)."""

    transport: NodeTransport
    topology: Topology
    topology_file: Path
    runs_dir: Path
    replace_nodes: ReplaceNodes | None = None
    reload_nodes: ReloadNodes | None = None
