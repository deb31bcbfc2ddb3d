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

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

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
