"""`skyinfra drill interrupt` on AWS: the FIS experiment template and experiment, sent to moto's
server on loopback (moto keeps templates and experiments as records: no instance is
interrupted there, so what EC2 then does is not tested here), and the request as a pure
function."""

from __future__ import annotations

import boto3
import pytest

from skyinfra.cli.drill import node_index
from skyinfra.errors import UsageError
from skyinfra.targets.aws.drill import ACTION_ID, instance_arn, send_interruption, template_request
from skyinfra.targets.aws.endpoints import Emulator
from skyinfra.targets.aws.session import AwsClients
from tests.support.aws import REGION

ROLE = "arn:aws:iam::123456789012:role/fis-spot-drill"


def test_the_template_interrupts_one_instance_after_the_notice() -> None:
    arn = instance_arn(REGION, "123456789012", "i-0abc")
    request = template_request(
        cluster="demo", node=1, arn=arn, seconds=150, role_arn=ROLE, client_token="t-1"
    )
    assert request["roleArn"] == ROLE and request["clientToken"] == "t-1"
    assert request["targets"]["spot-node"] == {
        "resourceType": "aws:ec2:spot-instance",
        "resourceArns": [f"arn:aws:ec2:{REGION}:123456789012:instance/i-0abc"],
        "selectionMode": "ALL",
    }
    action = request["actions"]["interrupt"]
    assert action["actionId"] == ACTION_ID == "aws:ec2:send-spot-instance-interruptions"
    assert action["parameters"] == {"durationBeforeInterruption": "PT150S"}
    assert action["targets"] == {"SpotInstances": "spot-node"}
    assert request["stopConditions"] == [{"source": "none"}]
    assert request["tags"]["skyinfra:cluster"] == "demo"


def test_the_experiment_is_started_against_moto(aws_env: str) -> None:
    clients = AwsClients(boto3.session.Session(), REGION, Emulator(url=aws_env))
    sent = send_interruption(
        clients,
        cluster="demo",
        node=1,
        instance_id="i-0123456789abcdef0",
        seconds=120,
        role_arn=ROLE,
        client_token="drill-test-1",
    )
    fis = boto3.client("fis", region_name=REGION, endpoint_url=aws_env)
    template = fis.get_experiment_template(id=sent["template"])["experimentTemplate"]
    assert template["actions"]["interrupt"]["actionId"] == ACTION_ID
    assert template["targets"]["spot-node"]["resourceArns"] == [
        f"arn:aws:ec2:{REGION}:123456789012:instance/i-0123456789abcdef0"
    ]
    experiment = fis.get_experiment(id=sent["experiment"])["experiment"]
    assert experiment["experimentTemplateId"] == sent["template"]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("7", "NODE '7': expected a worker node of the cluster (node-1 to node-1)"),
        ("node-x", "NODE 'node-x'"),
        ("-1", "NODE '-1'"),
        ("0", "node-0 is the head"),
        ("node-0", "node-0 is the head"),
    ],
)
def test_a_node_that_is_not_a_worker_is_refused(text: str, named: str) -> None:
    with pytest.raises(UsageError, match=named.replace("(", r"\(").replace(")", r"\)")) as err:
        node_index(text, 2)
    assert err.value.exit_code == 2


def test_a_worker_is_named_by_index_or_name() -> None:
    assert node_index("1", 3) == 1 and node_index("node-2", 3) == 2
