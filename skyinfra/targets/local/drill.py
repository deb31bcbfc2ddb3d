"""`skyinfra drill interrupt` on the local target: a Spot interruption notice delivered to a
local node's IMDS stand-in (skyinfra_runtime/imds_standin.py, on the node's loopback address),
which the node's watcher then reads as an AWS Spot node reads EC2's."""

from __future__ import annotations

import urllib.error
from pathlib import Path
from typing import Any

from skyinfra_runtime.imds_standin import INTERRUPT_PATH
from skyinfra_runtime.imds_standin import send_notice as post_notice
from skyinfra_runtime.spot import read_settings

from skyinfra.errors import TransportError, UsageError
from skyinfra.targets.base import Echo
from skyinfra.targets.local.transport import node_problem


def send_notice(node_dir: Path, node: int, seconds: int) -> dict[str, Any]:
    """POST the notice (``seconds`` until the node goes) to the node's stand-in; what it
    answers (``{"action": ..., "time": ...}``, EC2's form)."""
    problem = node_problem(node_dir)
    if problem:
        raise UsageError(f"NODE {node}: {problem}")
    settings = read_settings(node_dir)
    if settings is None:
        raise UsageError(
            f"NODE {node}: node-{node} has no IMDS stand-in ({node_dir}/notice.json is missing: "
            "a node made before skyinfra had one); `skyinfra up` after `down` makes nodes with it"
        )
    url = settings[0] + INTERRUPT_PATH
    try:
        return post_notice(settings[0], seconds)
    except (OSError, ValueError) as err:  # URLError and HTTPError are OSErrors
        detail = (
            err.read().decode(errors="replace") if isinstance(err, urllib.error.HTTPError) else err
        )
        raise TransportError(
            f"node {node}: the IMDS stand-in at {url} refused the notice: {detail}"
        ) from err


def interrupt(node_dir: Path, node: int, notice_s: int, echo: Echo) -> None:
    """Send node ``node`` (its folder ``node_dir``) the notice and say what happens next."""
    notice = send_notice(node_dir, node, notice_s)
    echo(
        f"[skyinfra] drill: Spot interruption notice sent to node-{node}: "
        f"{notice.get('action')} at {notice.get('time')} (in {notice_s} s)"
    )
    echo(
        "[skyinfra] its job's workers get SIGTERM and the time left "
        "($SKYINFRA_PREEMPT_DEADLINE); the node goes once its part of the job has ended, "
        "or at that time"
    )
