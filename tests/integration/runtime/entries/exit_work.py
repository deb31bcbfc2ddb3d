"""Function entries (torch, jax) that leave work for the interpreter's exit: an atexit hook, a
non-daemon thread, a file never closed, and an object finalised only in the interpreter's
teardown, which records what it saw then (EXIT_PROBE_DIR: where each writes)."""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

GLOO_THREAD = "pt_gloo_runloop"  # ProcessGroupGloo's worker threads (torch 2.13)


def gloo_threads() -> int:
    tasks = Path("/proc/self/task")
    return sum((task / "comm").read_text().strip() == GLOO_THREAD for task in tasks.iterdir())


class SeenInTeardown:
    def __init__(self, path: Path, seen: Callable[[], object]) -> None:
        self.path = path
        self.seen = seen

    def __del__(self) -> None:
        self.path.write_text(str(self.seen()))


_kept: list[object] = []  # module globals: the interpreter's teardown finalises them
_log: IO[str] | None = None


def _leave_work(out: Path, seen: Callable[[], object]) -> None:
    global _log
    _kept.append(SeenInTeardown(out / "teardown", seen))
    _log = open(out / "never-closed.txt", "w")  # noqa: SIM115 - left open on purpose
    _log.write("buffered, never closed\n")
    atexit.register(lambda: (out / "atexit").write_text("ran"))

    def late() -> None:
        time.sleep(0.5)
        (out / "thread").write_text("joined")

    threading.Thread(target=late).start()  # not a daemon: the exit waits for it


def leaves_work_for_the_exit() -> int:
    """torch: DDP keeps the process group, and gloo's threads, alive after
    destroy_process_group(); the teardown records how many still run."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    model(torch.randn(8, 4)).sum().backward()
    assert gloo_threads() > 0
    _leave_work(Path(os.environ["EXIT_PROBE_DIR"]), gloo_threads)
    return dist.get_rank()


def jax_leaves_work_for_the_exit() -> float:
    """jax: a compiled program's client alive at the exit."""
    import jax

    total = float(jax.jit(lambda x: (x * 2.0).sum())(jax.numpy.ones(8)))
    _leave_work(Path(os.environ["EXIT_PROBE_DIR"]), lambda: "finalised")
    return total
