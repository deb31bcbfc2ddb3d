"""`skyinfra drill interrupt NODE`: rehearse a Spot interruption end to end.

Local target: the notice goes to the node's IMDS stand-in on loopback; the node's watcher reads
it as an AWS Spot node reads EC2's, the job's workers get SIGTERM with the time left, and the
node goes once its part of the job has ended (or at the notice's time). ssh: the same
stand-in on each host, sent the notice over SSH; the host stays and its node is enrolled again
there (targets/ssh/drill.py). AWS: a real
interruption through the Fault Injection Service (targets/aws/drill.py), asked first as
`down` asks.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from skyinfra.cli.options import cluster_option, dir_option
from skyinfra.cli.resolve import echo, workspace
from skyinfra.errors import UsageError

DEFAULT_NOTICE_S = 120  # EC2's: about two minutes


def node_index(text: str, nodes: int) -> int:
    """NODE as given ("1" or "node-1"): a worker node of the cluster; exit 2 otherwise."""
    raw = text.strip()
    digits = raw[len("node-") :] if raw.startswith("node-") else raw
    if not digits.isdigit() or int(digits) >= nodes:
        workers = f"node-1 to node-{nodes - 1}" if nodes > 1 else "none: the cluster has 1 node"
        raise UsageError(f"NODE {text!r}: expected a worker node of the cluster ({workers})")
    index = int(digits)
    if index == 0:
        raise UsageError(
            f"NODE {text!r}: node-0 is the head (the job's coordinator and its record, On-Demand "
            "unless aws.head_market says otherwise): a drill interrupts a worker node"
            + (f" (node-1 to node-{nodes - 1})" if nodes > 1 else "")
        )
    return index


@click.group("drill")
def drill() -> None:
    """Rehearse failures on a running cluster."""


@drill.command("interrupt")
@cluster_option
@dir_option
@click.option(
    "--notice-seconds",
    "notice_s",
    type=click.IntRange(min=0),
    default=DEFAULT_NOTICE_S,
    show_default=True,
    metavar="N",
    help="Seconds from the notice to the interruption (AWS: 120 or more, FIS's minimum).",
)
@click.option(
    "--fis-role-arn",
    "role_arn",
    default=None,
    metavar="ARN",
    help="AWS: the IAM role FIS acts as (it needs ec2:SendSpotInstanceInterruptions).",
)
@click.option("--yes", is_flag=True, help="AWS: interrupt without asking (needed off a terminal).")
@click.argument("node_text", metavar="NODE")
def interrupt(
    cluster_name: str | None,
    clusters_root: Path | None,
    notice_s: int,
    role_arn: str | None,
    yes: bool,
    node_text: str,
) -> None:
    """Send NODE (1 or node-1) a Spot interruption notice, N seconds ahead.

    Local target: the node's own IMDS stand-in gets the notice. Its job's workers get SIGTERM
    and $SKYINFRA_PREEMPT_DEADLINE, save, and the node goes (once its part of the job ended, or
    at the notice's time); an attached `run --max-restarts` replaces it and restarts the job,
    a detached job waits for `skyinfra jobs recover JOB`. ssh target: the same, through the
    node's stand-in on its host (reached over SSH); the host stays, and the node is enrolled
    again there. AWS: a real interruption of the
    node's Spot instance through the Fault Injection Service (asked first, as `down` asks)."""
    from skyinfra import lifecycle
    from skyinfra.targets.base import InterruptRequest
    from skyinfra.topology import read_topology

    ws = workspace(clusters_root, cluster_name, changes_something=True)
    spec = ws.spec()
    if not ws.topology_file.is_file():
        raise UsageError(f"cluster {ws.name!r} is not up (no topology): nothing to interrupt")
    topology = read_topology(ws.topology_file)
    node = node_index(node_text, len(topology.nodes))
    # Asked on a terminal only; a target that asks (aws) refuses without --yes elsewhere.
    ask = click.confirm if sys.stdin.isatty() and sys.stdout.isatty() else None
    request = InterruptRequest(node, notice_s, role_arn=role_arn, yes=yes)
    lifecycle.target_of(spec).interrupt_node(ws, spec, topology, request, ask=ask, echo=echo)
