"""Cluster life cycle behind the CLI: up, down, status, and the transport for `run`.

The local target lives here; the AWS target plugs in through ``skyinfra.aws.target`` (owned
by the AWS work): a module with ``render_files(spec, workspace, *, echo, skip_preflight)
-> dict[str, str]``, ``transport(workspace, topology, *, connect_timeout_s) -> NodeTransport``
and ``WAIT_READY_S`` (how long `run` waits for nodes still bootstrapping).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from skyinfra.errors import ProviderUnavailableError, SkyinfraError, WorkspaceError
from skyinfra.render import OWNED_DIRS, local_context, local_files
from skyinfra.spec import ClusterSpec, validate_spec
from skyinfra.terraform import EmbeddedTerraform, PlanSummary, format_event
from skyinfra.topology import Topology, read_topology, topology_from_outputs
from skyinfra.transport import LocalTransport, NodeTransport, Readiness
from skyinfra.transport.readiness import check_readiness
from skyinfra.wheel import build_runtime_wheel
from skyinfra.workspace import Workspace

Echo = Callable[[str], None]
# The saved plan `up` applies (deleted afterwards: it can hold variable values).
PLAN_FILE = "skyinfra.tfplan"
# `status` asks every node whether it is ready; a node that does not answer within this many
# seconds shows as unreachable.
STATUS_CONNECT_TIMEOUT_S = 5.0


def _aws_target() -> Any:
    try:
        return importlib.import_module("skyinfra.aws.target")
    except ModuleNotFoundError as err:
        raise ProviderUnavailableError(
            "provider 'aws' is not available in this build (skyinfra.aws.target is missing); "
            "use provider 'local'"
        ) from err


def render_files(
    spec: ClusterSpec, ws: Workspace, *, echo: Echo | None = None, skip_preflight: bool = False
) -> dict[str, str]:
    """The root module's files, with its copies of the modules it calls (relative path ->
    text); nothing is written (the AWS preflight runs here)."""
    if spec.provider == "aws":
        files: dict[str, str] = _aws_target().render_files(
            spec, ws, echo=echo, skip_preflight=skip_preflight
        )
        return files
    assert spec.local is not None  # validate_spec sets it for provider local
    wheel = build_runtime_wheel()
    context = local_context(
        spec,
        node_root=ws.nodes_dir,
        python=spec.local.python or sys.executable,
        wheel_path=wheel.path,
        wheel_sha256=wheel.sha256,
    )
    return local_files(context)


def progress_printer(echo: Echo) -> Callable[[dict[str, Any]], None]:
    def on_event(event: dict[str, Any]) -> None:
        line = format_event(event)
        if line:
            echo(f"  {line}")

    return on_event


def up(
    spec: ClusterSpec, ws: Workspace, echo: Echo, *, skip_preflight: bool = False
) -> tuple[PlanSummary, Topology]:
    """Render, init, plan, apply when there are changes, write topology.json.

    ``skip_preflight`` skips the AWS target's boto3 checks (no effect on the local target).
    """
    if ws.exists():
        previous = load_spec_of(ws)
        if previous.provider != spec.provider:
            raise WorkspaceError(
                f"cluster {spec.name!r} exists with provider {previous.provider!r}; "
                f"run `skyinfra down --cluster {spec.name}` before changing it to {spec.provider!r}"
            )
    # Preflight, wheel build and staging happen here: before any workspace write.
    files = render_files(spec, ws, echo=echo, skip_preflight=skip_preflight)
    ws.write_files(files, owned_dirs=OWNED_DIRS)
    ws.write_json(ws.spec_file, spec.to_dict())
    engine = EmbeddedTerraform(ws.path)
    on_event = progress_printer(echo)
    echo(f"[skyinfra] terraform init in {ws.path}")
    engine.init()
    echo("[skyinfra] terraform plan")
    summary = engine.plan(out=PLAN_FILE, on_event=on_event)
    if summary.no_changes:
        echo("[skyinfra] no changes: the cluster already matches the spec")
    else:
        echo(
            f"[skyinfra] terraform apply ({summary.add} to add, {summary.change} to change, "
            f"{summary.remove} to destroy)"
        )
        engine.apply(PLAN_FILE, on_event=on_event)
    (ws.path / PLAN_FILE).unlink(missing_ok=True)
    topology = topology_from_outputs(engine.output(), spec)
    ws.write_json(ws.topology_file, topology.to_dict())
    return summary, topology


def load_spec_of(ws: Workspace) -> ClusterSpec:
    raw = ws.read_json(ws.spec_file)
    # spec.json is our own to_dict() output: nested tables become the spec file's shape.
    raw = {k: v for k, v in raw.items() if v is not None}
    if raw.get("local") is not None and raw["local"].get("python") is None:
        raw["local"].pop("python", None)
    if raw.get("aws") is not None:
        raw["aws"] = {
            k: (list(v) if isinstance(v, tuple) else v)
            for k, v in raw["aws"].items()
            if v is not None
        }
    return validate_spec(raw)


def down(ws: Workspace, echo: Echo) -> None:
    engine = EmbeddedTerraform(ws.path)
    if not (ws.path / ".terraform").is_dir():
        engine.init()
    echo(f"[skyinfra] terraform destroy in {ws.path}")
    engine.destroy(on_event=progress_printer(echo))
    ws.topology_file.unlink(missing_ok=True)
    remaining = engine.state_list()
    if remaining:
        raise WorkspaceError(
            f"cluster {ws.name!r}: resources left in state after destroy: {remaining}"
        )


def node_readiness(
    ws: Workspace, topology: Topology, *, connect_timeout_s: float | None = None
) -> dict[int, Readiness]:
    """Every node's readiness through its transport; a node that cannot be reached (or a
    transport that cannot be set up, such as a missing SSH key) reads as unreachable."""
    try:
        transport = transport_for(ws, topology, connect_timeout_s=connect_timeout_s)
    except SkyinfraError as err:
        return {n.index: Readiness("unreachable", str(err)) for n in topology.nodes}
    try:
        return check_readiness(transport, topology)
    finally:
        close = getattr(transport, "close", None)
        if callable(close):
            close()


def status(ws: Workspace) -> dict[str, Any]:
    """The cluster's state, resources and nodes; each node says whether it is ready
    (``readiness``: ready, pending, failed or unreachable, with ``readiness_detail``)."""
    spec = load_spec_of(ws)
    engine = EmbeddedTerraform(ws.path)
    resources = engine.state_list() if ws.state_file.is_file() else []
    topology = read_topology(ws.topology_file) if ws.topology_file.is_file() else None
    nodes = []
    if topology is not None:
        readiness = node_readiness(ws, topology, connect_timeout_s=STATUS_CONNECT_TIMEOUT_S)
        for node in topology.nodes:
            ready = readiness[node.index]
            nodes.append(
                {
                    "index": node.index,
                    "name": node.name,
                    "private_ip": node.private_ip,
                    "public_ip": node.public_ip,
                    "instance_id": node.instance_id,
                    "ready": ready.ready,
                    "readiness": ready.state,
                    "readiness_detail": ready.detail,
                }
            )
    return {
        "cluster": spec.name,
        "provider": spec.provider,
        "workspace": str(ws.path),
        "state": "up" if resources else "down",
        "resources": resources,
        "nodes": nodes,
    }


def transport_for(
    ws: Workspace, topology: Topology, *, connect_timeout_s: float | None = None
) -> NodeTransport:
    """How `run` and `status` reach the nodes (``connect_timeout_s``: SSH targets only)."""
    if topology.provider == "aws":
        target = _aws_target()
        kwargs = {} if connect_timeout_s is None else {"connect_timeout_s": connect_timeout_s}
        transport: NodeTransport = target.transport(ws, topology, **kwargs)
        return transport
    return LocalTransport({n.index: ws.nodes_dir / n.name for n in topology.nodes})


def default_wait_ready_s(topology: Topology) -> float:
    """How long `run` waits for nodes still bootstrapping, unless --wait-ready says.

    AWS nodes bootstrap after `up` returns (cloud-init installs jax[cuda] for minutes); the
    local target bootstraps inside `up`, so a local node not ready by then never will be.
    """
    if topology.provider == "aws":
        return float(_aws_target().WAIT_READY_S)
    return 0.0
