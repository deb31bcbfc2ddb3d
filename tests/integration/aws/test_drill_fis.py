"""`skyinfra drill interrupt` on AWS: the FIS experiment template and experiment, sent to moto's
server on loopback (moto keeps templates and experiments as records: no instance is
interrupted there, so what EC2 then does is not tested here), the request as a pure
function, and what is refused before any AWS call (exit 2, nothing sent): a notice under FIS's
two minutes, no role, an On-Demand node, no --yes off a terminal."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from skyinfra.cli.drill import node_index
from skyinfra.cli.resolve import echo
from skyinfra.errors import UsageError
from skyinfra.spec import ClusterSpec, validate_spec
from skyinfra.targets import get_target
from skyinfra.targets.aws.drill import ACTION_ID, instance_arn, send_interruption, template_request
from skyinfra.targets.aws.endpoints import ENDPOINT_ENV_VAR, Emulator
from skyinfra.targets.aws.session import AwsClients
from skyinfra.targets.base import InterruptRequest
from skyinfra.topology import Node, Topology
from skyinfra.workspace import Workspace
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
    # The experiment carries the template's actions and targets (taken when it started).
    experiment = fis.get_experiment(id=sent["experiment"])["experiment"]
    assert experiment["experimentTemplateId"] == sent["template"]
    assert experiment["actions"]["interrupt"]["actionId"] == ACTION_ID
    assert experiment["targets"]["spot-node"]["resourceArns"] == [
        f"arn:aws:ec2:{REGION}:123456789012:instance/i-0123456789abcdef0"
    ]
    # The template went once its experiment started (a running experiment keeps going).
    assert sent["template_left"] == ""
    left = fis.list_experiment_templates()["experimentTemplates"]
    assert [t for t in left if t.get("tags", {}).get("skyinfra:cluster") == "demo"] == []


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


def aws_cluster(tmp_path: Path, market: str) -> tuple[Workspace, ClusterSpec, Topology]:
    spec = validate_spec(
        {
            "name": "c",
            "provider": "aws",
            "nodes": 2,
            "aws": {
                "region": REGION,
                "instance_type": "g5.xlarge",
                "ssh_cidrs": ["10.0.0.0/8"],
                "market": market,
            },
        }
    )
    ws = Workspace(tmp_path / "c")
    ws.ensure()
    nodes = tuple(
        Node(i, f"node-{i}", f"10.0.0.{10 + i}", None, f"i-0{i}23456789abcdef") for i in range(2)
    )
    return ws, spec, Topology("c", "aws", "10.0.0.10", 29500, nodes)


@pytest.mark.parametrize(
    ("market", "seconds", "role", "named"),
    [
        ("spot", 60, ROLE, "--notice-seconds 60: expected 120 to 3600 on AWS"),
        ("spot", 120, None, "--fis-role-arn None: expected the ARN of an IAM role"),
        ("spot", 120, "fis-role", "--fis-role-arn 'fis-role'"),
        ("on-demand", 120, ROLE, "NODE 1: node-1 runs on-demand, not Spot"),
        ("spot", 120, ROLE, "pass --yes to interrupt off a terminal"),
    ],
)
def test_a_refused_aws_drill_sends_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    market: str,
    seconds: int,
    role: str | None,
    named: str,
) -> None:
    import skyinfra.targets.aws.drill as aws_drill

    def never(*args: object, **kwargs: object) -> dict[str, str]:
        raise AssertionError("an interruption was sent")

    monkeypatch.setattr(aws_drill, "send_interruption", never)
    ws, spec, topology = aws_cluster(tmp_path, market)
    # Off a terminal (pytest's stdin is not one) and without --yes.
    with pytest.raises(UsageError) as err:
        get_target("aws").interrupt_node(
            ws, spec, topology, InterruptRequest(1, seconds, role_arn=role), ask=None, echo=echo
        )
    assert named in str(err.value) and err.value.exit_code == 2


def test_a_confirmed_aws_drill_starts_the_experiment(
    tmp_path: Path,
    aws_env: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(ENDPOINT_ENV_VAR, aws_env)
    ws, spec, topology = aws_cluster(tmp_path, "spot")
    get_target("aws").interrupt_node(
        ws, spec, topology, InterruptRequest(1, 150, role_arn=ROLE, yes=True), ask=None, echo=echo
    )
    said = capsys.readouterr().out
    assert "a real Spot interruption of node-1 (i-0123456789abcdef)" in said
    fis = boto3.client("fis", region_name=REGION, endpoint_url=aws_env)
    # The server is shared by the file's tests: this cluster's ("c") experiment, by its tag.
    experiments = [
        fis.get_experiment(id=e["id"])["experiment"] for e in fis.list_experiments()["experiments"]
    ]
    mine = [e for e in experiments if e.get("tags", {}).get("skyinfra:cluster") == "c"]
    assert len(mine) == 1, experiments
    experiment = mine[0]
    assert experiment["actions"]["interrupt"]["parameters"] == {
        "durationBeforeInterruption": "PT150S"
    }
    template = experiment["experimentTemplateId"]
    assert f"FIS experiment {experiment['id']} " in said
    assert f"its template {template} deleted (the experiment runs on)" in said, said
    left = fis.list_experiment_templates()["experimentTemplates"]
    assert [t for t in left if t.get("tags", {}).get("skyinfra:cluster") == "c"] == []
