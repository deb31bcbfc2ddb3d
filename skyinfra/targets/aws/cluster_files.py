"""The files `up` writes to an AWS cluster's workspace, and the facts they are made from.

:func:`render_files` runs the boto3 preflight (unless skipped: then only its lookups) through
resolve.py, which finds what the Terraform needs as concrete values (availability zone, AMI id,
login user, GPUs, EFA interfaces); on a private network it stages the nodes' S3 wheelhouse
(wheelhouse_stage.py, before anything is created); then it builds the runtime wheel and stages
it in S3, renders every node's cloud-init user data and the root module, and returns the
files. It writes nothing
to the workspace: ``lifecycle.up`` writes the files only after this returned, so a failed check
leaves no workspace behind. :func:`cluster_params` is the root module's parameters and
:func:`preboot_topology` the topology known before any node exists.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import boto3

from skyinfra import timeline
from skyinfra.render import module_files, module_source
from skyinfra.spec import ClusterSpec
from skyinfra.targets.aws import checkpoint_store, launch_plan
from skyinfra.targets.aws.addressing import subnet_for
from skyinfra.targets.aws.cloudinit import (
    NODE_DIR,
    NodeUserData,
    default_bootstrap_script,
    render_user_data,
)
from skyinfra.targets.aws.endpoints import (
    emulator_from_env,
)
from skyinfra.targets.aws.head import authorized_key_line, head_key_public
from skyinfra.targets.aws.keys import ssh_key_paths
from skyinfra.targets.aws.network_spec import BASTION_DEFAULT_USER
from skyinfra.targets.aws.reach import TARGET_FILE
from skyinfra.targets.aws.render import MODULES as AWS_MODULES
from skyinfra.targets.aws.render import (
    AwsClusterParams,
    PrivateNetwork,
    node_names,
    planned_private_ips,
    render_root_module,
    validate_params,
)
from skyinfra.targets.aws.resolve import Resolved, resolve
from skyinfra.targets.aws.session import AwsClients, new_session
from skyinfra.targets.aws.spec import (
    NO_JAX,
    AwsSpec,
    jax_requirement,
    node_markets,
    operator_jax_version,
)
from skyinfra.targets.aws.staging import (
    StagedWheel,
    default_bucket_name,
    stage_wheel,
    staging_prefix,
)
from skyinfra.targets.aws.wheelhouse import StagedWheelhouse
from skyinfra.targets.aws.wheelhouse_stage import node_wheelhouse
from skyinfra.targets.identity import (
    CLUSTER_TAG,
    WORKSPACE_TAG,
    workspace_id,
    workspace_id_file,
)
from skyinfra.terraform.backend import parse_backend
from skyinfra.topology import Accelerator, Node, Topology, build_topology
from skyinfra.wheel import build_operator_wheel, build_runtime_wheel
from skyinfra.workspace import Workspace

Echo = Callable[[str], None]


def aws_of(spec: ClusterSpec) -> AwsSpec:
    return spec.section_as(AwsSpec)


# ---------------------------------------------------------------- render


def cluster_params(
    spec: ClusterSpec,
    resolved: Resolved | None,
    public_key: str,
    *,
    ws_id: str | None = None,
    staging: tuple[str, str] | None = None,
    capacity_reservation: tuple[str, bool] | None = None,
    checkpoints: tuple[str, str] | None = None,
    markets: Mapping[str, str] | None = None,
) -> AwsClusterParams:
    """The root module's parameters; with ``resolved=None`` placeholders for a early check.
    ``ws_id``: the workspace's id, tagged on every resource beside the cluster's name;
    ``staging``: the wheel's (bucket, prefix), which the nodes' role may read; ``markets``:
    each node's market (default: the spec's, aws.market and aws.head_market)."""
    spec_aws = aws_of(spec)
    extra: dict[str, Any] = {}
    tags = {CLUSTER_TAG: spec.name}
    if ws_id is not None:
        tags[WORKSPACE_TAG] = ws_id
    if resolved is not None and resolved.subnet_cidr_block:
        extra["subnet_cidr_block"] = resolved.subnet_cidr_block
    else:  # skyinfra's own subnet: a /24, or larger when the nodes need it (addressing.py)
        extra["subnet_cidr_block"] = subnet_for(spec.nodes)
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
        tags=tags,
        staging=staging,
        capacity_reservation=capacity_reservation,
        checkpoints=checkpoints,
        node_markets=dict(markets if markets is not None else node_markets(spec_aws, spec.nodes)),
        spot_max_price=spec_aws.spot_max_price,
        head_recovery=head_recovery_state(spec),
        private_network=private_network(spec_aws, resolved),
        **extra,
    )


def private_network(spec_aws: AwsSpec, resolved: Resolved | None) -> PrivateNetwork | None:
    """The renderer's private network (issue 46), or None for a public one. The bastion
    boots aws.bastion_ami with the login user the preflight read from it, else its module's
    Amazon Linux 2023 minimal (ec2-user)."""
    fields = spec_aws.network_fields
    if not fields.private:
        return None
    ami = fields.bastion_ami if fields.has_bastion else None
    user = resolved.bastion_user if resolved is not None else None
    return PrivateNetwork(
        bastion=fields.has_bastion,
        nat=fields.nat,
        ssm=fields.ssm,
        bastion_ami=ami,
        bastion_user=user if ami is not None and user is not None else BASTION_DEFAULT_USER,
    )


def head_recovery_state(spec: ClusterSpec) -> tuple[str, str] | None:
    """``aws.recover``: the (bucket, key) of the cluster's state object in the spec's S3
    backend, which node-0's own role may read and write (the nodes module's head_recovery);
    None without aws.recover (the spec refuses aws.recover without a backend)."""
    if not aws_of(spec).recover or spec.backend is None:
        return None
    backend = parse_backend(spec.backend)
    return backend.bucket, backend.key(spec.name)


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


@dataclass(frozen=True)
class _UnattendedRecovery:
    """What aws.recover adds to the nodes' user data: node 0's skyinfra wheel (``head_wheel``)
    and the cluster's own key, which every node authorizes (``authorized_keys``). Empty
    without aws.recover."""

    head_wheel: StagedWheel | None = None
    authorized_keys: Sequence[str] = ()


_NO_RECOVERY = _UnattendedRecovery()


@dataclass(frozen=True)
class _Staged:
    """What `up` staged in S3 for the nodes: the runtime wheel, and a private network's
    wheelhouse (None: the nodes install from the package indexes)."""

    wheel: StagedWheel
    wheelhouse: StagedWheelhouse | None = None


def _user_data(
    spec: ClusterSpec,
    resolved: Resolved,
    staged_for_nodes: _Staged,
    topology: Topology,
    forbidden: list[str],
    checkpoints: dict[str, str] | None = None,
    spot_nodes: Sequence[str] = (),
    recovery: _UnattendedRecovery = _NO_RECOVERY,
) -> dict[str, str]:
    """Every node's cloud-init document: node name -> text (``spot_nodes``: those launched on
    the Spot market, which watch for an interruption notice; ``recovery``: with aws.recover)."""
    head_wheel = recovery.head_wheel
    staged, wheelhouse = staged_for_nodes.wheel, staged_for_nodes.wheelhouse
    spec_aws = aws_of(spec)
    topology_json = json.dumps(topology.to_dict(), sort_keys=True)
    bootstrap = default_bootstrap_script()
    return {
        name: render_user_data(
            NodeUserData(
                cluster_name=spec.name,
                node_index=index,
                topology_json=topology_json,
                wheel_url=staged.url,
                wheel_region=spec_aws.region,
                wheel_sha256=staged.sha256,
                wheel_filename=staged.filename,
                bootstrap_script=bootstrap,
                jax_extra=None if spec_aws.jax_extra == NO_JAX else spec_aws.jax_extra,
                jax_version=spec_aws.jax_version or operator_jax_version(),
                uv_version=operator_uv_version(),
                python_packages=spec.python_packages,
                idle_shutdown_minutes=spec_aws.idle_shutdown_minutes,
                max_lifetime_minutes=(
                    None
                    if spec_aws.max_lifetime_hours is None
                    else math.ceil(spec_aws.max_lifetime_hours * 60)
                ),
                ssh_user=resolved.ssh_user,
                node_dir=NODE_DIR,
                efa=spec_aws.efa,
                checkpoints=checkpoints,
                spot=name in spot_nodes,
                authorized_keys=recovery.authorized_keys,
                head_wheel=(
                    (head_wheel.url, head_wheel.sha256, head_wheel.filename)
                    if head_wheel is not None and index == 0
                    else None
                ),
                wheelhouse=(
                    None if wheelhouse is None else (wheelhouse.index_url, wheelhouse.index_sha256)
                ),
                forbidden_values=forbidden,
            )
        )
        for index, name in enumerate(node_names(spec.nodes))
    }


def operator_uv_version() -> str:
    """The operator's uv version, which the nodes install first; "" without one (pip)."""
    try:
        return importlib.metadata.version("uv")
    except importlib.metadata.PackageNotFoundError:
        return ""


def _target_settings(
    spec_aws: AwsSpec,
    resolved: Resolved,
    staged: _Staged,
    ws_id: str,
    store: checkpoint_store.CheckpointStore,
) -> str:
    """The text of TARGET_FILE: what `up` looked up that later commands read."""
    wheelhouse = staged.wheelhouse
    wheel = staged.wheel
    settings = {
        "workspace_id": ws_id,
        "account_id": resolved.account_id,
        "staging_bucket": wheel.bucket,
        "staging_prefix": wheel.prefix,
        "region": spec_aws.region,
        "availability_zone": resolved.availability_zone,
        "ami_id": resolved.ami_id,
        "ssh_user": resolved.ssh_user,
        "wheel": f"s3://{wheel.bucket}/{wheel.key}",
        "wheel_sha256": wheel.sha256,
        # What the nodes install (status shows it): the spec's or the operator's jax.
        "jax": jax_requirement(spec_aws),
        # Where the nodes keep checkpoints (checkpoint_store.py); `down` keeps it.
        "checkpoints_url": store.url,
        # A private network's S3 wheelhouse (shared: `down` leaves it).
        **({} if wheelhouse is None else {"wheelhouse": wheelhouse.s3_url}),
    }
    return json.dumps(settings, indent=2) + "\n"


def running_nodes(ws: Workspace) -> int:
    """How many nodes the workspace's topology.json lists (0: none up; `down` removes it)."""
    if not ws.topology_file.is_file():
        return 0
    nodes = ws.read_json(ws.topology_file).get("nodes")
    return len(nodes) if isinstance(nodes, list | dict) else 0


def render_files(
    spec: ClusterSpec,
    ws: Workspace,
    *,
    echo: Echo | None = None,
    skip_preflight: bool = False,
    session: boto3.session.Session | None = None,
    zone: str | None = None,
    capacity_reservation: tuple[str, bool] | None = None,
    markets: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Preflight, stage the wheel, render user data and the root module: file name -> text.
    ``zone``, ``capacity_reservation`` and ``markets`` (each node's market; default the
    spec's): chosen by capacity failover (failover.py)."""
    say: Echo = echo or (lambda _line: None)
    spec_aws = aws_of(spec)
    if markets is None:  # `plan`, `render`: a running cluster's nodes keep their market
        markets = launch_plan.launched_markets(spec, ws, running_nodes(ws))
    _, public_key = ssh_key_paths(spec_aws)
    early = cluster_params(spec, None, public_key, markets=markets)
    validate_params(early)  # pure checks before any AWS call

    clients = AwsClients(session or new_session(), spec_aws.region, emulator_from_env())
    if clients.emulator is not None:
        say(f"[skyinfra] AWS API emulator at {clients.emulator.url} ({clients.emulator.env_var})")
    timeline.lap("validate")
    resolved = resolve(
        spec,
        ws,
        clients,
        echo=say,
        skip_preflight=skip_preflight,
        zone=zone,
        spot_nodes=len(early.spot_nodes()),
    )
    timeline.lap("preflight and lookups")
    ws_id = workspace_id(ws)
    bucket = default_bucket_name(resolved.account_id, spec_aws.region)
    prefix = staging_prefix(spec.name, ws_id)
    # The default checkpoint bucket is the ladder's first region's, on every rung: S3 calls
    # about it (and the nodes' signatures) go to that region.
    home = spec_aws.default_checkpoints_region
    store = checkpoint_store.store_for(
        spec.name, spec_aws.checkpoints_url, resolved.account_id, home
    )
    store_region = home if store.default else spec_aws.region
    params = cluster_params(
        spec,
        resolved,
        public_key,
        ws_id=ws_id,
        staging=(bucket, prefix),
        capacity_reservation=capacity_reservation,
        checkpoints=(store.bucket, store.prefix),
        markets=markets,
    )
    s3 = clients.client("s3")
    # Before anything is created: a requirement without a wheel for the nodes is refused.
    wheelhouse = (
        node_wheelhouse(s3, spec, bucket, resolved, operator_uv_version(), say)
        if spec_aws.network_fields.private
        else None
    )
    if wheelhouse is not None:
        params = dataclasses.replace(params, wheelhouse_prefix=wheelhouse.prefix)
    validate_params(params)
    store_s3 = (
        s3
        if store_region == spec_aws.region
        else AwsClients(clients.session, store_region, clients.emulator).client("s3")
    )
    checkpoint_store.prepare(store_s3, store, store_region, resolved.account_id)

    wheel = build_runtime_wheel()
    staged = stage_wheel(
        s3,
        wheel.path,
        bucket=bucket,
        region=spec_aws.region,
        owner=resolved.account_id,
        prefix=prefix,
    )
    say(
        f"[skyinfra] runtime wheel staged at s3://{staged.bucket}/{staged.key} "
        "(readable by the nodes' role only)"
    )
    say(f"[skyinfra] checkpoints kept under {store.url}/ (the nodes' role may write there only)")
    head_wheel, authorized = None, []
    if spec_aws.recover:  # unattended recovery: skyinfra on node 0, the cluster's own key
        head_wheel = stage_wheel(
            s3,
            build_operator_wheel().path,
            bucket=bucket,
            region=spec_aws.region,
            owner=resolved.account_id,
            prefix=prefix,
        )
        say(f"[skyinfra] skyinfra wheel for node 0 staged at s3://{bucket}/{head_wheel.key}")
        authorized = [authorized_key_line(head_key_public(ws), params.subnet_cidr_block)]
    timeline.lap("wheel build and staging")

    topology = preboot_topology(spec, params)
    to_nodes = store.node_settings(store_s3, store_region, clients.emulator)
    user_data = _user_data(
        spec,
        resolved,
        _Staged(staged, wheelhouse),
        topology,
        clients.secret_values(),
        to_nodes,
        spot_nodes=params.spot_nodes(),
        recovery=_UnattendedRecovery(head_wheel, authorized),
    )
    files = render_root_module(
        params,
        modules_source=module_source("aws"),
        user_data=user_data,
        emulator=clients.emulator,
    )
    files.update(module_files(*AWS_MODULES))
    files[TARGET_FILE] = _target_settings(
        spec_aws, resolved, _Staged(staged, wheelhouse), ws_id, store
    )
    files.update(workspace_id_file(ws_id))
    timeline.lap("render")
    return files
