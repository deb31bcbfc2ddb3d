"""The AWS root-module render: pure checks, and `terraform fmt` on what it writes."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
from pathlib import Path

import pytest

from skyinfra.errors import RenderError, SpecError
from skyinfra.targets.aws.addressing import max_nodes, subnet_for
from skyinfra.targets.aws.endpoints import EMULATOR_CONFIG_FILE, EMULATOR_PROFILE, Emulator
from skyinfra.targets.aws.render import (
    AwsClusterParams,
    PrivateNetwork,
    planned_private_ips,
    render_root_module,
)
from skyinfra.targets.aws.spec import MAX_AWS_NODES
from tests.support.aws import REGION, TerraformFactory

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOXdhYvR9XJ8xq0f1m8c1u1YV0qg7r5n0bq6yFZ9y6Qk r"


# Unattended recovery (aws.recover): the state object in the spec's S3 backend.
STATE = ("team-state", "skyinfra/demo/terraform.tfstate")


def params(**overrides: object) -> AwsClusterParams:
    base: dict[str, object] = {
        "cluster_name": "demo",
        "region": REGION,
        "availability_zone": f"{REGION}a",
        "instance_type": "g5.xlarge",
        "ami_id": "ami-0123456789abcdef0",
        "node_count": 3,
        "ssh_public_key": SSH_KEY,
        "ssh_ingress_cidrs": ["203.0.113.7/32"],
    }
    base.update(overrides)
    return AwsClusterParams(**base)  # type: ignore[arg-type]


def render(p: AwsClusterParams, emulator: Emulator | None = None) -> dict[str, str]:
    docs = {name: f"#cloud-config\n# {name}\n" for name in planned_private_ips(p)}
    return render_root_module(
        p, modules_source="../modules/aws/", user_data=docs, emulator=emulator
    )


def test_tfvars_hold_the_concrete_values() -> None:
    files = render(params())
    tfvars = json.loads(files["terraform.tfvars.json"])
    assert tfvars["cluster"]["ami_id"] == "ami-0123456789abcdef0"
    assert tfvars["cluster"]["node_count"] == 3
    assert sorted(tfvars["user_data"]) == ["node-0", "node-1", "node-2"]
    assert tfvars["user_data"]["node-2"] == {"text": "#cloud-config\n# node-2\n"}
    assert 'source = "../modules/aws/nodes"' in files["main.tf"]
    assert "endpoints" not in files["main.tf"] and "access_key" not in files["main.tf"]
    assert "shared_config_files" not in files["main.tf"] and EMULATOR_CONFIG_FILE not in files
    assert planned_private_ips(params()) == {
        "node-0": "10.42.0.10",
        "node-1": "10.42.0.11",
        "node-2": "10.42.0.12",
    }


def test_emulator_points_every_service_at_the_endpoint() -> None:
    """Through a config file of the root module's own, whose profile the provider block
    names (an AWS_PROFILE in the operator's shell changes nothing), not an `endpoints {}`
    block: the e2e tests apply these files against moto."""
    files = render(params(), Emulator(url="http://127.0.0.1:4566"))
    main_tf = files["main.tf"]
    assert not re.search(r"^\s*endpoints\s*\{", main_tf, re.MULTILINE)
    assert f'profile             = "{EMULATOR_PROFILE}"' in main_tf
    assert f'shared_config_files = ["${{path.module}}/{EMULATOR_CONFIG_FILE}"]' in main_tf
    config = files[EMULATOR_CONFIG_FILE]
    assert f"[profile {EMULATOR_PROFILE}]\nendpoint_url = http://127.0.0.1:4566\n" in config
    assert "skip_credentials_validation = true" in main_tf
    # The provider asks the emulator's STS for the account: rules referencing the cluster's
    # own group then read back as written (a second `up` plans no change).
    assert "skip_requesting_account_id" not in main_tf


def test_large_user_data_goes_gzipped_as_base64() -> None:
    p = params(node_count=1)
    big = "#cloud-config\n" + "".join(f"# padding line {i}\n" for i in range(2000))
    files = render_root_module(p, modules_source="../m", user_data={"node-0": big})
    entry = json.loads(files["terraform.tfvars.json"])["user_data"]["node-0"]
    assert gzip.decompress(base64.b64decode(entry["base64"])).decode() == big


@pytest.mark.parametrize(
    ("overrides", "field", "hint"),
    [
        ({"ssh_ingress_cidrs": []}, "aws.ssh_cidrs", "no open-to-the-world default"),
        ({"ssh_ingress_cidrs": ["0.0.0.0/0"]}, "aws.ssh_cidrs[0]", "allow_ssh_from_anywhere"),
        ({"ssh_ingress_cidrs": ["2001:db8::/32"]}, "aws.ssh_cidrs[0]", "IPv4"),
        ({"ami_id": "/aws/service/x"}, "aws.ami", "concrete AMI id"),
        ({"cluster_name": "Bad_Name"}, "name", "lower-case"),
        ({"node_count": 300}, "nodes", "at most 245 nodes"),
        ({"node_count": 70000, "subnet_cidr_block": "10.42.0.0/16"}, "nodes", "1 to 65525"),
        (
            {
                "existing_vpc_id": "vpc-0123abcd",
                "existing_subnet_id": "subnet-0123abcd",
                "subnet_cidr_block": "172.31.5.0/26",
                "node_count": 60,
            },
            "nodes",
            "at most 53 nodes",
        ),
        ({"subnet_cidr_block": "10.42.0.0/28", "node_count": 8}, "nodes", "at most"),
    ],
)
def test_bad_params_name_the_field(overrides: dict[str, object], field: str, hint: str) -> None:
    with pytest.raises(SpecError) as err:
        render(params(**overrides))
    assert err.value.field == field
    assert hint in str(err.value)


def test_world_ssh_with_explicit_opt_in_renders() -> None:
    files = render(params(ssh_ingress_cidrs=["0.0.0.0/0"], allow_ssh_from_anywhere=True))
    assert json.loads(files["terraform.tfvars.json"])["cluster"]["allow_ssh_from_anywhere"]


def test_user_data_must_cover_every_node() -> None:
    with pytest.raises(RenderError, match="one document for each"):
        render_root_module(params(), modules_source="../m", user_data={"node-0": "#cloud-config\n"})


@pytest.mark.parametrize(
    ("emulated", "recover", "private"),
    [(False, False, False), (True, False, False), (False, True, False), (False, False, True)],
)
def test_rendered_main_tf_is_fmt_clean(
    terraform: TerraformFactory, tmp_path: Path, emulated: bool, recover: bool, private: bool
) -> None:
    emulator = Emulator(url="http://127.0.0.1:4566") if emulated else None
    p = params(head_recovery=STATE if recover else None)
    if private:
        p = params(private_network=PrivateNetwork(nat=True, ssm=True))
    (tmp_path / "main.tf").write_text(render(p, emulator)["main.tf"])
    code, out, err = terraform(tmp_path).command(["fmt", "-check", "-diff", "-no-color"])
    assert code == 0, out + err


def test_efa_nodes_take_one_address_each() -> None:
    """p5.48xlarge: 32 EFA interfaces, but the EFA-only ones hold no address, so 245 nodes
    fit a /24 (with an EFA interface on every card it would have been 7)."""
    files = render(params(instance_type="p5.48xlarge", efa_interface_count=32, node_count=245))
    cluster = json.loads(files["terraform.tfvars.json"])["cluster"]
    assert (cluster["node_count"], cluster["subnet_cidr_block"]) == (245, "10.42.0.0/24")
    with pytest.raises(SpecError, match="at most 245 nodes"):
        render(params(instance_type="p5.48xlarge", efa_interface_count=32, node_count=246))


@pytest.mark.parametrize(
    ("nodes", "subnet"),
    [
        (1, "10.42.0.0/24"),
        (245, "10.42.0.0/24"),
        (246, "10.42.0.0/23"),
        (1000, "10.42.0.0/22"),
        (65525, "10.42.0.0/16"),
    ],
)
def test_own_subnet_is_sized_for_the_cluster(nodes: int, subnet: str) -> None:
    assert subnet_for(nodes) == subnet
    render(params(node_count=nodes, subnet_cidr_block=subnet))  # and the renderer agrees
    assert max_nodes(subnet, 10) >= nodes
    assert MAX_AWS_NODES == 65525


# Spot (issue 26): the rendered root module of a cluster whose workers are Spot, against its
# golden files (SKYINFRA_UPDATE_GOLDEN=1 rewrites them).
GOLDEN_SPOT = Path(__file__).resolve().parents[1] / "golden" / "aws-spot"
SPOT_WORKERS = {"node-0": "on-demand", "node-1": "spot", "node-2": "spot"}


def test_spot_root_module_matches_golden_files() -> None:
    files = render(params(node_markets=SPOT_WORKERS, spot_max_price=1.25))
    for name in ("main.tf", "terraform.tfvars.json"):
        path = GOLDEN_SPOT / name
        if os.environ.get("SKYINFRA_UPDATE_GOLDEN") == "1":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(files[name])
        assert files[name] == path.read_text(), f"{name} differs from its golden file"
    cluster = json.loads(files["terraform.tfvars.json"])["cluster"]
    assert cluster["node_markets"] == SPOT_WORKERS and cluster["spot_max_price"] == 1.25
    assert "node_markets         = var.cluster.node_markets" in files["main.tf"]


def test_on_demand_tfvars_name_every_node_on_demand() -> None:
    cluster = json.loads(render(params())["terraform.tfvars.json"])["cluster"]
    assert cluster["node_markets"] == {f"node-{i}": "on-demand" for i in range(3)}
    assert cluster["spot_max_price"] is None
    assert params(node_markets=SPOT_WORKERS).spot_nodes() == ["node-1", "node-2"]


def test_spot_nodes_with_a_reservation_are_refused_before_rendering() -> None:
    with pytest.raises(SpecError) as err:
        render(
            params(node_markets=SPOT_WORKERS, capacity_reservation=("cr-0123456789abcdef0", False))
        )
    assert err.value.field == "aws.market" and "capacity reservation" in err.value.expected


# Unattended recovery (issue 26, aws.recover): node-0's own role, from the state's location.
def test_recover_passes_the_state_and_its_lock_to_the_nodes_module() -> None:
    files = render(params(head_recovery=STATE))
    tfvars = json.loads(files["terraform.tfvars.json"])
    assert tfvars["head_recovery"] == {
        "bucket": "team-state",
        "state_key": "skyinfra/demo/terraform.tfstate",
        "lock_key": "skyinfra/demo/terraform.tfstate.tflock",
    }
    assert list(tfvars)[-2:] == ["head_recovery", "user_data"]
    main_tf = files["main.tf"]
    assert 'variable "head_recovery" {' in main_tf
    assert "  head_recovery = var.head_recovery\n}" in main_tf


def test_without_recover_nothing_of_it_is_rendered() -> None:
    """The files of a cluster without aws.recover are those from before it existed (the
    golden files of the Spot case above hold them byte for byte)."""
    files = render(params())
    assert "head_recovery" not in files["main.tf"]
    assert "head_recovery" not in json.loads(files["terraform.tfvars.json"])


@pytest.mark.parametrize(
    "key", ["team/*/demo/terraform.tfstate", "team/de?o/terraform.tfstate", "terraform.tfstate"]
)
def test_recover_refuses_a_state_key_that_would_widen_the_head_role(key: str) -> None:
    with pytest.raises(SpecError) as err:
        render(params(head_recovery=("team-state", key)))
    assert err.value.field == "backend"
    assert "aws.recover" in err.value.expected and "wildcard" in err.value.expected


def test_cluster_params_take_the_state_from_the_backend_only_with_recover() -> None:
    from skyinfra.spec import ClusterSpec
    from skyinfra.targets.aws.cluster_files import cluster_params

    raw = {
        "name": "demo",
        "provider": "aws",
        "nodes": 2,
        "backend": "s3://team-state/skyinfra?region=eu-west-1",
        "aws": {
            "region": REGION,
            "instance_type": "g5.xlarge",
            "ssh_cidrs": ["203.0.113.7/32"],
        },
    }
    off = cluster_params(ClusterSpec.from_dict(raw), None, SSH_KEY)
    assert off.head_recovery is None
    on_spec = ClusterSpec.from_dict({**raw, "aws": {**raw["aws"], "recover": True}})
    on = cluster_params(on_spec, None, SSH_KEY)
    assert on.head_recovery == ("team-state", "skyinfra/demo/terraform.tfstate")


def test_a_private_network_renders_its_fields_and_a_public_one_gets_none() -> None:
    """Issue 46: a public cluster's modules get nothing of the private network and its tfvars
    hold none of its fields (the cluster type's new ones are optional: what was applied before
    plans no change); a private one names the bastion module, the public subnet (the VPC's
    last /28) and its switches."""
    public = render(params())
    assert 'module "bastion"' not in public["main.tf"]
    assert "private_subnet" not in public["main.tf"]
    assert "network" not in json.loads(public["terraform.tfvars.json"])["cluster"]
    private = render(params(private_network=PrivateNetwork(ssm=True)))
    cluster = json.loads(private["terraform.tfvars.json"])["cluster"]
    assert {k: cluster[k] for k in ("network", "bastion", "nat", "ssm")} == {
        "network": "private",
        "bastion": True,
        "nat": False,
        "ssm": True,
    }
    assert cluster["public_subnet_cidr_block"] == "10.42.255.240/28"
    assert 'source = "../modules/aws/bastion"' in private["main.tf"]
    assert "private_subnet           = true" in private["main.tf"]
    node_zero = render(params(private_network=PrivateNetwork(bastion=False)))
    assert (
        json.loads(node_zero["terraform.tfvars.json"])["cluster"]["public_subnet_cidr_block"]
        is None
    )


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (
            {
                "existing_vpc_id": "vpc-0123456789abcdef0",
                "existing_subnet_id": "subnet-0123456789abcdef0",
            },
            "aws.network",
        ),
        (
            {"ssh_ingress_cidrs": ["0.0.0.0/0"], "allow_ssh_from_anywhere": True},
            "aws.allow_ssh_from_anywhere",
        ),
        # The nodes' subnet grows from the VPC's start; it must leave the last /28 free.
        ({"node_count": 4000, "subnet_cidr_block": "10.42.0.0/16"}, "nodes"),
    ],
)
def test_a_private_network_refuses_what_it_cannot_build(
    overrides: dict[str, object], field: str
) -> None:
    with pytest.raises(SpecError) as caught:
        render(params(private_network=PrivateNetwork(), **overrides))
    assert caught.value.field == field
