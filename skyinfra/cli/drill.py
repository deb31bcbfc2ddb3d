"""`skyinfra drill interrupt NODE`: rehearse a Spot interruption end to end.

Local target: the notice goes to the node's IMDS stand-in on loopback; the node's watcher reads
it as an AWS Spot node reads EC2's, the job's workers get SIGTERM with the time left, and the
node goes once its part of the job has ended (or at the notice's time). AWS: a real
interruption through the Fault Injection Service (targets/aws/drill.py), asked first as
`down` asks.
"""

from __future__ import annotations

import secrets
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from skyinfra.cli.options import cluster_option, dir_option
from skyinfra.cli.resolve import echo, workspace
from skyinfra.errors import Declined, UsageError

if TYPE_CHECKING:
    from skyinfra.spec import ClusterSpec
    from skyinfra.topology import Topology
    from skyinfra.workspace import Workspace

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
    a detached job waits for `skyinfra jobs recover JOB`. AWS: a real interruption of the
    node's Spot instance through the Fault Injection Service (asked first, as `down` asks)."""
    from skyinfra.topology import read_topology

    ws = workspace(clusters_root, cluster_name, changes_something=True)
    spec = ws.spec()
    if not ws.topology_file.is_file():
        raise UsageError(f"cluster {ws.name!r} is not up (no topology): nothing to interrupt")
    topology = read_topology(ws.topology_file)
    node = node_index(node_text, len(topology.nodes))
    if spec.provider == "local":
        from skyinfra.targets.local.drill import send_notice

        notice = send_notice(ws.nodes_dir / topology.nodes[node].name, node, notice_s)
        echo(
            f"[skyinfra] drill: Spot interruption notice sent to node-{node}: "
            f"{notice.get('action')} at {notice.get('time')} (in {notice_s} s)"
        )
        echo(
            "[skyinfra] its job's workers get SIGTERM and the time left "
            "($SKYINFRA_PREEMPT_DEADLINE); the node goes once its part of the job has ended, "
            "or at that time"
        )
        return
    if spec.provider != "aws":
        raise UsageError(f"drill interrupt: the {spec.provider} target has no Spot notices")
    _interrupt_on_aws(ws, spec, topology, node, notice_s, role_arn, yes)


def _interrupt_on_aws(
    ws: Workspace,
    spec: ClusterSpec,
    topology: Topology,
    node: int,
    notice_s: int,
    role_arn: str | None,
    yes: bool,
) -> None:
    from skyinfra.targets.aws.drill import MAX_NOTICE_S, MIN_NOTICE_S, send_interruption
    from skyinfra.targets.aws.failover import launched_markets
    from skyinfra.targets.aws.session import clients_for

    if not MIN_NOTICE_S <= notice_s <= MAX_NOTICE_S:
        raise UsageError(
            f"--notice-seconds {notice_s}: expected {MIN_NOTICE_S} to {MAX_NOTICE_S} on AWS "
            "(FIS's durationBeforeInterruption is at least two minutes)"
        )
    if not role_arn or not role_arn.startswith("arn:"):
        raise UsageError(
            f"--fis-role-arn {role_arn!r}: expected the ARN of an IAM role FIS may assume, with "
            "ec2:SendSpotInstanceInterruptions on the cluster's instances"
        )
    name = topology.nodes[node].name
    market = launched_markets(spec, ws, len(topology.nodes)).get(name, "on-demand")
    if market != "spot":
        raise UsageError(
            f"NODE {node}: {name} runs {market}, not Spot (aws.market): only a Spot "
            "instance can be sent an interruption"
        )
    instance = topology.nodes[node].instance_id
    echo(
        f"[skyinfra] drill: a real Spot interruption of {name} ({instance}) through FIS: "
        f"its notice now, the instance interrupted {notice_s} s later"
    )
    if not yes:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise UsageError("drill interrupt on AWS: pass --yes to interrupt off a terminal")
        if not click.confirm(f"Interrupt {name} ({instance})?"):
            raise Declined("drill cancelled: you answered no; nothing was sent")
    sent = send_interruption(
        clients_for(spec),
        cluster=spec.name,
        node=node,
        instance_id=str(instance),
        seconds=notice_s,
        role_arn=role_arn,
        client_token=f"skyinfra-drill-{int(time.time())}-{secrets.token_hex(4)}",
    )
    said = f"[skyinfra] FIS experiment {sent['experiment']} ({sent['state'] or 'started'})"
    if sent["template_left"]:
        echo(
            f"{said}; its template {sent['template']} could not be deleted "
            f"({sent['template_left']}): aws fis delete-experiment-template --id "
            f"{sent['template']}"
        )
    else:
        echo(f"{said}; its template {sent['template']} deleted (the experiment runs on)")
