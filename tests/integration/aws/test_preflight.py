"""Preflight against moto's server over HTTP.

moto answers instance types, offerings and instances itself. It has no EC2 service quotas
and refuses to create public /aws/service/... SSM parameters, so the tests seed moto's
in-process backends directly (the threaded server runs in this process): the DLAMI
parameter goes into the SSM backend's parameter store and the EC2 quota answer is installed
on the Service Quotas backend. No botocore Stubber is used.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.servicequotas.models import servicequotas_backends

from skyinfra.errors import PreflightError
from skyinfra.spec import validate_spec
from skyinfra.targets.aws.ami import check_image_architecture, resolve_bastion_user
from skyinfra.targets.aws.endpoints import ENDPOINT_ENV_VAR, Emulator
from skyinfra.targets.aws.ladder_shell import assess_ladder, first_approved
from skyinfra.targets.aws.preflight import (
    DEFAULT_DLAMI_PARAMETER,
    DLAMI_PARAMETER,
    PreflightRequest,
    dlami_parameter,
    run_preflight,
)
from skyinfra.targets.aws.quotas import EIP_QUOTA, ENI_QUOTA, quota_class
from skyinfra.targets.aws.session import AwsClients
from tests.support.aws import REGION
from tests.support.aws_fixtures import seed_dlami, unseed_dlami

DLAMI = "ami-0abcdef1234567890"
X86 = "ami-12c6146b"  # one of moto's x86_64 images
P_QUOTA = "L-417A185B"


@pytest.fixture
def seeded(aws_env: str) -> Iterator[dict[str, float]]:
    """Seed the DLAMI SSM parameter and a settable EC2 quota table into moto's backends."""
    seed_dlami(DLAMI)
    quotas: dict[str, float] = {}
    backend = servicequotas_backends[DEFAULT_ACCOUNT_ID][REGION]
    original = backend.get_service_quota

    def get_service_quota(service_code: str, quota_code: str) -> dict[str, Any]:
        if service_code in ("ec2", "vpc") and quota_code in quotas:
            return {
                "ServiceCode": service_code,
                "QuotaCode": quota_code,
                "Value": quotas[quota_code],
            }
        return original(service_code, quota_code)

    backend.get_service_quota = get_service_quota  # type: ignore[method-assign]
    try:
        yield quotas
    finally:
        backend.get_service_quota = original  # type: ignore[method-assign]
        unseed_dlami()


def preflight(moto_url: str, **kwargs: Any):  # type: ignore[no-untyped-def]
    """run_preflight of 2 x p4d.24xlarge in REGION's zone a, unless ``kwargs`` say otherwise
    (``session``, ``checks`` and the request's fields), against moto."""
    args: dict[str, Any] = {
        "region": REGION,
        "availability_zone": f"{REGION}a",
        "instance_type": "p4d.24xlarge",
        "node_count": 2,
    }
    session = kwargs.pop("session", None) or boto3.session.Session()
    checks = kwargs.pop("checks", True)
    args.update(kwargs)
    clients = AwsClients(session, args["region"], Emulator(url=moto_url))
    return run_preflight(PreflightRequest(**args), clients=clients, checks=checks)


def test_passes_and_resolves_the_ami_once(seeded: dict[str, float], aws_env: str) -> None:
    seeded[P_QUOTA] = 400
    result = preflight(aws_env)
    assert result.ami_id == DLAMI
    assert result.account_id == DEFAULT_ACCOUNT_ID
    assert (result.vcpus_per_node, result.gpu_name, result.gpu_count) == (96, "A100", 8)
    assert result.efa_interface_count == 4
    assert result.quota_vcpus == 400
    assert result.warnings == []


def test_unknown_instance_type(seeded: dict[str, float], aws_env: str) -> None:
    with pytest.raises(PreflightError, match=r"'p9z\.mega' does not exist.*aws\.instance_type"):
        preflight(aws_env, instance_type="p9z.mega")


def test_type_not_offered_in_the_zone(seeded: dict[str, float], aws_env: str) -> None:
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=aws_env)
    zones = {
        o["Location"]
        for o in ec2.describe_instance_type_offerings(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": ["p4d.24xlarge"]}],
        )["InstanceTypeOfferings"]
    }
    missing = next(
        z["ZoneName"]
        for z in ec2.describe_availability_zones()["AvailabilityZones"]
        if z["ZoneName"] not in zones
    )
    with pytest.raises(PreflightError, match=f"not offered in {missing}.*Choose another"):
        preflight(aws_env, availability_zone=missing)


def test_first_offering_zone_when_none_is_given(seeded: dict[str, float], aws_env: str) -> None:
    seeded[P_QUOTA] = 400
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=aws_env)
    zones = sorted(
        o["Location"]
        for o in ec2.describe_instance_type_offerings(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": ["p4d.24xlarge"]}],
        )["InstanceTypeOfferings"]
    )
    assert preflight(aws_env, availability_zone=None).availability_zone == zones[0]
    # aws.zones: the first of them offering the type (`plan` renders where `up` tries first).
    elsewhere = next(
        z["ZoneName"]
        for z in ec2.describe_availability_zones()["AvailabilityZones"]
        if z["ZoneName"] not in zones
    )
    asked = (elsewhere, zones[-1], zones[0])
    assert len(zones) > 1, zones
    assert preflight(aws_env, availability_zone=None, zones=asked).availability_zone == zones[-1]


def test_without_checks_the_same_lookups_and_no_checks(
    seeded: dict[str, float], aws_env: str
) -> None:
    """checks=False (--skip-preflight): the AMI, zone and type are looked up as with the
    checks, the quota is not asked, and a type AWS does not know is a warning."""
    seeded[P_QUOTA] = 1  # far too small: not checked
    found = preflight(aws_env, availability_zone=None, checks=False)
    checked = preflight(aws_env, availability_zone=None, node_count=0)  # fits the quota of 1
    assert (found.ami_id, found.availability_zone, found.gpu_name, found.gpu_count) == (
        checked.ami_id,
        checked.availability_zone,
        "A100",
        8,
    )
    assert (found.efa_interface_count, found.quota_vcpus, found.warnings) == (4, None, [])
    unknown = preflight(aws_env, instance_type="p9z.mega", availability_zone=None, checks=False)
    assert unknown.availability_zone == f"{REGION}a"  # no zone offers it
    assert (unknown.ami_id, unknown.accelerator, unknown.efa_interface_count) == (DLAMI, None, 0)
    assert [w.split(" (")[0] for w in unknown.warnings] == ["instance type p9z.mega not described"]


def test_quota_exceeded_counts_running_vcpus(seeded: dict[str, float], aws_env: str) -> None:
    seeded[P_QUOTA] = 288  # room for three p4d.24xlarge (96 vCPUs each)
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=aws_env)
    running = ec2.run_instances(
        ImageId="ami-12c6146b", InstanceType="p4de.24xlarge", MinCount=1, MaxCount=1
    )["Instances"][0]["InstanceId"]  # 96 vCPUs counted against the same "P" quota
    try:
        with pytest.raises(PreflightError) as err:
            preflight(aws_env, node_count=3)
        message = str(err.value)
        assert "L-417A185B" in message
        assert "is 288 vCPUs" in message
        assert "96 are in use and 288 are requested" in message
        assert preflight(aws_env, node_count=2).running_vcpus == 96
    finally:
        ec2.terminate_instances(InstanceIds=[running])


def test_no_quota_answer_warns_and_goes_on(seeded: dict[str, float], aws_env: str) -> None:
    result = preflight(aws_env)  # nothing seeded for L-417A185B: moto answers NoSuchResource
    assert result.quota_vcpus is None
    assert any("L-417A185B" in w and "going on" in w for w in result.warnings)


def test_arm_gpu_type_gets_the_arm64_dlami(seeded: dict[str, float], aws_env: str) -> None:
    """g5g (Graviton + T4G): moto describes it as arm64, and the preflight resolves the arm64
    parameter, not the x86_64 one seeded by the fixture."""
    arm = DLAMI_PARAMETER.format(arch="arm64")
    seed_dlami("ami-0a1b2c3d4e5f60718", arm)
    try:
        found = preflight(aws_env, instance_type="g5g.xlarge", availability_zone=None)
    finally:
        unseed_dlami(arm)
    assert found.ami_id == "ami-0a1b2c3d4e5f60718"
    assert preflight(aws_env, instance_type="g5.12xlarge", availability_zone=None).ami_id == DLAMI


def test_an_x86_image_is_refused_for_an_arm_type(seeded: dict[str, float], aws_env: str) -> None:
    """aws.ami set to an x86_64 image for g5g (arm64): refused before Terraform, naming both."""
    found = preflight(aws_env, instance_type="g5g.xlarge", availability_zone=None, ami_id=X86)
    assert found.architectures == ("arm64",)
    clients = AwsClients(boto3.session.Session(), REGION, Emulator(url=aws_env))
    with pytest.raises(PreflightError, match=r"built for x86_64, but g5g\.xlarge runs arm64"):
        check_image_architecture(clients, X86, found.architectures, "g5g.xlarge")
    check_image_architecture(clients, X86, ("x86_64",), "g5.xlarge")  # matches: no error
    check_image_architecture(clients, X86, (), "p9z.mega")  # type not described: not checked


def test_the_bastions_own_image_gives_its_login_user(aws_env: str) -> None:
    """aws.bastion_ami: the first hop logs in as that image's user; a Windows image or one
    this region lacks is refused naming the field (a warning and ec2-user without checks)."""
    clients = AwsClients(boto3.session.Session(), REGION, Emulator(url=aws_env))
    warned: list[str] = []
    ubuntu, amazon = "ami-1e749f67", "ami-076f415166b04f5fe"  # moto's Ubuntu 14.04, AL2022
    assert resolve_bastion_user(clients, ubuntu, warn=warned.append, strict=True) == "ubuntu"
    assert resolve_bastion_user(clients, amazon, warn=warned.append, strict=True) == "ec2-user"
    with pytest.raises(PreflightError, match=r"aws\.bastion_ami\) is a Windows image"):
        resolve_bastion_user(clients, X86, warn=warned.append, strict=True)
    missing = "ami-0000000000000000f"
    with pytest.raises(PreflightError, match=r"ami-0+f \(aws\.bastion_ami\) does not exist"):
        resolve_bastion_user(clients, missing, warn=warned.append, strict=True)
    assert warned == []
    assert resolve_bastion_user(clients, missing, warn=warned.append, strict=False) == "ec2-user"
    assert len(warned) == 1 and "aws.bastion_ami" in warned[0]


def test_dlami_parameter_by_architecture() -> None:
    assert dlami_parameter(("x86_64",)) == DEFAULT_DLAMI_PARAMETER
    assert "/x86_64/" in dlami_parameter(("i386", "x86_64"))
    assert dlami_parameter(("arm64",)) == (
        "/aws/service/deeplearning/ami/arm64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
    )
    assert "ubuntu-24.04" in DEFAULT_DLAMI_PARAMETER  # python3.12 (jax >= 0.7 needs 3.11)
    with pytest.raises(PreflightError, match=r"architectures \['x86_64_mac'\].*aws\.ami"):
        dlami_parameter(("x86_64_mac",))


def test_efa_quotas_elastic_ips_and_interfaces(seeded: dict[str, float], aws_env: str) -> None:
    """An EFA node takes an Elastic IP and one network interface per card: the preflight
    counts those in use against the quotas (L-0263D0A3, L-DF5E4CA3) and refuses a cluster
    that would pass one."""
    seeded[P_QUOTA] = 4000
    seeded[EIP_QUOTA[0]] = 5
    seeded[ENI_QUOTA[0]] = 5000
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=aws_env)
    held = [ec2.allocate_address(Domain="vpc")["AllocationId"] for _ in range(2)]
    try:
        assert preflight(aws_env, node_count=3, efa=True).warnings == []
        with pytest.raises(PreflightError) as err:
            preflight(aws_env, node_count=4, efa=True)
        assert "4 are needed, 2 are in use" in str(err.value)
        assert "L-0263D0A3" in str(err.value) and "is 5 in" in str(err.value)
        # Without EFA no Elastic IP is taken: no check.
        assert preflight(aws_env, node_count=4).warnings == []
        assert preflight(aws_env, node_count=4, efa=True, checks=False).ami_id == DLAMI
        # p4d.24xlarge: 4 cards, so 3 nodes need 12 interfaces.
        seeded[ENI_QUOTA[0]] = 10
        with pytest.raises(PreflightError, match=r"4 EFA interface\(s\).*12 are needed"):
            preflight(aws_env, node_count=3, efa=True)
    finally:
        for allocation in held:
            ec2.release_address(AllocationId=allocation)


def test_missing_ami_parameter(aws_env: str) -> None:
    with pytest.raises(PreflightError, match=r"does not exist in this region\. Set aws\.ami"):
        preflight(aws_env, ami_parameter="/aws/service/deeplearning/ami/none/latest/ami-id")


@pytest.fixture
def moto_auth(aws_env: str) -> Iterator[None]:
    """Make moto check credentials (its /moto-api/reset-auth switch), then switch it off."""

    def reset_auth(count: str) -> None:
        request = urllib.request.Request(
            f"{aws_env}/moto-api/reset-auth",
            data=count.encode(),
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        urllib.request.urlopen(request).read()

    reset_auth("0")
    try:
        yield
    finally:
        reset_auth("inf")


def test_bad_credentials(moto_auth: None, aws_env: str) -> None:
    session = boto3.session.Session(
        aws_access_key_id="AKIAIOSFODNN7EXAMPLE", aws_secret_access_key="not-a-real-secret"
    )
    with pytest.raises(PreflightError, match=r"AWS rejected the credentials.*AWS_ACCESS_KEY_ID"):
        preflight(aws_env, session=session)


def test_no_credentials(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(PreflightError, match="no AWS credentials found"):
        preflight(aws_env, session=boto3.session.Session())


@pytest.mark.parametrize(
    ("instance_type", "klass"),
    [
        ("p4d.24xlarge", "p"),
        ("g5.xlarge", "g"),
        ("vt1.3xlarge", "vt"),
        ("trn1.32xlarge", "trn"),
        ("inf2.xlarge", "inf"),
        ("m7i.large", "standard"),
        ("t3.micro", "standard"),
        ("u-6tb1.metal", None),
    ],
)
def test_quota_class(instance_type: str, klass: str | None) -> None:
    assert quota_class(instance_type) == klass


P_SPOT_QUOTA = "L-7212CCBC"  # All P Spot Instance Requests


def test_spot_nodes_are_checked_against_the_spot_quota_apart_from_on_demand(
    seeded: dict[str, float], aws_env: str
) -> None:
    """Issue 26: Spot nodes count against the class's Spot vCPU quota, On-Demand ones against
    the On-Demand quota; a running Spot instance counts against the Spot one only."""
    seeded[P_QUOTA] = 96  # one p4d.24xlarge On-Demand
    seeded[P_SPOT_QUOTA] = 192  # two on Spot
    found = preflight(aws_env, node_count=3, spot_nodes=2)
    assert (found.quota_vcpus, found.spot_quota_vcpus) == (96, 192)
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=aws_env)
    running = ec2.run_instances(
        ImageId="ami-12c6146b",
        InstanceType="p4de.24xlarge",
        MinCount=1,
        MaxCount=1,
        InstanceMarketOptions={"MarketType": "spot"},
    )["Instances"][0]["InstanceId"]  # 96 Spot vCPUs of the same "P" class
    try:
        assert preflight(aws_env, node_count=2, spot_nodes=1).running_vcpus == 0  # On-Demand
        with pytest.raises(PreflightError) as err:
            preflight(aws_env, node_count=3, spot_nodes=2)
        message = str(err.value)
        assert "2 x p4d.24xlarge on Spot" in message
        assert f"All P Spot Instance Requests ({P_SPOT_QUOTA}) is 192 vCPUs" in message
        assert "96 are in use and 192 are requested" in message
        assert 'aws.market = "on-demand"' in message
    finally:
        ec2.terminate_instances(InstanceIds=[running])
    with pytest.raises(PreflightError, match=P_QUOTA):  # 2 On-Demand nodes do not fit
        preflight(aws_env, node_count=3, spot_nodes=1)


def test_a_ladder_rung_without_quota_headroom_is_skipped_naming_the_quota(
    seeded: dict[str, float], aws_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 44's quota-aware order, its lookups against moto: the P quota cannot hold two
    p4d.24xlarge (192 vCPUs), so that rung is skipped before any launch, naming the quota and
    how to raise it; the G rung after it, whose quota can, is the one `up` and `plan` take."""
    seeded[P_QUOTA], seeded["L-DB2E81BA"] = 100, 400
    monkeypatch.setenv(ENDPOINT_ENV_VAR, aws_env)
    spec = validate_spec(
        {
            "name": "quota-ladder",
            "provider": "aws",
            "nodes": 2,
            "aws": {
                "instance_types": ["p4d.24xlarge", "g5.48xlarge"],
                "region": REGION,
                "ssh_cidrs": ["203.0.113.7/32"],
            },
        }
    )
    p4d, g5 = assess_ladder(spec)
    assert (p4d.verdict, p4d.reason) == (
        "skipped",
        f"quota Running On-Demand P instances ({P_QUOTA}) has 100 vCPUs free in {REGION} (100 "
        f"less 0 in use), 192 needed: request an increase of {P_QUOTA} in the Service Quotas "
        "console",
    )
    assert (g5.verdict, g5.facts.quota and g5.facts.quota.headroom) == ("approved", 400)
    assert first_approved(spec, (p4d, g5)) == g5.rung
