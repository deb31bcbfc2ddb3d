"""A torch function entry that leaves work for the interpreter's exit: an atexit hook, a
non-daemon thread, a file it never closed, and an object finalised only in the interpreter's
teardown, which records how many of gloo's threads were still running then (--out DIR)."""

from __future__ import annotations

import atexit
import os
import threading
import time
from pathlib import Path
from typing import IO

GLOO_THREAD = "pt_gloo_runloop"  # ProcessGroupGloo's worker threads (torch 2.13)


def gloo_threads() -> int:
    tasks = Path("/proc/self/task")
    return sum((task / "comm").read_text().strip() == GLOO_THREAD for task in tasks.iterdir())


class SeenInTeardown:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __del__(self) -> None:
        self.path.write_text(str(gloo_threads()))


_kept: list[object] = []  # module globals: the interpreter's teardown finalises them
_log: IO[str] | None = None


def leaves_work_for_the_exit() -> int:
    global _log
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    out = Path(os.environ["EXIT_PROBE_DIR"])
    # DDP keeps the process group, and gloo's threads, alive after destroy_process_group().
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    model(torch.randn(8, 4)).sum().backward()
    assert gloo_threads() > 0
    _kept.append(SeenInTeardown(out / "teardown"))
    _log = open(out / "never-closed.txt", "w")  # noqa: SIM115 - left open on purpose
    _log.write("buffered, never closed\n")
    atexit.register(lambda: (out / "atexit").write_text("ran"))

    def late() -> None:
        time.sleep(0.5)
        (out / "thread").write_text("joined")

    threading.Thread(target=late).start()  # not a daemon: the exit waits for it
    return dist.get_rank()
