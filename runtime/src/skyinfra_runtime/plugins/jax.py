"""jax plugin: ``jax.distributed.initialize`` before the user's code, ``shutdown`` after.

Every worker also gets the environment a script reads to initialise JAX itself (with the
option ``initialize = false`` the plugin leaves that to the script):

    JAX_COORDINATOR_ADDRESS  head_addr:head_port (read by jax.distributed.initialize itself)
    JAX_NUM_PROCESSES        every process of the cluster
    JAX_PROCESS_ID           this process's index (node * procs_per_node + worker)
    JAX_LOCAL_DEVICE_IDS     this process's GPUs, only with several processes on a GPU node
                             (read by jax.distributed.initialize itself)

so that ``jax.distributed.initialize(num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
process_id=int(os.environ["JAX_PROCESS_ID"]))`` is all a script needs
(jax/_src/distributed.py reads JAX_COORDINATOR_ADDRESS and JAX_LOCAL_DEVICE_IDS).

Compiled programs are kept on the node (JAX's persistent compilation cache, in
``$SKYINFRA_NODE_DIR/cache/jax``), so the node's next worker (a restart, a resumed job, the
next job of a sweep) loads what an earlier one compiled instead of compiling it again; every
program is kept, however quick its compile. JAX itself writes entries from process 0 only (it
expects one folder every host shares; on CPU the other processes' keys differ from process
0's anyway): the first worker of every node writes to its node's folder too, so that a
restart reaches its first step as soon on node 1 as on node 0. A cache the user configured
(JAX_COMPILATION_CACHE_DIR, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS) is left as JAX runs
it; ``compilation_cache = false`` turns it off.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import ClassVar

from skyinfra_runtime import startwork
from skyinfra_runtime.devices import jax_local_devices, node_gpus
from skyinfra_runtime.errors import PluginError
from skyinfra_runtime.info import InstanceInfo
from skyinfra_runtime.plugin_table import validate_plugin
from skyinfra_runtime.plugins.base import gloo_address, init_timeout
from skyinfra_runtime.rundirs import NODE_DIR_ENV
from skyinfra_runtime.topology import Topology

# jax's message when initialize() runs twice (jax/_src/distributed.py).
_TWICE = "should only be called once"


def jax_env(info: InstanceInfo, topology: Topology) -> dict[str, str]:
    """The variables a multi-process JAX script reads (see the module docstring)."""
    env = {
        "JAX_COORDINATOR_ADDRESS": f"{topology.head_addr}:{topology.jax_port}",
        "JAX_NUM_PROCESSES": str(info.total_workers),
        "JAX_PROCESS_ID": str(info.global_index),
    }
    gpus = node_gpus(info.accelerators, info.provider)
    ids = jax_local_devices(info.worker, info.workers_per_node, gpus)
    if ids is not None:
        env["JAX_LOCAL_DEVICE_IDS"] = ",".join(str(i) for i in ids)
    return env


CACHE_DIR_ENV = "JAX_COMPILATION_CACHE_DIR"
MIN_COMPILE_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


def compilation_cache_settings(environ: Mapping[str, str]) -> dict[str, object]:
    """The jax.config settings for the node's compilation cache, given the worker's
    environment: none where there is no node directory or the user chose a cache directory;
    the compile-time threshold only where the user did not set one (jax keeps only programs
    that took over a second to compile by default; a restart pays for the quick ones too)."""
    node_dir = environ.get(NODE_DIR_ENV)
    if not node_dir or environ.get(CACHE_DIR_ENV):
        return {}
    settings: dict[str, object] = {
        "jax_compilation_cache_dir": os.path.join(node_dir, "cache", "jax")
    }
    if MIN_COMPILE_TIME_ENV not in environ:
        settings["jax_persistent_cache_min_compile_time_secs"] = 0.0
    return settings


def use_compilation_cache(jax: ModuleType, environ: Mapping[str, str], first_on_node: bool) -> None:
    """Apply compilation_cache_settings; a jax too old to know one of them keeps its own. The
    node's first worker also writes the node's folder when it is not process 0."""
    settings = compilation_cache_settings(environ)
    if "jax_compilation_cache_dir" in settings:
        os.makedirs(str(settings["jax_compilation_cache_dir"]), mode=0o700, exist_ok=True)
        if first_on_node:
            _write_cache_from_any_process()
    for name, value in settings.items():
        with contextlib.suppress(AttributeError):
            jax.config.update(name, value)


# jax/_src/compiler.py's writer and jax/_src/compilation_cache.py's put, as jax 0.10 has them: a
# jax whose internals differ keeps its own rule (process 0 writes).
_CACHE_WRITE_PARAMS = (
    "cache_key", "compile_time_secs", "module_name", "backend", "executable", "host_callbacks"
)  # fmt: skip
_PUT_PARAMS = ("cache_key", "module_name", "executable", "backend", "compile_time")


def _write_cache_from_any_process() -> None:
    """Make this process write its compilation cache entries whatever its process index.

    JAX's writer returns at once unless process_id is 0; the rest of its rules (no program
    with host callbacks, none quicker to compile than the threshold) are kept here. Only a
    node's first worker calls this: several writers in one folder could tear an entry.
    """
    import inspect
    import warnings

    try:
        from jax._src import compilation_cache, compiler, distributed
        from jax._src import config as jax_config
    except ImportError:
        return
    write = getattr(compiler, "_cache_write", None)
    put = getattr(compilation_cache, "put_executable_and_time", None)
    must_raise = getattr(compiler, "_should_raise_persistent_cache_error", lambda exc: False)
    threshold = getattr(jax_config, "persistent_cache_min_compile_time_secs", None)
    if write is None or put is None or threshold is None or hasattr(write, "jax_own_writer"):
        return
    try:
        names = (
            tuple(inspect.signature(write).parameters),
            tuple(inspect.signature(put).parameters),
        )
    except (TypeError, ValueError):
        return
    if names != (_CACHE_WRITE_PARAMS, _PUT_PARAMS):
        return

    def write_any_process(
        cache_key: str,
        compile_time_secs: float,
        module_name: str,
        backend: object,
        executable: object,
        host_callbacks: object,
    ) -> None:
        if distributed.global_state.process_id == 0:
            write(cache_key, compile_time_secs, module_name, backend, executable, host_callbacks)
            return
        if host_callbacks or compile_time_secs < threshold.value:
            return
        try:
            put(cache_key, module_name, executable, backend, int(compile_time_secs))
        except Exception as exc:  # as JAX's writer: a cache that cannot be written warns
            if must_raise(exc):
                raise
            warnings.warn(
                f"Error writing persistent compilation cache entry for '{module_name}':"
                f" {type(exc).__name__}: {exc}",
                stacklevel=2,
            )

    write_any_process.jax_own_writer = write  # type: ignore[attr-defined]
    compiler._cache_write = write_any_process


# JAX's duration events for tracing, lowering and compiling a program (a persistent-cache hit
# included): the worker's start-up work, which its launcher waits out before a refill.
_COMPILE_EVENTS = ("/jax/core/compile/", "/jax/compilation_cache/")
_noting_compiles = False


def _note_compiles(jax: ModuleType) -> None:
    """Have every compile of this process move its status file's time (startwork.py)."""
    global _noting_compiles
    if _noting_compiles:
        return

    def listener(event: str, duration_secs: float, **kwargs: object) -> None:
        if event.startswith(_COMPILE_EVENTS):
            startwork.note()

    with contextlib.suppress(AttributeError):  # a jax without monitoring: no note, no harm
        jax.monitoring.register_event_duration_secs_listener(listener)
        _noting_compiles = True


def coordinator_bind_address(topology: Topology) -> str | None:
    """head_addr:jax_port when this machine has the head's address (a real head, or a local
    cluster's loopback address); None elsewhere (a stand-in node whose topology names an
    address of the emulated network), where jax's default, every interface, stays."""
    import socket

    family = socket.AF_INET6 if ":" in topology.head_addr else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((topology.head_addr, 0))
    except OSError:
        return None
    host = f"[{topology.head_addr}]" if family == socket.AF_INET6 else topology.head_addr
    return f"{host}:{topology.jax_port}"


def _gloo_on(address: str) -> None:
    """JAX's CPU client made with gloo advertising ``address``: jax.distributed has no option
    for it, so the CPU backend's factory (jax's own, with this hostname) is registered anew
    before the first computation makes it. An older or newer jax without these: left as is."""
    try:
        from jax._src import distributed, xla_bridge
        from jax._src.lib import _jax  # type: ignore[attr-defined]
    except ImportError:
        return
    make = getattr(_jax, "make_gloo_tcp_collectives", None)
    if make is None or not hasattr(xla_bridge, "register_backend_factory"):
        return

    def cpu_client() -> object:
        client = distributed.global_state.client
        return xla_bridge.make_cpu_client(
            collectives=make(distributed_client=client, hostname=address)
        )

    with contextlib.suppress(RuntimeError, TypeError):  # a CPU backend already made: as is
        xla_bridge.register_backend_factory("cpu", cpu_client, priority=0, fail_quietly=False)


def _takes_bind_address(initialize: Callable[..., object]) -> bool:
    """jax 0.4.31 and later: older ones always listen on every interface."""
    import inspect

    try:
        return "coordinator_bind_address" in inspect.signature(initialize).parameters
    except (TypeError, ValueError):
        return False


@dataclass
class JaxPlugin:
    init_timeout: float | str | None = None
    initialize: bool = True
    compilation_cache: bool = True
    name: str = field(default="jax", init=False)
    # The worker leaves after the atexit hooks, skipping the interpreter's teardown: a
    # process that loaded XLA takes about a second there (skyinfra_runtime.worker).
    end_before_teardown: ClassVar[bool] = True
    _initialized: bool = field(default=False, init=False, repr=False)
    # Set after a failed run: jax registers its own atexit hook that calls shutdown(), the
    # same barrier, so the process must leave without running atexit hooks (see worker.py).
    skip_exit_hooks: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        given = {
            "init_timeout": self.init_timeout,
            "initialize": self.initialize,
            "compilation_cache": self.compilation_cache,
        }
        validate_plugin("jax", {k: v for k, v in given.items() if v is not None})

    def setup(self, info: InstanceInfo, topology: Topology, script: bool = False) -> None:
        timeout = init_timeout(self.init_timeout)
        env = jax_env(info, topology)  # refuses a GPU split that cannot work, before any wait
        os.environ.update(env)
        try:
            import jax
        except ImportError:
            raise PluginError("plugin 'jax' needs jax installed on the node") from None
        _note_compiles(jax)
        # Without gloo, JAX's CPU client has no cross-process collectives: psum over processes
        # fails ("Multiprocess CPU computations require a collectives implementation"). It only
        # affects the CPU client, so setting it on GPU nodes is harmless. Must precede init,
        # also the script's own (initialize = false): the setting stays in this process.
        with contextlib.suppress(AttributeError):  # very old jax: no option, nothing to choose
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if self.compilation_cache:
            use_compilation_cache(jax, os.environ, first_on_node=info.worker == 0)
        if not self.initialize or info.total_workers == 1:
            return  # the script initialises (initialize = false), or nothing to coordinate
        kwargs: dict[str, object] = {
            "coordinator_address": env["JAX_COORDINATOR_ADDRESS"],
            "num_processes": info.total_workers,
            "process_id": info.global_index,
            "initialization_timeout": max(1, int(timeout)),
        }
        bind = coordinator_bind_address(topology)
        if bind is not None and _takes_bind_address(jax.distributed.initialize):
            # The coordinator listens on the head's own address, not on every interface (jax's
            # default): two clusters on one machine, on two addresses, keep apart.
            kwargs["coordinator_bind_address"] = bind
        if "JAX_LOCAL_DEVICE_IDS" in env:
            # Several processes on a GPU node: each owns its own block of GPUs.
            kwargs["local_device_ids"] = [int(i) for i in env["JAX_LOCAL_DEVICE_IDS"].split(",")]
        try:
            jax.distributed.initialize(**kwargs)  # type: ignore[arg-type]
        except Exception as exc:
            raise PluginError(
                f"jax.distributed.initialize failed for process {info.global_index} of"
                f" {info.total_workers} (coordinator {kwargs['coordinator_address']},"
                f" timeout {timeout:g}s): {exc}"
            ) from exc
        self._initialized = True
        address = gloo_address(topology, info.node)
        if address is not None:
            _gloo_on(address)

    def explain(self, exc: BaseException) -> str | None:
        if self._initialized and _TWICE in str(exc):
            return (
                "it had already called jax.distributed.initialize; drop your call,"
                " or set the plugin's option initialize = false (--plugin jax:initialize=false)"
                " and initialise in your script from JAX_NUM_PROCESSES and JAX_PROCESS_ID"
            )
        return None

    def teardown(self, failed: bool = False) -> None:
        if not self._initialized:
            return
        self._initialized = False
        if failed:
            # shutdown() is a barrier across all processes: after a failure the peers may
            # never reach it, and waiting (300 s by default) would only delay the exit code.
            self.skip_exit_hooks = True
            return
        import jax

        jax.distributed.shutdown()
