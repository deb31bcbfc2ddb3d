"""jax plugin: ``jax.distributed.initialize`` before the user's code, ``shutdown`` after."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from skyinfra_runtime.errors import PluginError
from skyinfra_runtime.info import InstanceInfo
from skyinfra_runtime.plugins.base import init_timeout
from skyinfra_runtime.plugins.table import validate_plugin
from skyinfra_runtime.topology import Topology


@dataclass
class JaxPlugin:
    init_timeout: float | str | None = None
    name: str = field(default="jax", init=False)
    _initialized: bool = field(default=False, init=False, repr=False)
    # Set after a failed run: jax registers its own atexit hook that calls shutdown(), the
    # same barrier, so the process must leave without running atexit hooks (see worker.py).
    skip_exit_hooks: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.init_timeout is not None:
            validate_plugin("jax", {"init_timeout": self.init_timeout})

    def setup(self, info: InstanceInfo, topology: Topology) -> None:
        timeout = init_timeout(self.init_timeout)
        try:
            import jax
        except ImportError:
            raise PluginError("plugin 'jax' needs jax installed on the node") from None
        # Without gloo, JAX's CPU client has no cross-process collectives: psum over processes
        # fails ("Multiprocess CPU computations require a collectives implementation"). It only
        # affects the CPU client, so setting it on GPU nodes is harmless. Must precede init.
        with contextlib.suppress(AttributeError):  # very old jax: no option, nothing to choose
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if info.total_workers == 1:
            return  # one process: nothing to coordinate
        kwargs: dict[str, object] = {
            "coordinator_address": f"{topology.head_addr}:{topology.jax_port}",
            "num_processes": info.total_workers,
            "process_id": info.global_index,
            "initialization_timeout": max(1, int(timeout)),
        }
        if info.workers_per_node > 1 and info.accelerators > 0:
            # One process per GPU: each process owns exactly its local GPU.
            kwargs["local_device_ids"] = [info.worker]
        try:
            jax.distributed.initialize(**kwargs)  # type: ignore[arg-type]
        except Exception as exc:
            raise PluginError(
                f"jax.distributed.initialize failed for process {info.global_index} of"
                f" {info.total_workers} (coordinator {kwargs['coordinator_address']},"
                f" timeout {timeout:g}s): {exc}"
            ) from exc
        self._initialized = True

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
