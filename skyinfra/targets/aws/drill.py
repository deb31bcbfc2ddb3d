"""`skyinfra drill interrupt` on AWS: a real Spot interruption of one node through the Fault
Injection Service (FIS): an experiment template whose one action is
``aws:ec2:send-spot-instance-interruptions`` on the node's instance, then an experiment of it.
EC2 then sends the instance its interruption notice (and a rebalance recommendation) and
interrupts it ``durationBeforeInterruption`` later. FIS acts through an IAM role the caller
names (it needs ``ec2:SendSpotInstanceInterruptions`` on the instance); skyinfra makes none.

The template is deleted as soon as its experiment has started: "When you delete an experiment
template, any running experiments that use the template are not affected" (AWS FIS User Guide,
"Delete an experiment template"), so a drill leaves nothing behind."""

from __future__ import annotations

import secrets
import time
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from skyinfra.errors import Declined, UsageError
from skyinfra.spec import ClusterSpec
from skyinfra.targets.aws.launch_plan import launched_markets
from skyinfra.targets.aws.session import clients_for
from skyinfra.targets.base import Ask, Echo, InterruptRequest
from skyinfra.topology import Topology
from skyinfra.workspace import Workspace

# FIS's lower bound on durationBeforeInterruption: two minutes, EC2's own notice.
MIN_NOTICE_S = 120
MAX_NOTICE_S = 3600
ACTION_ID = "aws:ec2:send-spot-instance-interruptions"


def instance_arn(region: str, account: str, instance_id: str) -> str:
    return f"arn:aws:ec2:{region}:{account}:instance/{instance_id}"


def template_request(
    *, cluster: str, node: int, arn: str, seconds: int, role_arn: str, client_token: str
) -> dict[str, Any]:
    """CreateExperimentTemplate's arguments (pure): the one instance, interrupted ``seconds``
    after its notice, no stop condition (one action, over once the notice is sent), tagged
    with the cluster so that it can be found and deleted."""
    return {
        "clientToken": client_token,
        "description": f"skyinfra drill: Spot interruption of {cluster} node-{node}",
        "roleArn": role_arn,
        "stopConditions": [{"source": "none"}],
        "targets": {
            "spot-node": {
                "resourceType": "aws:ec2:spot-instance",
                "resourceArns": [arn],
                "selectionMode": "ALL",
            }
        },
        "actions": {
            "interrupt": {
                "actionId": ACTION_ID,
                "description": f"the two-minute notice, then the interruption of node-{node}",
                "parameters": {"durationBeforeInterruption": f"PT{seconds}S"},
                "targets": {"SpotInstances": "spot-node"},
            }
        },
        "tags": {"skyinfra:cluster": cluster, "skyinfra:drill": f"node-{node}"},
    }


def send_interruption(
    clients: Any,
    *,
    cluster: str,
    node: int,
    instance_id: str,
    seconds: int,
    role_arn: str,
    client_token: str,
) -> dict[str, str]:
    """Create the template, start its experiment and delete the template; their ids, the
    experiment's state, and ``template_left`` ("" once deleted, else why it was not)."""
    account = clients.client("sts").get_caller_identity()["Account"]
    arn = instance_arn(clients.region, account, instance_id)
    fis = clients.client("fis")
    request = template_request(
        cluster=cluster,
        node=node,
        arn=arn,
        seconds=seconds,
        role_arn=role_arn,
        client_token=client_token,
    )
    template = fis.create_experiment_template(**request)["experimentTemplate"]
    experiment = fis.start_experiment(
        clientToken=client_token,
        experimentTemplateId=template["id"],
        tags={"skyinfra:cluster": cluster},
    )["experiment"]
    left = ""
    try:
        fis.delete_experiment_template(id=template["id"])
    except (BotoCoreError, ClientError) as err:  # e.g. no fis:DeleteExperimentTemplate
        left = str(err)
    return {
        "template": str(template["id"]),
        "experiment": str(experiment["id"]),
        "state": str((experiment.get("state") or {}).get("status", "")),
        "template_left": left,
    }


def interrupt(
    ws: Workspace,
    spec: ClusterSpec,
    topology: Topology,
    request: InterruptRequest,
    *,
    ask: Ask | None,
    echo: Echo,
) -> None:
    """The target's ``interrupt_node``: refuse what FIS would (a notice under two minutes,
    no role, an On-Demand node) before any AWS call, ask unless ``request.yes``, then send."""
    node, notice_s, role_arn = request.node, request.notice_s, request.role_arn
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
    if not request.yes:
        if ask is None:
            raise UsageError("drill interrupt on AWS: pass --yes to interrupt off a terminal")
        if not ask(f"Interrupt {name} ({instance})?"):
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
