"""The local target: nodes are folders on this machine with their own loopback address and
virtual environment, made and removed by Terraform's ``terraform_data`` resources (the
infra/modules/local module runs the shared node bootstrap). Nodes are ready when `up` returns.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from skyinfra_runtime.jobports import port_range

from skyinfra import timeline
from skyinfra.errors import (
    ConfigError,
    SpecError,
    TransportError,
    UnsupportedByTarget,
    spec_problems,
)
from skyinfra.run.head_recovery import HeadRecovery, operator_settings
from skyinfra.spec import ClusterSpec
from skyinfra.targets.base import (
    Apply,
    Ask,
    CheckpointListing,
    CheckpointSetInfo,
    Echo,
    InterruptRequest,
    Shell,
    TargetOptions,
    WithoutLadder,
)
from skyinfra.targets.local import registry
from skyinfra.targets.local.processes import end_processes
from skyinfra.targets.local.spec import LocalDeclaration, LocalSpec
from skyinfra.targets.local.transport import LocalTransport, node_problem, node_shell
from skyinfra.topology import Topology
from skyinfra.workspace import Workspace

if TYPE_CHECKING:
    from skyinfra_runtime.s3 import Credentials

    from skyinfra.checkpoints import CheckpointSet
    from skyinfra.review.cost import PlannedPlace, SpotPrices
    from skyinfra.targets.base import Target
    from skyinfra.terraform import EngineFactory, PlanSummary

# uv's package cache, one per workspace, shared by all of the cluster's nodes: the first node
# fills it and the others link from it (uv's cache is safe for concurrent use).
UV_CACHE_DIR = "uv-cache"
# "pip" makes the nodes install with pip even where uv is at hand (to compare; `make bench`).
INSTALLER_ENV = "SKYINFRA_NODE_INSTALLER"

# A node's resource in the rendered root module (infra/modules/local).
NODE_ADDRESS = re.compile(r'^module\.nodes\.terraform_data\.node\["(node-\d+)"\]$')


def operator_uv() -> str:
    """The uv binary of the operator's own installation (the `uv` package, a dependency of
    skyinfra); empty when it cannot be found or $SKYINFRA_NODE_INSTALLER is "pip", and the
    nodes then install with pip."""
    installer = os.environ.get(INSTALLER_ENV, "uv")
    if installer not in ("uv", "pip"):
        raise ConfigError(INSTALLER_ENV, installer, '"uv" (the default) or "pip"')
    if installer == "pip":
        return ""
    try:
        import uv  # optional at run time: pip is the fallback

        return str(uv.find_uv_bin())
    except (ImportError, FileNotFoundError):
        return ""


def local_context(
    spec: ClusterSpec,
    *,
    node_root: Path,
    python: str,
    wheel_path: Path,
    wheel_sha256: str,
    uv: str = "",
    uv_cache_dir: str = "",
) -> dict[str, Any]:
    """The values of the local root module's templates (pure)."""
    from skyinfra import render  # `up`'s alone: each command on a local cluster loads this module

    local = spec.section_as(LocalSpec)
    return {
        "cluster_name": spec.name,
        "module_source": render.module_source("local"),
        "bootstrap_script": render.BOOTSTRAP_FILE,
        "node_count": spec.nodes,
        "base_address": local.base_address,
        "head_port": spec.head_port,
        "node_root": str(node_root),
        "python": python,
        "wheel_path": str(wheel_path),
        "wheel_sha256": wheel_sha256,
        "python_packages": list(spec.python_packages),
        "uv": uv,
        "uv_cache_dir": uv_cache_dir,
    }


# The root module's variables, written as terraform.tfvars.json (as the AWS target's are).
LOCAL_TFVARS = (
    "cluster_name",
    "node_count",
    "base_address",
    "head_port",
    "node_root",
    "python",
    "wheel_path",
    "wheel_sha256",
    "python_packages",
    "uv",
    "uv_cache_dir",
)


def local_files(context: dict[str, Any]) -> dict[str, str]:
    """Everything a local cluster's workspace holds: root module, tfvars, the local module's
    copy and the bootstrap script."""
    from skyinfra import render

    tfvars = {name: context[name] for name in LOCAL_TFVARS}
    return {
        **render.render_root("local", context),
        render.TFVARS_JSON: json.dumps(tfvars, indent=2) + "\n",
        **render.module_files("local"),
        **render.bootstrap_files(),
    }


def _ports(spec: ClusterSpec) -> range:
    """The ports a cluster's jobs listen on: a pair per node from head_port on, each job's
    jax coordinator and torch rendezvous (skyinfra_runtime.jobports, the head gives them)."""
    return port_range(spec.head_port, spec.nodes)


def _span(ports: range) -> str:
    return f"{ports[0]}-{ports[-1]}"


def check_head_port(spec: ClusterSpec, ws: Workspace) -> None:
    """Local clusters share this machine's ports: two clusters whose jobs' coordinators meet
    would end each other's jobs. Refuse a head_port that another local cluster in the same
    folder uses, the head address and ports of a local cluster of another folder that is up
    (registry.py), or ports that something on this machine holds right now."""
    mine = _ports(spec)
    siblings = ws.path.parent.iterdir() if ws.path.parent.is_dir() else iter(())
    for other in sorted(p for p in siblings if p != ws.path and p.is_dir()):
        neighbour = Workspace(other)
        if not (neighbour.exists() and neighbour.topology_file.is_file()):
            continue  # down, or never up
        theirs = neighbour.spec()
        if theirs.provider == spec.provider and set(mine) & set(_ports(theirs)):
            raise SpecError(
                "head_port",
                spec.head_port,
                f"ports no other local cluster uses: cluster {theirs.name!r} ({other}) is up "
                f"on {_span(_ports(theirs))}; pick e.g. head_port = {_ports(theirs)[-1] + 1}",
            )
    # The same head address and ports as a local cluster of another folder that is up: the
    # default spec (127.0.0.2:29500) copied to a second project is the common case.
    head_address = spec.section_as(LocalSpec).base_address
    workspace = ws.path.resolve()
    holder = registry.holder_of(
        workspace, head_address, set(mine), cluster=spec.name, backend=spec.backend
    )
    if holder is not None:
        raise SpecError(
            "local.base_address",
            head_address,
            f"an address no other local cluster's head uses with these ports: cluster "
            f"{holder['cluster']!r} ({holder['workspace']}) is up on {head_address} with "
            f"ports {'-'.join(str(p) for p in holder['ports'])}; give this cluster another "
            "local.base_address (e.g. 127.0.1.2) or another head_port, or bring that one down",
        )
    registry.claim(workspace, spec.name, head_address, set(mine), spec.backend)
    if ws.topology_file.is_file() and ws.exists():
        current = ws.spec()
        if current.head_port == spec.head_port:
            return  # this cluster's own jobs may hold them
    # jax's coordinator listens on the head's address; torch's rendezvous store on every one.
    pairs = [(port, head_address if (port - mine[0]) % 2 == 0 else "") for port in mine]
    for port, address in pairs:
        with socket.socket() as probe:
            # A port a finished job left in TIME_WAIT is free for a listener; only a
            # listening socket makes this bind fail.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError as err:
                raise SpecError(
                    "head_port",
                    spec.head_port,
                    f"free ports: {port} is in use on this machine ({err.strerror}); "
                    "pick another head_port",
                ) from None


class LocalTarget(LocalDeclaration, WithoutLadder):
    """Nodes as processes on this machine, one loopback address each; its name, spec table
    and (no) flags are its declaration's (spec.py)."""

    # The bootstrap runs inside `up`: a node not ready by then never will be.
    wait_ready_s: ClassVar[float] = 0.0

    def render(
        self, spec: ClusterSpec, ws: Workspace, *, echo: Echo, options: TargetOptions
    ) -> dict[str, str]:
        # Before the ports are claimed: a node without its plugins' frameworks would come
        # up "ready" and fail only at `run`.
        missing = spec_problems(self.environment_problems(spec))
        if missing is not None:
            raise missing
        check_head_port(spec, ws)
        timeline.lap("validate and port check")
        local = spec.section_as(LocalSpec)
        from skyinfra.wheel import build_runtime_wheel

        wheel = build_runtime_wheel()
        timeline.lap("wheel build")
        context = local_context(
            spec,
            node_root=ws.nodes_dir,
            python=local.python or sys.executable,
            wheel_path=wheel.path,
            wheel_sha256=wheel.sha256,
            uv=operator_uv(),
            uv_cache_dir=str(ws.path / UV_CACHE_DIR),
        )
        files = local_files(context)
        timeline.lap("render")
        return files

    def launch(
        self,
        spec: ClusterSpec,
        ws: Workspace,
        *,
        echo: Echo,
        options: TargetOptions,
        apply: Apply,
        engine_factory: EngineFactory,
    ) -> tuple[PlanSummary, Topology]:
        """Render once and apply: a local node never lacks capacity."""
        # The wheel build and the port check happen here: before any workspace write.
        with timeline.stage("prepare"):
            files = self.render(spec, ws, echo=echo, options=options)
        return apply(files)

    def spot_prices(
        self, spec: ClusterSpec, echo: Echo, place: PlannedPlace | None = None
    ) -> SpotPrices | None:
        """None: local nodes cost nothing and have no market."""
        return None

    def status_details(self, ws: Workspace, spec: ClusterSpec) -> dict[str, Any]:
        """{}: a local cluster has no zone or market to tell of."""
        return {}

    def node_installs(self, ws: Workspace, spec: ClusterSpec) -> dict[str, str]:
        """{}: the nodes install the operator's own versions (no pin to show)."""
        return {}

    def applies_as_is(self, ws: Workspace) -> bool:
        """False: every local workspace is the operator's, rendered by `up`."""
        return False

    def store_credentials(self, spec: ClusterSpec) -> Credentials | None:
        """None: the nodes share this machine's folder (no store)."""
        return None

    def head_recovery(self, ws: Workspace, spec: ClusterSpec) -> HeadRecovery | None:
        """``local.recover``: node 0 is a folder of this machine, so the command node 0's
        supervisor runs is this skyinfra on this workspace (skyinfra.run.head_recovery)."""
        if not spec.section_as(LocalSpec).recover:
            return None
        argv = (
            sys.executable, "-m", "skyinfra.cli", "jobs",
            "--cluster", ws.name, "--dir", str(ws.path.parent),
            "recover", "--unattended",
        )  # fmt: skip
        return HeadRecovery(argv=argv, env=operator_settings())

    def transport(
        self,
        ws: Workspace,
        spec: ClusterSpec,
        topology: Topology,
        *,
        connect_timeout_s: float | None = None,
    ) -> LocalTransport:
        return LocalTransport({n.index: ws.nodes_dir / n.name for n in topology.nodes})

    def shell(
        self,
        ws: Workspace,
        spec: ClusterSpec,
        topology: Topology,
        node: int,
        command: Sequence[str],
    ) -> Shell:
        """A shell (or ``command``) in the node's folder with the node's environment."""
        node_dir = ws.nodes_dir / topology.nodes[node].name
        problem = node_problem(node_dir)
        if problem:
            raise TransportError(f"node {node}: {problem}")
        argv, env = node_shell(node_dir, node, command)
        return Shell(argv, env, str(node_dir))

    def ssh_config(
        self, ws: Workspace, spec: ClusterSpec, topology: Topology, *, echo: Echo
    ) -> str:
        """Unsupported: local nodes are folders of this machine, with no SSH server."""
        raise UnsupportedByTarget(
            self.name,
            "ssh_config",
            f"--config: the {self.name} target's nodes have no SSH (they are folders on this "
            "machine); `skyinfra ssh [NODE] [-- CMD]` opens a shell in one",
        )

    def interrupt_node(
        self,
        ws: Workspace,
        spec: ClusterSpec,
        topology: Topology,
        request: InterruptRequest,
        *,
        ask: Ask | None,
        echo: Echo,
    ) -> None:
        """The notice goes to the node's IMDS stand-in (drill.py), at once: nothing is
        asked and no role is needed, as nothing outside this machine is touched."""
        from skyinfra.targets.local.drill import interrupt

        node = request.node
        interrupt(ws.nodes_dir / topology.nodes[node].name, node, request.notice_s, echo)

    def checkpoint_sets(self, ws: Workspace, spec: ClusterSpec) -> CheckpointListing:
        """The folders under the workspace's checkpoints/ (skyinfra.checkpoints)."""
        from skyinfra.checkpoints import list_sets, local_root

        return CheckpointListing([_set_info(s) for s in list_sets(ws)], f"in {local_root(ws)}")

    def checkpoint_set(self, ws: Workspace, spec: ClusterSpec, name: str) -> CheckpointSetInfo:
        from skyinfra.checkpoints import find_set

        return _set_info(find_set(ws, name))

    def delete_checkpoint_set(
        self, ws: Workspace, spec: ClusterSpec, found: CheckpointSetInfo
    ) -> str:
        shutil.rmtree(found.location)
        return ""

    def nodes_to_replace(
        self, ws: Workspace, spec: ClusterSpec, in_state: Callable[[], Sequence[str]]
    ) -> list[str]:
        """Nodes in state whose folder is gone or broken (deleted by hand, say): Terraform
        cannot see that (``terraform_data`` has nothing to refresh), `status` reports them
        failed, so `up` plans them with ``-replace``."""
        broken = []
        for address in in_state():
            match = NODE_ADDRESS.match(address)
            if match and node_problem(ws.nodes_dir / match.group(1)):
                broken.append(address)
        return broken

    def after_down(self, ws: Workspace, spec: ClusterSpec, *, echo: Echo) -> None:
        """The destroy provisioner ended the nodes' processes and removed their folders;
        end and remove whatever a node no state knew about left (a bootstrap interrupted
        with Terraform itself killed), so that nothing of the cluster is left."""
        ended = end_processes([ws.nodes_dir])
        if ended:
            echo(f"[skyinfra] ended {len(ended)} leftover node process(es): {ended}")
        if not ws.nodes_dir.is_dir():
            return
        for node_dir in sorted(ws.nodes_dir.iterdir()):
            if (node_dir / ".skyinfra-node").is_file():
                shutil.rmtree(node_dir, ignore_errors=True)
                echo(f"[skyinfra] removed leftover node folder {node_dir}")

    def leftovers(self, ws: Workspace, spec: ClusterSpec, *, echo: Echo) -> list[str]:
        """Node folders still there, and processes still running in one (their working
        directory under the workspace's nodes/; Linux's /proc)."""
        left = [f"node folder {p}" for p in sorted(ws.nodes_dir.glob("*")) if p.is_dir()]
        left += [f"process {pid} in {cwd}" for pid, cwd in _still_under(ws.nodes_dir)]
        return left

    def orphans(
        self, workspaces: Sequence[Workspace], specs: Sequence[ClusterSpec], *, echo: Echo
    ) -> list[str]:
        """Node folders of local workspaces whose state holds no resources."""
        lines = []
        for ws in workspaces:
            if ws.state_file.is_file() and '"resources": []' not in ws.state_file.read_text():
                continue
            lines += [f"node folder {p}" for p in sorted(ws.nodes_dir.glob("*")) if p.is_dir()]
        return lines


def _set_info(found: CheckpointSet) -> CheckpointSetInfo:
    return CheckpointSetInfo(
        name=found.name,
        size_bytes=found.size_bytes,
        items=found.files,
        item_unit="file",
        modified=found.to_dict()["modified"],
        jobs=found.jobs,
        location=str(found.path),
        location_key="path",
        place=str(found.path),
    )


def _still_under(folder: Path, settle_s: float = 3.0) -> list[tuple[int, str]]:
    """``_processes_under``, once those a moment ago ended have had ``settle_s`` to go: a
    process keeps its working directory until late in its exit, after its memory (and the
    environment `down` finds node processes by) is already gone."""
    until = time.monotonic() + settle_s
    found = _processes_under(folder)
    while found and time.monotonic() < until:
        time.sleep(0.1)
        found = _processes_under(folder)
    return found


def _processes_under(folder: Path) -> list[tuple[int, str]]:
    found = []
    root = str(folder.resolve())
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if cwd == root or cwd.startswith(root + "/"):
            found.append((int(proc.name), cwd))
    return sorted(found)


if TYPE_CHECKING:
    _satisfies_the_protocol: Target = LocalTarget()
