"""The AWS target behind ``skyinfra up/run/status/down`` for ``provider = "aws"``.

:class:`AwsTarget` is the registry's entry (skyinfra/targets/base.py's protocol); its verbs are
these functions:

- :func:`render_files` runs the boto3 preflight (unless skipped), resolves what the Terraform
  needs as concrete values (availability zone, AMI id, login user, GPUs, EFA interfaces),
  builds the runtime wheel and stages it in S3, renders every node's cloud-init user data and
  the root module, and returns the files. It writes nothing to the workspace: ``lifecycle.up``
  writes the files only after this returned, so a failed check leaves no workspace behind.
- :func:`transport` reaches the nodes over SSH with the spec's key (in emulator mode only
  through SKYINFRA_AWS_EMULATED_NODES).

Values resolved at the first ``up`` are pinned in the workspace's tfvars and reused by later
ones: the AMI id (a new Deep Learning AMI release must never show up as node replacements)
and the availability zone (the subnet lives there).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import boto3
import paramiko
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from skyinfra.errors import ConfigError, PreflightError, SpecError, WorkspaceError
from skyinfra.render import module_files, module_source
from skyinfra.spec import ClusterSpec
from skyinfra.targets.aws.cloudinit import NodeUserData, default_bootstrap_script, render_user_data
from skyinfra.targets.aws.endpoints import (
    EMULATED_NODES_ENV_VAR,
    ENDPOINT_ENV_VAR,
    Emulator,
    boto3_client_kwargs,
    emulated_nodes_from_env,
    emulator_from_env,
)
from skyinfra.targets.aws.preflight import (
    DEFAULT_DLAMI_PARAMETER,
    PreflightResult,
    aws_errors,
    check_credentials,
    describe_type,
    resolve_ami,
    run_preflight,
)
from skyinfra.targets.aws.render import MODULES as AWS_MODULES
from skyinfra.targets.aws.render import (
    AwsClusterParams,
    node_names,
    planned_private_ips,
    render_root_module,
    validate_params,
)
from skyinfra.targets.aws.spec import MAX_AWS_NODES, NO_JAX, AwsSpec, parse_aws_section
from skyinfra.targets.aws.ssh import CLOUD_INIT_STATUS, SshTarget, SshTransport
from skyinfra.targets.aws.staging import default_bucket_name, stage_wheel
from skyinfra.targets.base import TargetOption, TargetOptions
from skyinfra.topology import Accelerator, Node, Topology, build_topology
from skyinfra.wheel import build_runtime_wheel
from skyinfra.workspace import Workspace

if TYPE_CHECKING:
    from skyinfra.targets.base import Target

Echo = Callable[[str], None]

TFVARS_FILE = "terraform.tfvars.json"
# Values looked up at `up` that `run` needs later (the login user), kept beside the root module.
TARGET_FILE = "aws-target.json"
# cloud-init's node directory (venv/, work/, pids/): the SSH transport's node root.
NODE_DIR = "/opt/skyinfra/node"
SSH_PORT = 22
# How long `run` waits by default for nodes whose cloud-init is still installing (boot, apt,
# a venv with jax[cuda12]: several minutes on a fresh Deep Learning AMI).
WAIT_READY_S = 900
KNOWN_HOSTS_FILE = "known_hosts"

_PUBLIC_KEY_RE = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+")

# The default login user of an AMI, from words in its name or description (first match wins:
# "Deep Learning AMI Ubuntu" is an Ubuntu image). AWS lists them in "Manage system users":
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/managing-users.html
_LOGIN_USERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"ubuntu|canonical"), "ubuntu"),
    (re.compile(r"debian"), "admin"),
    (re.compile(r"amzn|amazon linux|al2023|amazon-eks|eks-node"), "ec2-user"),
    (re.compile(r"rhel|red hat|suse|sles"), "ec2-user"),
    (re.compile(r"rocky"), "rocky"),
    (re.compile(r"centos"), "centos"),
    (re.compile(r"fedora"), "fedora"),
)


@dataclass(frozen=True)
class Resolved:
    """What the preflight (or, when skipped, the bare lookups) found."""

    account_id: str
    availability_zone: str
    ami_id: str
    ssh_user: str
    accelerator: tuple[str, int] | None
    efa_interface_count: int
    existing_vpc_id: str | None = None
    existing_subnet_id: str | None = None
    subnet_cidr_block: str | None = None


# ---------------------------------------------------------------- helpers


def _aws_of(spec: ClusterSpec) -> AwsSpec:
    return spec.section_as(AwsSpec)


def ssh_key_paths(aws: AwsSpec) -> tuple[Path, str]:
    """The private key file and its public key line; SpecError when the key is unusable."""
    private = Path(aws.ssh_key).expanduser()
    hint = f"create one with `ssh-keygen -t ed25519 -f {aws.ssh_key}`, or set aws.ssh_key"
    if not private.is_file():
        raise SpecError("aws.ssh_key", aws.ssh_key, f"an existing SSH private key file ({hint})")
    public_file = Path(f"{private}.pub")
    if public_file.is_file():
        lines = public_file.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        public = lines[0].strip() if lines else ""
    else:
        try:
            key = paramiko.PKey.from_path(private)
        except (paramiko.SSHException, OSError, ValueError) as err:
            raise SpecError(
                "aws.ssh_key",
                aws.ssh_key,
                f"a private key paramiko can read, or its public key beside it as "
                f"{public_file.name} ({err})",
            ) from None
        public = f"{key.get_name()} {key.get_base64()}"
    if not _PUBLIC_KEY_RE.match(public):
        raise SpecError(
            "aws.ssh_key",
            f"{public_file}",
            "one OpenSSH public key line (ssh-ed25519 AAAA..., ssh-rsa AAAA... or ecdsa-sha2-...)",
        )
    return private, public


def previous_settings(ws: Workspace, region: str) -> dict[str, Any]:
    """The cluster settings of the last `up` (its tfvars), when it was in the same region."""
    path = ws.path / TFVARS_FILE
    if not ws.exists() or not path.is_file():
        return {}
    try:
        tfvars = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise WorkspaceError(f"cluster {ws.name!r}: {path} is not valid JSON ({err})") from err
    cluster = tfvars.get("cluster") if isinstance(tfvars, dict) else None
    if tfvars.get("region") != region or not isinstance(cluster, dict):
        return {}
    return cluster


def login_user(image: Mapping[str, Any]) -> str | None:
    """The default SSH user of an AMI from DescribeImages, or None when it cannot tell."""
    text = f"{image.get('Name', '')} {image.get('Description', '')}".lower()
    for pattern, user in _LOGIN_USERS:
        if pattern.search(text):
            return user
    return None


class _Aws:
    """boto3 clients for one region, pointed at the emulator when one is configured."""

    def __init__(
        self, session: boto3.session.Session, region: str, emulator: Emulator | None
    ) -> None:
        self.session = session
        self.region = region
        self.emulator = emulator
        self._clients: dict[str, Any] = {}

    def client(self, service: str) -> Any:
        if service not in self._clients:
            kwargs = boto3_client_kwargs(self.region, self.emulator)
            if service == "s3":
                # Presign with SigV4: botocore otherwise picks the legacy SigV2 presigner in
                # some regions (us-east-1, eu-west-1), which S3 is retiring.
                sigv4 = Config(signature_version="s3v4")
                kwargs["config"] = kwargs["config"].merge(sigv4) if "config" in kwargs else sigv4
            self._clients[service] = self.session.client(service, **kwargs)
        return self._clients[service]

    def secret_values(self) -> list[str]:
        """The caller's secret key: it must never end up in user data."""
        credentials = self.session.get_credentials()
        if credentials is None:
            return []
        frozen = credentials.get_frozen_credentials()
        # Not the session token: a presigned URL made with temporary credentials carries it
        # (see staging.py); it is useless without the secret key, which never leaves here.
        return [frozen.secret_key] if frozen.secret_key else []


# ---------------------------------------------------------------- resolution


def _existing_network(aws: _Aws, spec_aws: AwsSpec) -> dict[str, str] | None:
    """VPC, CIDR block and zone of the subnet the spec names (None: skyinfra makes its own)."""
    if spec_aws.subnet_id is None:
        if spec_aws.vpc_id is not None:
            raise SpecError(
                "aws.subnet_id",
                None,
                f"a subnet of {spec_aws.vpc_id} too: with aws.vpc_id the nodes go into an "
                "existing subnet (or drop aws.vpc_id and skyinfra creates VPC and subnet)",
            )
        return None
    with aws_errors(f"looking up subnet {spec_aws.subnet_id}"):
        try:
            subnets = aws.client("ec2").describe_subnets(SubnetIds=[spec_aws.subnet_id])["Subnets"]
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") != "InvalidSubnetID.NotFound":
                raise
            subnets = []
    if not subnets:
        raise PreflightError(
            f"subnet {spec_aws.subnet_id} (aws.subnet_id) does not exist in {spec_aws.region}; "
            "check the id and the region"
        )
    subnet = subnets[0]
    if spec_aws.vpc_id is not None and subnet["VpcId"] != spec_aws.vpc_id:
        raise SpecError(
            "aws.vpc_id", spec_aws.vpc_id, f"the VPC of {spec_aws.subnet_id}: {subnet['VpcId']}"
        )
    return {
        "vpc_id": str(subnet["VpcId"]),
        "cidr_block": str(subnet["CidrBlock"]),
        "availability_zone": str(subnet["AvailabilityZone"]),
    }


def _first_offering_zone(aws: _Aws, instance_type: str) -> str | None:
    offerings = aws.client("ec2").describe_instance_type_offerings(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    )["InstanceTypeOfferings"]
    zones = sorted({str(o["Location"]) for o in offerings})
    return zones[0] if zones else None


def _ssh_user(aws: _Aws, spec_aws: AwsSpec, ami_id: str, warn: Echo, strict: bool) -> str:
    if spec_aws.ssh_user is not None:
        return spec_aws.ssh_user
    with aws_errors(f"looking up AMI {ami_id}"):
        try:
            images = aws.client("ec2").describe_images(ImageIds=[ami_id])["Images"]
        except ClientError as err:
            if not str(err.response.get("Error", {}).get("Code", "")).startswith("InvalidAMIID"):
                raise
            images = []
    if not images:
        if strict:
            raise PreflightError(
                f"AMI {ami_id} does not exist in {spec_aws.region} (or is not shared with this "
                "account). Set aws.ami to an AMI of this region, or leave it out for the Deep "
                "Learning AMI."
            )
        warn(f"AMI {ami_id} not found; logging in as 'ubuntu' (set aws.ssh_user to change it)")
        return "ubuntu"
    image = images[0]
    if str(image.get("Platform", "")).lower() == "windows":
        raise PreflightError(
            f"AMI {ami_id} ({image.get('Name')}) is a Windows image; skyinfra nodes run Linux "
            "(cloud-init, bash, Python). Pick a Linux AMI or leave aws.ami out."
        )
    user = login_user(image)
    if user is None:
        raise PreflightError(
            f"cannot tell the login user of AMI {ami_id} ({image.get('Name')!r}); set "
            "aws.ssh_user (ubuntu, ec2-user, admin, ...)"
        )
    return user


def resolve(
    spec: ClusterSpec,
    ws: Workspace,
    aws: _Aws,
    *,
    echo: Echo,
    skip_preflight: bool,
) -> Resolved:
    """Run the preflight (or only the lookups when skipped) and pin the values."""
    spec_aws = _aws_of(spec)
    previous = previous_settings(ws, spec_aws.region)

    def warn(message: str) -> None:
        echo(f"[skyinfra] warning: {message}")

    # Credentials first, in both modes: every later failure would otherwise look like
    # something else, and the account id names the staging bucket.
    with aws_errors("checking the AWS credentials"):
        account = check_credentials(aws.client("sts"))
    network = _existing_network(aws, spec_aws)
    zone = (network or {}).get("availability_zone") or previous.get("availability_zone")
    ami = spec_aws.ami
    if ami is None and previous.get("ami_id"):
        ami = str(previous["ami_id"])
        echo(f"[skyinfra] AMI {ami} (resolved at the first `up`; set aws.ami to change it)")

    if not skip_preflight:
        if zone is None:
            with aws_errors(f"looking up the zones offering {spec_aws.instance_type}"):
                zone = _first_offering_zone(aws, spec_aws.instance_type)
            if zone is None:
                # Let the preflight say it: unknown type, or offered nowhere in the region.
                zone = f"{spec_aws.region}a"
        echo(
            f"[skyinfra] preflight: credentials, {spec.nodes} x {spec_aws.instance_type} in "
            f"{zone}, AMI, vCPU quota"
        )
        result: PreflightResult = run_preflight(
            region=spec_aws.region,
            availability_zone=zone,
            instance_type=spec_aws.instance_type,
            node_count=spec.nodes,
            ami_id=ami,
            session=aws.session,
            emulator=aws.emulator,
        )
        for message in result.warnings:
            warn(message)
        ami = result.ami_id
        gpu = (result.gpu_name, result.gpu_count) if result.gpu_name else None
        efa = result.efa_interface_count
    else:
        echo("[skyinfra] --skip-preflight: instance type offering and vCPU quota not checked")
        if ami is None:
            with aws_errors("resolving the Deep Learning AMI"):
                ami = resolve_ami(aws.client("ssm"), DEFAULT_DLAMI_PARAMETER)
        if zone is None:
            try:
                zone = _first_offering_zone(aws, spec_aws.instance_type)
            except (ClientError, BotoCoreError) as err:
                warn(f"could not look up the zones offering {spec_aws.instance_type}: {err}")
            zone = zone or f"{spec_aws.region}a"
        gpu, efa = None, 0
        try:
            info = describe_type(aws.client("ec2"), spec_aws.instance_type)
            gpus = (info.get("GpuInfo") or {}).get("Gpus") or []
            count = sum(int(g.get("Count", 0)) for g in gpus)
            gpu = (str(gpus[0]["Name"]), count) if gpus else None
            network_info = info.get("NetworkInfo") or {}
            if network_info.get("EfaSupported"):
                efa = int((network_info.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0))
        except (PreflightError, ClientError, BotoCoreError) as err:
            warn(f"instance type {spec_aws.instance_type} not described ({err}); no GPU info")

    if spec_aws.efa and efa == 0:
        raise PreflightError(
            f"instance type {spec_aws.instance_type!r} has no EFA interfaces; set aws.efa = false "
            "or pick an EFA type (for example p4d.24xlarge or p5.48xlarge)"
        )
    user = _ssh_user(aws, spec_aws, ami, warn, strict=not skip_preflight)
    return Resolved(
        account_id=account,
        availability_zone=zone,
        ami_id=ami,
        ssh_user=user,
        accelerator=gpu,
        efa_interface_count=efa if spec_aws.efa else 0,
        existing_vpc_id=(network or {}).get("vpc_id"),
        existing_subnet_id=spec_aws.subnet_id,
        subnet_cidr_block=(network or {}).get("cidr_block"),
    )


# ---------------------------------------------------------------- render


def cluster_params(
    spec: ClusterSpec, resolved: Resolved | None, public_key: str
) -> AwsClusterParams:
    """The root module's parameters; with ``resolved=None`` placeholders for a early check."""
    spec_aws = _aws_of(spec)
    extra: dict[str, Any] = {}
    if resolved is not None and resolved.subnet_cidr_block:
        extra["subnet_cidr_block"] = resolved.subnet_cidr_block
    return AwsClusterParams(
        cluster_name=spec.name,
        region=spec_aws.region,
        availability_zone=resolved.availability_zone if resolved else f"{spec_aws.region}a",
        instance_type=spec_aws.instance_type,
        ami_id=resolved.ami_id if resolved else "ami-00000000",
        node_count=spec.nodes,
        ssh_public_key=public_key,
        ssh_ingress_cidrs=list(spec_aws.ssh_cidrs),
        allow_ssh_from_anywhere=spec_aws.allow_ssh_from_anywhere,
        root_volume_size_gb=spec_aws.disk_gb,
        placement_group=spec_aws.placement_group,
        efa_interface_count=resolved.efa_interface_count if resolved else 0,
        existing_vpc_id=resolved.existing_vpc_id if resolved else None,
        existing_subnet_id=resolved.existing_subnet_id if resolved else None,
        head_port=spec.head_port,
        accelerator=resolved.accelerator if resolved else None,
        **extra,
    )


def preboot_topology(spec: ClusterSpec, params: AwsClusterParams) -> Topology:
    """The topology as far as it is known before any node exists (schema 1).

    Addresses are fixed by the nodes module, so they are known; instance ids and public
    addresses are not (null). `skyinfra run` ships the full topology.json to every node.
    Built by the same builder as the topology from Terraform's outputs.
    """
    ips = planned_private_ips(params)
    accelerator = None if params.accelerator is None else Accelerator(*params.accelerator)
    nodes = [
        Node(
            index=index,
            name=name,
            private_ip=ips[name],
            public_ip=None,
            instance_id=None,
            accelerator=accelerator,
        )
        for index, name in enumerate(node_names(params.node_count))
    ]
    return build_topology(spec, head_addr=ips["node-0"], nodes=nodes)


def render_files(
    spec: ClusterSpec,
    ws: Workspace,
    *,
    echo: Echo | None = None,
    skip_preflight: bool = False,
    session: boto3.session.Session | None = None,
) -> dict[str, str]:
    """Preflight, stage the wheel, render user data and the root module: file name -> text."""
    say: Echo = echo or (lambda _line: None)
    spec_aws = _aws_of(spec)
    _, public_key = ssh_key_paths(spec_aws)
    validate_params(cluster_params(spec, None, public_key))  # pure checks before any AWS call

    aws = _Aws(session or boto3.session.Session(), spec_aws.region, emulator_from_env())
    if aws.emulator is not None:
        say(f"[skyinfra] AWS API emulator at {aws.emulator.url} ({aws.emulator.env_var})")
    resolved = resolve(spec, ws, aws, echo=say, skip_preflight=skip_preflight)
    params = cluster_params(spec, resolved, public_key)
    validate_params(params)

    wheel = build_runtime_wheel()
    bucket = default_bucket_name(resolved.account_id, spec_aws.region)
    staged = stage_wheel(
        aws.client("s3"), wheel.path, bucket=bucket, region=spec_aws.region, cluster=spec.name
    )
    say(f"[skyinfra] runtime wheel staged at s3://{staged.bucket}/{staged.key}")

    topology_json = json.dumps(preboot_topology(spec, params).to_dict(), sort_keys=True)
    bootstrap = default_bootstrap_script()
    forbidden = aws.secret_values()
    user_data = {
        name: render_user_data(
            NodeUserData(
                cluster_name=spec.name,
                node_index=index,
                topology_json=topology_json,
                wheel_url=staged.url,
                wheel_sha256=staged.sha256,
                wheel_filename=staged.filename,
                bootstrap_script=bootstrap,
                jax_extra=None if spec_aws.jax_extra == NO_JAX else spec_aws.jax_extra,
                python_packages=spec.python_packages,
                idle_shutdown_minutes=spec_aws.idle_shutdown_minutes,
                ssh_user=resolved.ssh_user,
                node_dir=NODE_DIR,
                forbidden_values=forbidden,
            )
        )
        for index, name in enumerate(node_names(spec.nodes))
    }
    files = render_root_module(
        params,
        modules_source=module_source("aws"),
        user_data=user_data,
        emulator=aws.emulator,
    )
    files.update(module_files(*AWS_MODULES))
    files[TARGET_FILE] = (
        json.dumps(
            {
                "region": spec_aws.region,
                "availability_zone": resolved.availability_zone,
                "ami_id": resolved.ami_id,
                "ssh_user": resolved.ssh_user,
                "wheel": f"s3://{staged.bucket}/{staged.key}",
                "wheel_sha256": staged.sha256,
            },
            indent=2,
        )
        + "\n"
    )
    return files


# ---------------------------------------------------------------- transport


def transport(
    ws: Workspace, spec: ClusterSpec, topology: Topology, *, connect_timeout_s: float = 20.0
) -> SshTransport:
    """SSH to every node: its public address, or the private one when it has none. The node
    is ready once cloud-init's provision.sh wrote its ready marker (cloudinit.READY_MARKER).

    In emulator mode the nodes' own addresses are never dialled (see endpoints.py): a node is
    reached through SKYINFRA_AWS_EMULATED_NODES, or reads as unreachable, saying why.
    """
    spec_aws = _aws_of(spec)
    key = Path(spec_aws.ssh_key).expanduser()
    if not key.is_file():
        raise WorkspaceError(
            f"cluster {ws.name!r}: the SSH key {spec_aws.ssh_key} (aws.ssh_key) is missing; "
            "the nodes only accept the key they were created with"
        )
    user = spec_aws.ssh_user
    if user is None:
        settings = ws.read_json(ws.path / TARGET_FILE)
        user = str(settings["ssh_user"])
    targets: dict[int, SshTarget] = {}
    unreachable: dict[int, str] = {}
    emulator = emulator_from_env()
    if emulator is None:
        for node in topology.nodes:
            host = node.public_ip or node.private_ip
            targets[node.index] = SshTarget(host=host, user=user, port=SSH_PORT)
    else:
        emulated = emulated_nodes_from_env()
        names = [node.name for node in topology.nodes]
        for name in emulated:
            if name not in names:
                raise ConfigError(
                    f"{EMULATED_NODES_ENV_VAR}[{name!r}]", name, f"a node of {ws.name!r}: {names}"
                )
        for node in topology.nodes:
            if node.name in emulated:
                at = emulated[node.name]
                targets[node.index] = SshTarget(host=at.host, user=user, port=at.port, root=at.root)
            else:
                addresses = ", ".join(a for a in (node.public_ip, node.private_ip) if a)
                unreachable[node.index] = (
                    f"not dialled: emulator mode ({ENDPOINT_ENV_VAR} is set), so {node.name}'s "
                    f"addresses ({addresses}) are the emulator's, not a machine's; map "
                    f"{node.name} to a stand-in sshd with {EMULATED_NODES_ENV_VAR}"
                )
    return SshTransport(
        targets,
        key_path=key,
        known_hosts=ws.path / KNOWN_HOSTS_FILE,
        node_root=NODE_DIR,
        connect_timeout_s=connect_timeout_s,
        # An emulated node's cloud-init never ran: the stand-in machine's answer says nothing.
        cloud_init_status=CLOUD_INIT_STATUS if emulator is None else None,
        unreachable=unreachable,
    )


# ---------------------------------------------------------------- the Target


SKIP_PREFLIGHT = TargetOption(
    name="skip_preflight",
    flag="--skip-preflight",
    help="skip the boto3 checks before Terraform (instance type offered in the zone, vCPU "
    "quota); values such as the AMI id are still looked up.",
)


class AwsTarget:
    """EC2 GPU nodes in a VPC of their own (or the spec's subnet), reached over SSH."""

    name: ClassVar[str] = "aws"
    max_nodes: ClassVar[int] = MAX_AWS_NODES
    wait_ready_s: ClassVar[float] = float(WAIT_READY_S)
    options: ClassVar[tuple[TargetOption, ...]] = (SKIP_PREFLIGHT,)

    def parse_section(self, raw: Any, *, nodes: int) -> AwsSpec:
        return parse_aws_section(raw)

    def render(
        self, spec: ClusterSpec, ws: Workspace, *, echo: Echo, options: TargetOptions
    ) -> dict[str, str]:
        return render_files(
            spec, ws, echo=echo, skip_preflight=bool(options.get(SKIP_PREFLIGHT.name))
        )

    def transport(
        self,
        ws: Workspace,
        spec: ClusterSpec,
        topology: Topology,
        *,
        connect_timeout_s: float | None = None,
    ) -> SshTransport:
        if connect_timeout_s is None:
            return transport(ws, spec, topology)
        return transport(ws, spec, topology, connect_timeout_s=connect_timeout_s)

    def nodes_to_replace(
        self, ws: Workspace, spec: ClusterSpec, in_state: Sequence[str]
    ) -> list[str]:
        """None: Terraform's refresh sees an instance that is gone (terminated, deleted) and
        plans a new one itself; a node whose bootstrap failed is not replaced by `up`."""
        return []

    def after_down(self, ws: Workspace, spec: ClusterSpec, *, echo: Echo) -> None:
        """Forget the destroyed nodes' host keys: the next `up` makes new nodes with new keys
        (and, for the private addresses, the same IPs), which a stale pin would refuse."""
        known_hosts = ws.path / KNOWN_HOSTS_FILE
        if known_hosts.is_file():
            known_hosts.unlink()
            echo(f"[skyinfra] forgot the destroyed nodes' host keys ({known_hosts.name})")


if TYPE_CHECKING:
    _satisfies_the_protocol: Target = AwsTarget()
