"""torch plugin: torchrun's environment on every worker; for a function entry also
``init_process_group`` before it and ``destroy_process_group`` after.

A script or ``-m`` entry runs as under torchrun: it gets the environment and calls
``init_process_group`` itself (the plugin leaves the group alone). Mixing the two (a function
entry that initialises again, a script that expects the plugin's group) ends with the
framework's own error plus one line from :meth:`TorchPlugin.explain` saying how to choose.

Rank 0's worker hosts the rendezvous store (torch's TCPStore) itself, as torchrun's agent
does, and every worker is told so (``TORCHELASTIC_USE_AGENT_STORE=True``, torchrun.py): it
listens on the head's own address, where torch's own would listen on every interface and so
meet the rendezvous of another cluster on the same machine and port.
"""

from __future__ import annotations

import errno
import os
import socket
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

from skyinfra_runtime.devices import torch_device
from skyinfra_runtime.errors import PluginError
from skyinfra_runtime.info import InstanceInfo
from skyinfra_runtime.plugin_table import validate_plugin
from skyinfra_runtime.plugins.base import gloo_address, init_timeout, interface_of
from skyinfra_runtime.rundirs import RUN_ID_ENV
from skyinfra_runtime.topology import Topology
from skyinfra_runtime.torchrun import torchrun_env

# torch's messages (torch/distributed/distributed_c10d.py) for the two mixed cases.
_TWICE = "trying to initialize the default process group twice"
_NOT_INITIALIZED = "Default process group has not been initialized"
# The interface gloo binds to and gives its peers (torch's own variable; a user's value wins).
GLOO_IFNAME_ENV = "GLOO_SOCKET_IFNAME"


@dataclass
class TorchPlugin:
    backend: str | None = None
    init_timeout: float | str | None = None
    name: str = field(default="torch", init=False)
    # The worker leaves after the atexit hooks, before the interpreter's teardown destroys a
    # process group that outlived destroy_process_group() (skyinfra_runtime.worker).
    end_before_teardown: ClassVar[bool] = True
    _initialized: bool = field(default=False, init=False, repr=False)
    _script: bool = field(default=False, init=False, repr=False)
    # Rank 0's rendezvous store (it owns its listening socket): alive until teardown.
    _store: Any = field(default=None, init=False, repr=False)
    # Every process group the job made (the plugin's and the user's): released in teardown.
    _groups: list[Any] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        validate_plugin(
            "torch",
            {
                k: v
                for k, v in (("backend", self.backend), ("init_timeout", self.init_timeout))
                if v is not None
            },
        )

    def setup(self, info: InstanceInfo, topology: Topology, script: bool = False) -> None:
        timeout = init_timeout(self.init_timeout)
        self._script = script
        # Before `import torch`: OMP_NUM_THREADS is read when torch loads its OpenMP runtime.
        os.environ.update(
            torchrun_env(
                node=info.node,
                nodes=info.total_nodes,
                local_rank=info.worker,
                procs_per_node=info.workers_per_node,
                master_addr=topology.head_addr,
                master_port=topology.torch_port,
                run_id=os.environ.get(RUN_ID_ENV),
                inherited=os.environ,
            )
        )
        _gloo_on_own_interface(topology, info.node)
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            raise PluginError("plugin 'torch' needs torch installed on the node") from None
        keep_process_groups(dist, self._groups)
        device = None
        if torch.cuda.is_available():
            # Refused before any wait when two processes would share a GPU (NCCL can hang).
            device = torch_device(info.worker, info.workers_per_node, torch.cuda.device_count())
        if info.global_index == 0:  # the store every rank's rendezvous uses (torchrun_env)
            self._host_store(dist, topology, timeout)
        if script:
            return  # the script calls init_process_group itself, as under torchrun
        backend = self.backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":
            if device is None:
                raise PluginError("torch backend 'nccl' needs CUDA, which this node does not have")
            # One process per GPU: pin it before the process group touches a device.
            torch.cuda.set_device(device)
        try:
            dist.init_process_group(
                backend=backend, init_method="env://", timeout=timedelta(seconds=timeout)
            )
        except Exception as exc:
            raise PluginError(
                f"torch init_process_group({backend!r}) failed for rank {info.global_index} of"
                f" {info.total_workers} (rendezvous {topology.head_addr}:{topology.torch_port},"
                f" timeout {timeout:g}s): {exc}"
            ) from exc
        self._initialized = True
        # Every rank past its init before any goes on. torch 2.x has no barrier there
        # (TORCH_DIST_INIT_BARRIER is 0 by default): a rank whose function ended at once closed
        # its connections while a slower peer was still connecting to it, and that peer's
        # init failed (gloo: "connectFullMesh failed ... Connection closed by peer").
        try:
            dist.barrier(device_ids=[device] if backend == "nccl" else None)
        except Exception as exc:
            raise PluginError(
                f"torch barrier after init_process_group({backend!r}) failed for rank"
                f" {info.global_index} of {info.total_workers}: {exc}"
            ) from exc

    def _host_store(self, dist: Any, topology: Topology, timeout: float) -> None:
        """The rendezvous store on head_addr:torch_port, served by this (rank 0's) process."""
        listener = rendezvous_listener(topology.head_addr, topology.torch_port)
        try:
            self._store = dist.TCPStore(
                topology.head_addr,
                topology.torch_port,
                is_master=True,
                wait_for_workers=False,
                timeout=timedelta(seconds=timeout),
                master_listen_fd=listener.fileno(),
            )
        except Exception as exc:
            listener.close()
            raise PluginError(
                f"torch rendezvous store on {topology.head_addr}:{topology.torch_port} could"
                f" not start: {exc}"
            ) from exc
        listener.detach()  # the store closes the descriptor when it goes (teardown)

    def explain(self, exc: BaseException) -> str | None:
        """One line on how to choose, when the user's code failed on the process group."""
        text = str(exc)
        if self._initialized and _TWICE in text:
            return (
                "it had already called init_process_group for this function entry"
                " (module:function or script.py:function); either drop your own"
                " init_process_group call and use the plugin's group, or run the file as a"
                " script (`skyinfra run train.py -- ARGS` or `-m package.module`): a script gets"
                " torchrun's environment and initialises the group itself"
            )
        if self._script and _NOT_INITIALIZED in text:
            return (
                "a script entry runs as under torchrun: it set RANK, WORLD_SIZE, MASTER_ADDR,"
                " MASTER_PORT... and leaves init_process_group to the script;"
                ' call dist.init_process_group() in it (e.g. "gloo" on CPU, "nccl" on GPU),'
                " or name a function (script.py:main) to have the plugin initialise the group"
                " around it"
            )
        return None

    def teardown(self, failed: bool = False) -> None:
        if self._initialized:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self._initialized = False
        # Last: with the user's DDP gone, these are the groups' last holders, and torch's
        # Python handle releases the GIL while its destructor joins gloo's threads.
        self._groups.clear()
        self._store = None  # stops serving and closes its socket (the peers are past it)


class _KeepingGroups(dict[Any, Any]):
    """torch's map of live process groups (distributed_c10d._pg_map) that also appends each
    group it is given to ``kept``, which outlives destroy_process_group()."""

    def __init__(self, live: dict[Any, Any], kept: list[Any]) -> None:
        super().__init__(live)
        self.kept = kept
        kept.extend(live)

    def __setitem__(self, group: Any, value: Any) -> None:
        self.kept.append(group)
        super().__setitem__(group, value)


def keep_process_groups(dist: Any, kept: list[Any]) -> None:
    """Hold every process group made in this process in ``kept`` (Python handles) until the
    plugin's teardown releases them.

    A gloo group destroyed from a C++ holder with the GIL held (DDP's Reducer, when the user's
    model outlives destroy_process_group() and goes with a function's locals or a script's
    namespace) joins gloo's threads while one of them may wait for the GIL, to drop the
    Python context that autograd stashed in a collective's thread state: the worker hangs.
    torch's Python handle releases the GIL in that destructor, so the plugin makes it the last
    holder. Left alone where torch has no such map (another version)."""
    c10d = getattr(dist, "distributed_c10d", None)
    live = getattr(c10d, "_pg_map", None)
    if c10d is not None and type(live) is dict:
        c10d._pg_map = _KeepingGroups(live, kept)


def rendezvous_listener(head_addr: str, port: int) -> socket.socket:
    """A listening socket on head_addr:port when this machine has that address (a real head,
    or a local cluster's loopback address); on every interface elsewhere (a stand-in node whose
    topology names an address of the emulated network), as torch's own store would. PluginError
    when the port is taken."""
    family = socket.AF_INET6 if ":" in head_addr else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TCPStore's own
    try:
        try:
            listener.bind((head_addr, port))
        except OSError as err:
            if err.errno != errno.EADDRNOTAVAIL:
                raise
            listener.bind(("", port))
        listener.listen(socket.SOMAXCONN)
    except OSError as err:
        listener.close()
        raise PluginError(
            f"torch rendezvous port {head_addr}:{port} cannot be listened on: {err.strerror}"
            " (another process holds it? `skyinfra verify` names it)"
        ) from None
    return listener


def _gloo_on_own_interface(topology: Topology, node: int) -> None:
    """gloo (a function entry's group, and a script's own) on the interface holding the
    node's address: by default it takes the address the hostname resolves to, on many
    machines a loopback one that the other hosts cannot reach."""
    own = gloo_address(topology, node)
    name = interface_of(own) if own else None
    if name and GLOO_IFNAME_ENV not in os.environ:
        os.environ[GLOO_IFNAME_ENV] = name
