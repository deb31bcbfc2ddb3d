"""Small entries for launcher tests: results, failures, arguments, output control."""

from __future__ import annotations

import os
import signal
import sys
import time

from skyinfra_runtime import instance_info, silent, stdout


def info() -> dict[str, object]:
    i = instance_info()
    return {
        "node": i.node,
        "total_nodes": i.total_nodes,
        "worker": i.worker,
        "workers_per_node": i.workers_per_node,
        "global_index": i.global_index,
        "total_workers": i.total_workers,
        "is_head": i.is_head,
        "peers": [p.private_ip for p in i.peers],
        "argv": sys.argv[1:],
    }


def interpreter() -> str:
    return sys.executable


def fail_on_worker_1() -> str:
    if instance_info().global_index == 1:
        raise RuntimeError("worker 1 gives up")
    time.sleep(600)  # far past the run deadline: only the launcher ending it lets the test pass
    return "unreachable"


def fail() -> None:
    raise ValueError("the user's code raised")


def sleep_forever() -> None:
    print("sleeping", flush=True)
    time.sleep(600)


class _SignalledInItsFinalizer:
    def __del__(self) -> None:
        # SIGTERM to this thread, handled at the loop's next turn: inside this __del__, whose
        # exceptions Python prints as "Exception ignored" and drops.
        signal.raise_signal(signal.SIGTERM)
        for _ in range(1000):
            pass


def sleep_forever_after_a_sigterm_lost_in_a_finalizer() -> None:
    _SignalledInItsFinalizer()  # collected at once: its __del__ runs here
    print("sleeping", flush=True)
    time.sleep(600)


@stdout(only="head")
def report() -> str:
    print(f"python-level line from node {instance_info().node}", flush=True)
    # C-level writes go straight to file descriptor 1, past sys.stdout.
    os.write(1, f"fd-level line from node {instance_info().node}\n".encode())
    return "reported"


@silent
def quiet() -> str:
    print("should never appear", flush=True)
    print("nor this", file=sys.stderr, flush=True)
    os.write(2, b"fd 2 should never appear\n")
    return "quiet"


def fail_on_node_1_after_setup() -> str:
    """Node 1 raises after the plugins are up; node 0 waits for ever (ended by the test)."""
    if instance_info().node == 1:
        raise RuntimeError("node 1 gives up after set-up")
    time.sleep(600)
    return "unreachable"
