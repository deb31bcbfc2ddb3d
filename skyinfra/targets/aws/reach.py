"""How `run`, `status` and `verify` reach AWS nodes: SSH to each node where way_in.py says
(its address, or through a private network's way in), every host key pinned from the host's
serial console; in emulator mode only the stand-in machines SKYINFRA_AWS_EMULATED_NODES names
(endpoints.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from skyinfra.errors import WorkspaceError
from skyinfra.spec import ClusterSpec
from skyinfra.targets.aws.cloudinit import NODE_DIR
from skyinfra.targets.aws.endpoints import emulated_nodes_from_env, emulator_from_env
from skyinfra.targets.aws.host_keys import host_keys_from_console
from skyinfra.targets.aws.readiness import CLOUD_INIT_PROBE
from skyinfra.targets.aws.session import clients_for
from skyinfra.targets.aws.spec import AwsSpec
from skyinfra.targets.aws.way_in import Dialling, node_targets
from skyinfra.topology import Topology
from skyinfra.transport.ssh import SshKeys, SshTransport
from skyinfra.workspace import Workspace

# Values looked up at `up` that `run` needs later (the login user), kept beside the root module.
TARGET_FILE = "aws-target.json"
KNOWN_HOSTS_FILE = "known_hosts"
# In node 0's copy of the workspace (aws.recover's kit, head.py): the key node 0 reaches the
# nodes with. Its presence makes the workspace node 0's.
HEAD_MARKER = "head.json"


def console_host_keys(spec: ClusterSpec, topology: Topology) -> Callable[[int], list[str]]:
    """The SSH host keys each node printed on its serial console (console_keys)."""
    instance_ids = {node.index: node.instance_id for node in topology.nodes}
    by_instance = console_keys(spec)

    def keys(index: int) -> list[str]:
        instance_id = instance_ids.get(index)
        return by_instance(instance_id) if instance_id else []

    return keys


def console_keys(spec: ClusterSpec) -> Callable[[str], list[str]]:
    """The SSH host keys an instance (a node, the bastion) printed on its serial console
    (cloud-init does at first boot), read through EC2 GetConsoleOutput with the operator's
    credentials: a channel the network between operator and host cannot forge. Empty while
    the instance has not printed them (or the API would not say)."""

    def keys(instance_id: str) -> list[str]:
        ec2 = clients_for(spec).client("ec2")
        try:
            try:
                answer = ec2.get_console_output(InstanceId=instance_id, Latest=True)
            except ClientError:  # Latest is for Nitro instances only
                answer = ec2.get_console_output(InstanceId=instance_id)
        except (ClientError, BotoCoreError):
            return []
        # botocore decodes the API's base64 already (its decode_console_output handler).
        return host_keys_from_console(str(answer.get("Output") or ""))

    return keys


# EC2's states of an instance that is going or gone ("Instance state", Amazon EC2 User Guide):
# a node in one of them is not coming back, whatever SSH says meanwhile.
GONE_STATES = ("shutting-down", "terminated")


def instances_gone(spec: ClusterSpec, topology: Topology) -> Callable[[int], bool]:
    """Whether a node's instance is certainly gone: terminated or shutting down, or unknown
    to EC2 (long terminated). An API that does not answer says nothing (False): a failed
    SSH read then stays an error, never a lost node."""
    instance_ids = {node.index: node.instance_id for node in topology.nodes}

    def gone(index: int) -> bool:
        instance_id = instance_ids.get(index)
        if not instance_id:
            return False
        ec2 = clients_for(spec).client("ec2")
        try:
            answer = ec2.describe_instances(InstanceIds=[instance_id])
        except ClientError as err:
            return str(err.response.get("Error", {}).get("Code")) == "InvalidInstanceID.NotFound"
        except BotoCoreError:
            return False
        states = [
            str(i.get("State", {}).get("Name"))
            for r in answer.get("Reservations", [])
            for i in r.get("Instances", [])
        ]
        return not states or all(state in GONE_STATES for state in states)

    return gone


def transport(
    ws: Workspace, spec: ClusterSpec, topology: Topology, *, connect_timeout_s: float = 20.0
) -> SshTransport:
    """SSH to every node where way_in.py says (its public address; on a private network
    through the way in). The node is ready once cloud-init's provision.sh wrote its ready
    marker (cloudinit.READY_MARKER).

    In emulator mode the nodes' own addresses are never dialled (see endpoints.py): a node is
    reached through SKYINFRA_AWS_EMULATED_NODES, or reads as unreachable, saying why.
    """
    spec_aws = spec.section_as(AwsSpec)
    key = Path(spec_aws.ssh_key).expanduser()
    # On node 0 (aws.recover's kit: head.py): the cluster's own key, the private addresses.
    on_node_0 = read_head_marker(ws)
    if on_node_0 is not None:
        key = Path(on_node_0["ssh_key"])
    if not key.is_file():
        raise WorkspaceError(
            f"cluster {ws.name!r}: the SSH key {spec_aws.ssh_key} (aws.ssh_key) is missing; "
            "the nodes only accept the key they were created with"
        )
    user = spec_aws.ssh_user
    if user is None:
        settings = ws.read_json(ws.path / TARGET_FILE)
        user = str(settings["ssh_user"])
    emulated = emulator_from_env() is not None
    targets, unreachable = node_targets(
        topology,
        Dialling(
            user=user,
            on_node_0=on_node_0 is not None,
            emulated=emulated_nodes_from_env() if emulated else None,
            console_keys=console_keys(spec),
        ),
    )
    return SshTransport(
        targets,
        keys=SshKeys(
            key,
            ws.path / KNOWN_HOSTS_FILE,
            host_keys=console_host_keys(spec, topology),
            on_new_host_key=lambda line: print(line, file=sys.stderr, flush=True),
        ),
        node_root=NODE_DIR,
        connect_timeout_s=connect_timeout_s,
        # An emulated node's cloud-init never ran: the stand-in machine's answer says nothing.
        probe=replace(CLOUD_INIT_PROBE, cloud_init_status=None) if emulated else CLOUD_INIT_PROBE,
        unreachable=unreachable,
        gone=instances_gone(spec, topology),
    )


def head_marker_text(ssh_key: str) -> str:
    """HEAD_MARKER's text: the cluster's own key, as node 0 has it."""
    return json.dumps({"ssh_key": ssh_key}, indent=2) + "\n"


def read_head_marker(ws: Workspace) -> Mapping[str, str] | None:
    """The marker when this workspace is node 0's copy (None: an operator's)."""
    path = ws.path / HEAD_MARKER
    if not path.is_file():
        return None
    data = ws.read_json(path)
    return {k: str(v) for k, v in data.items()} if isinstance(data, dict) else None
