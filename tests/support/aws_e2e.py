"""What the AWS end-to-end tests share (tests/e2e/aws; conftest.py there registers the
fixtures): the user's shell pointed at moto's server with dummy credentials and the provider
mirror, the seeded Deep Learning AMI, moto read back like EC2, an SSH key, the CLI as a user
runs it, counts of what a cluster left in the emulator, and an emulated node: a node's user
data run as cloud-init would, in a root of its own (provision_in_root).

moto's server runs in the test process (tests/support/aws_fixtures.py), so the public Deep
Learning AMI SSM parameter, which moto refuses to create through its API, is seeded into moto's
in-process SSM backend. Its value is one of moto's built-in AMIs: the Ubuntu Deep Learning AMI,
and later the Amazon Linux one, standing in for a new release.

Two places where moto 5.2 answers differently from EC2 would make every second `up` plan
changes that AWS itself would not show, and a third keeps a terminated instance's private
address taken; `moto_like_ec2` corrects them in-process (see patch_moto_like_ec2). Nothing else
of moto is touched.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from skyinfra.spec import ClusterSpec, validate_spec
from skyinfra.targets.aws.endpoints import ENDPOINT_ENV_VAR
from skyinfra.terraform import MIRROR_ENV
from skyinfra.workspace import Workspace
from tests.conftest import content_of, offline_pip_env, require_wheelhouse, skyinfra_argv
from tests.support.aws import REGION
from tests.support.aws_fixtures import seed_dlami, unseed_dlami

# moto's built-in AMIs (moto/ec2/resources/amis.json.gz).
UBUNTU_DLAMI = "ami-dca37ea5"  # "Deep Learning AMI Ubuntu Linux - 2.4_Oct2017"
AMAZON_LINUX_DLAMI = "ami-999844e0"  # "Deep Learning AMI Amazon Linux - 3.3_Oct2017"
NO_SPACE = {"instances": 0, "security_groups": 0, "subnets": 0, "vpcs": 0}


@pytest.fixture
def dlami(aws_env: str) -> Iterator[None]:
    seed_dlami(UBUNTU_DLAMI)
    try:
        yield
    finally:
        unseed_dlami()


@pytest.fixture
def moto_like_ec2(monkeypatch: pytest.MonkeyPatch) -> None:
    patch_moto_like_ec2(monkeypatch)


def patch_moto_like_ec2(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make moto's EC2 do three things the way EC2 does (in this process's server).

    1. An instance launched with its groups on the primary network interface (the AWS provider
       launches that way when it sets associate_public_ip_address) has those groups in its
       own groupSet in DescribeInstances; moto reports an empty list, so the provider would
       plan to add vpc_security_group_ids on every `up`.
    2. DescribeSecurityGroupRules returns the description of a rule that references a group;
       moto keeps it but only reports descriptions of CIDR rules.
    3. A terminated instance's private addresses are free again ("Private IPv4 addresses",
       Amazon EC2 User Guide: the address "is released when the instance is terminated");
       moto keeps them taken until the instance object is garbage collected, which a
       terminated instance, still listed, never is: the instance Terraform makes in its place
       on the same fixed address (a lost node replaced) got HTTP 500 "IP already in use".
    """
    from moto.ec2.models.instances import Instance
    from moto.ec2.models.security_groups import SecurityGroupRule

    def get_groups(self: Any) -> list[Any]:
        groups = self.__dict__.get("_moto_like_ec2_groups", self.__dict__.get("security_groups"))
        nics = self.__dict__.get("nics") or {}
        if not groups and 0 in nics:
            return list(nics[0]._group_set)
        return list(groups)

    def set_groups(self: Any, value: list[Any]) -> None:
        self.__dict__["_moto_like_ec2_groups"] = value

    monkeypatch.setattr(Instance, "security_groups", property(get_groups, set_groups), False)

    terminate = Instance.terminate

    def terminate_and_release(self: Any) -> Any:
        state = terminate(self)
        subnet = self.ec2_backend.get_subnet(self.subnet_id) if self.subnet_id else None
        for ip in list(self._private_ips) if subnet is not None else []:
            subnet.del_subnet_ip(ip)
        return state

    monkeypatch.setattr(Instance, "terminate", terminate_and_release)
    monkeypatch.setattr(
        SecurityGroupRule,
        "description",
        property(
            lambda self: self.ip_range.get("Description") or self.source_group.get("Description")
        ),
    )


@pytest.fixture
def ssh_key(tmp_path: Path) -> Path:
    key = tmp_path / "keys" / "id_ed25519"
    key.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


@pytest.fixture
def cli_env(
    aws_env: str,
    plugin_mirror: Path,
    minimal_runtime_dir: Path,
    tmp_path: Path,
    tf_plugin_cache: Path,
) -> dict[str, str]:
    """What a user's shell would hold: the emulator, dummy credentials, the provider mirror."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")}
    env.update(
        {
            ENDPOINT_ENV_VAR: aws_env,
            MIRROR_ENV: str(plugin_mirror),
            "SKYINFRA_CACHE": str(tmp_path / "cache"),
            "SKYINFRA_TF_PLUGIN_CACHE": str(tf_plugin_cache),
            # The Terraform layer is under test, not the runtime (integration/runtime, e2e/local).
            "SKYINFRA_RUNTIME_DIR": str(minimal_runtime_dir),
        }
    )
    return env


def write_spec(path: Path, name: str, instance_type: str, ssh_key: Path) -> Path:
    path.write_text(
        f'name = "{name}"\n'
        'provider = "aws"\n'
        "nodes = 2\n"
        "[aws]\n"
        f'region = "{REGION}"\n'
        f'instance_type = "{instance_type}"\n'
        'ssh_cidrs = ["203.0.113.7/32"]\n'
        f'ssh_key = "{ssh_key}"\n'
        "placement_group = false  # moto has no CreatePlacementGroup\n"
    )
    return path


def skyinfra(
    *args: str, cwd: Path, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*skyinfra_argv(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def count_cluster_resources(ec2: Any, cluster: str) -> dict[str, int]:
    """What of the cluster exists, counted through the EC2 API (tags and names)."""
    tag = [{"Name": "tag:skyinfra:cluster", "Values": [cluster]}]
    named = [{"Name": "tag:Name", "Values": [f"{cluster}-*"]}]
    live = [
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}
    ]
    instances = [
        inst
        for res in ec2.describe_instances(Filters=tag + live)["Reservations"]
        for inst in res["Instances"]
    ]
    return {
        "instances": len(instances),
        "security_groups": len(
            ec2.describe_security_groups(
                Filters=[{"Name": "group-name", "Values": [f"{cluster}-nodes"]}]
            )["SecurityGroups"]
        ),
        "subnets": len(ec2.describe_subnets(Filters=named)["Subnets"]),
        "vpcs": len(ec2.describe_vpcs(Filters=named)["Vpcs"]),
    }


def instances_by_id(ec2: Any, ids: list[str]) -> dict[str, dict[str, Any]]:
    reservations = ec2.describe_instances(InstanceIds=ids)["Reservations"]
    return {i["InstanceId"]: i for r in reservations for i in r["Instances"]}


def aws_workspace(
    tmp_path: Path, name: str, ssh_key: Path, *, plugins: tuple[str, ...] = (), **aws: str
) -> tuple[Workspace, ClusterSpec]:
    """A workspace holding a 2-node AWS spec (g5.xlarge) with ``plugins``, as `up` leaves
    it, for transport tests that need no Terraform."""
    ws = Workspace(tmp_path / "clusters" / name)
    ws.path.mkdir(parents=True)
    spec = validate_spec(
        {
            "name": name,
            "provider": "aws",
            "nodes": 2,
            "plugins": list(plugins),
            "aws": {
                "region": REGION,
                "instance_type": "g5.xlarge",
                "ssh_cidrs": ["203.0.113.7/32"],
                "ssh_key": str(ssh_key),
                **aws,
            },
        }
    )
    ws.write_json(ws.spec_file, spec.to_dict())
    return ws, spec


# The node paths the user data writes to; the stand-in for a node keeps them under its root.
NODE_PATH_PREFIXES = ("/etc/skyinfra", "/opt/skyinfra", "/var/lib/skyinfra")


def provision_in_root(
    user_data: str, root: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Do what cloud-init would do with the node's user data, under ``root``: write every
    write_files entry and run runcmd's provisioning script, with the node paths moved there.
    ``env``: the script's whole environment (default: this one, installing from the
    dependency wheelhouse; a private node's test gives one with no wheels but its own)."""

    def moved(text: str) -> str:
        for prefix in NODE_PATH_PREFIXES:
            text = text.replace(prefix, f"{root}{prefix}")
        return text

    document = yaml.safe_load(user_data)
    for entry in document["write_files"]:
        path = Path(moved(entry["path"]))
        if not str(path).startswith(str(root)):
            continue  # systemd units of the idle timer (off in this spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(moved(content_of(entry)))
        path.chmod(int(entry["permissions"], 8))
    command = document["runcmd"][-1]  # provision.sh (before it: the idle timer, when on)
    # A real node installs uv (and node 0's head venv, skyinfra's dependencies) from PyPI;
    # this one takes them from the dependency wheelhouse, through pip and uv alike, and never
    # asks an index (the loopback guard caught provision.sh asking pypi.org).
    if env is None:
        env = offline_pip_env(dict(os.environ))
        env["PIP_FIND_LINKS"] = env["UV_FIND_LINKS"] = str(require_wheelhouse())
        env["UV_OFFLINE"] = "1"  # uv has no UV_NO_INDEX; offline, it takes the find-links
    return subprocess.run(
        [moved(part) for part in command], capture_output=True, text=True, timeout=600, env=env
    )
