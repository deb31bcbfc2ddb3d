"""A cluster whose state lives in a shared S3 backend: the backend file `up` renders, a second
operator's workspace (`skyinfra attach`), moving a workspace's state to S3 (`skyinfra state
push`), releasing a lock a killed process left (`skyinfra unlock`), and the topology rebuilt
from the backend's outputs.

The workspace's flock (workspace.py) guards one machine only; between operators it is
Terraform's own lock in S3 that keeps two applies apart (skyinfra/terraform/backend.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from skyinfra.errors import SpecError, TerraformError, WorkspaceError
from skyinfra.spec import ClusterSpec
from skyinfra.targets.aws.endpoints import ENDPOINT_ENV_VAR, parse_endpoint_url
from skyinfra.terraform.backend import BACKEND_FILE, has_backend, parse_backend, render_backend
from skyinfra.terraform.engine import EngineFactory, TerraformEngine
from skyinfra.topology import Topology, topology_from_outputs
from skyinfra.workspace import PRIVATE_FILE_MODE, Workspace

Echo = Callable[[str], None]
# Where `state push` keeps the workspace's local state once S3 holds it.
LOCAL_BACKUP = "terraform.tfstate.local-backup"


def pull_state(engine: TerraformEngine, failure: str) -> str:
    """``terraform state pull``'s JSON text (empty where there is no state yet); ``failure``
    heads the error when Terraform cannot read the backend."""
    code, out, err = engine.command(["state", "pull"])
    if code != 0:
        raise TerraformError(
            failure, argv=["terraform", "state", "pull"], returncode=code, stderr=err or out
        )
    return out


def backend_files(spec: ClusterSpec) -> dict[str, str]:
    """``{"backend.tf": ...}`` when the spec names a backend, else nothing. In emulator mode
    (SKYINFRA_AWS_ENDPOINT_URL) the backend talks to the emulator's S3, as the AWS target's
    provider does."""
    if spec.backend is None:
        return {}
    backend = parse_backend(spec.backend)
    region = backend.region or getattr(spec.section, "region", None)
    if not isinstance(region, str):  # the spec's own check makes this unreachable
        raise SpecError("backend", spec.backend, "a URL with ?region=REGION")
    url = os.environ.get(ENDPOINT_ENV_VAR, "").strip()
    endpoint = parse_endpoint_url(url) if url else None
    return {BACKEND_FILE: render_backend(backend, spec.name, region=region, endpoint=endpoint)}


def has_state(ws: Workspace) -> bool:
    """Whether Terraform may hold state for the cluster: a local state file, or a backend."""
    return ws.state_file.is_file() or has_backend(ws.path)


def check_backend_kept(ws: Workspace, spec: ClusterSpec) -> None:
    """`up` never moves a cluster's state by accident: a spec that drops or changes the
    backend of a cluster is refused (moving state is `skyinfra state push`)."""
    if not ws.exists():
        return
    before = ws.spec().backend
    if before == spec.backend:
        return
    if before is None:
        raise WorkspaceError(
            f"cluster {spec.name!r} keeps its state in its workspace ({ws.path}); to move it "
            f"to {spec.backend} run `skyinfra state push --cluster {spec.name} --backend "
            f"{spec.backend}` first. Nothing was changed"
        )
    raise WorkspaceError(
        f"cluster {spec.name!r} keeps its state in {before}, but the spec says "
        f"{spec.backend or 'no backend (local state)'}: add backend = {before!r} to the spec "
        "(or pass --backend). Nothing was changed"
    )


def ensure_init(ws: Workspace, engine: TerraformEngine) -> None:
    """Initialise the working directory once (a new workspace of a shared cluster)."""
    if not (ws.path / ".terraform").is_dir():
        engine.init()


def refresh_topology(ws: Workspace, spec: ClusterSpec, engine: TerraformEngine) -> Topology | None:
    """topology.json rebuilt from the state's outputs (None, and the file removed, when the
    cluster is down): another operator may have changed the cluster since."""
    outputs = engine.output()
    if "nodes" not in outputs:
        ws.topology_file.unlink(missing_ok=True)
        return None
    topology = topology_from_outputs(outputs, spec)
    ws.write_json(ws.topology_file, topology.to_dict())
    _link_local_nodes(ws, outputs)
    return topology


def _link_local_nodes(ws: Workspace, outputs: dict[str, object]) -> None:
    """Nodes that live in folders on this machine (the local target: outputs name each
    node's ``node_dir``) but under another workspace: ``nodes/`` becomes a link to that
    folder, so that `run` and `status` reach them from here."""
    nodes = outputs.get("nodes")
    dirs = {
        Path(str(n["node_dir"])).parent
        for n in (nodes.values() if isinstance(nodes, dict) else ())
        if isinstance(n, dict) and n.get("node_dir")
    }
    if len(dirs) != 1:
        return
    (where,) = dirs
    if where == ws.nodes_dir or ws.nodes_dir.is_symlink() or ws.nodes_dir.exists():
        return
    ws.nodes_dir.symlink_to(where, target_is_directory=True)


def attach(
    spec: ClusterSpec,
    ws: Workspace,
    files: dict[str, str],
    echo: Echo,
    *,
    engine_factory: EngineFactory,
) -> Topology | None:
    """A workspace for a cluster whose state is in the spec's backend (a second operator):
    writes the root module and the backend, initialises, reads the topology from the
    backend's outputs. Changes no resource."""
    if spec.backend is None:
        raise SpecError(
            "backend", None, "an S3 URL: `attach` joins a cluster whose state is in a backend"
        )
    if ws.exists():
        check_backend_kept(ws, spec)
    with ws.lock("attach"):
        ws.write_files({**files, **backend_files(spec)})
        ws.write_json(ws.spec_file, spec.to_dict())
        engine = engine_factory(ws.path)
        echo(f"[skyinfra] terraform init in {ws.path} (state: {spec.backend})")
        engine.init()
        return refresh_topology(ws, spec, engine)


def unlock(ws: Workspace, lock_id: str, *, engine_factory: EngineFactory) -> None:
    """Release the state lock ``lock_id`` (one a killed process left)."""
    with ws.lock("unlock"):
        engine = engine_factory(ws.path)
        ensure_init(ws, engine)
        code, out, err = engine.command(["force-unlock", "-force", "-no-color", lock_id])
        if code != 0:
            raise TerraformError(
                f"cluster {ws.name!r}: could not release lock {lock_id}",
                argv=["terraform", "force-unlock", "-force", lock_id],
                returncode=code,
                stderr=err or out,
            )


def push(
    ws: Workspace, backend_url: str | None, echo: Echo, *, engine_factory: EngineFactory
) -> str:
    """Move the workspace's local state to the S3 backend (``backend_url``, else the spec's)
    with Terraform's ``init -migrate-state``; the local state is kept as a backup file. Refused
    when that backend already holds state for the cluster. Returns the backend URL."""
    spec = ws.spec()
    url = backend_url or spec.backend
    if url is None:
        raise SpecError("--backend", None, "an S3 URL like 's3://my-team-state/skyinfra'")
    new_spec = ClusterSpec.from_dict({**spec.to_dict(), "backend": parse_backend(url).url})
    with ws.lock("state push"):
        if has_backend(ws.path):
            raise WorkspaceError(
                f"cluster {ws.name!r} already keeps its state in {spec.backend}; nothing was moved"
            )
        files = backend_files(new_spec)
        _refuse_occupied(ws, files, engine_factory, new_spec)
        engine = engine_factory(ws.path)
        ensure_init(ws, engine)
        before = engine.state_list() if ws.state_file.is_file() else []
        ws.write_files(files)
        echo(f"[skyinfra] moving the state of {ws.name!r} to {new_spec.backend}")
        code, out, err = engine.command(
            ["init", "-migrate-state", "-force-copy", "-input=false", "-no-color"]
        )
        if code != 0:
            (ws.path / BACKEND_FILE).unlink(missing_ok=True)
            raise TerraformError(
                f"cluster {ws.name!r}: moving the state to {new_spec.backend} failed; the "
                "local state is unchanged",
                argv=["terraform", "init", "-migrate-state", "-force-copy"],
                returncode=code,
                stderr=err or out,
            )
        after = engine.state_list()
        if sorted(after) != sorted(before):
            raise WorkspaceError(
                f"cluster {ws.name!r}: the state in {new_spec.backend} lists {after}, the local "
                f"one {before}; the local state is kept in {ws.state_file}"
            )
        ws.write_json(ws.spec_file, new_spec.to_dict())
        if ws.state_file.is_file():
            backup = ws.path / LOCAL_BACKUP
            ws.state_file.replace(backup)
            backup.chmod(PRIVATE_FILE_MODE)
        echo(f"[skyinfra] {len(after)} resource(s) now in {new_spec.backend}")
        assert new_spec.backend is not None
        return new_spec.backend


def _refuse_occupied(
    ws: Workspace, files: dict[str, str], engine_factory: EngineFactory, spec: ClusterSpec
) -> None:
    """Refuse to overwrite state the backend already holds for this cluster (checked in a
    scratch folder holding only the backend, so the workspace is untouched)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"skyinfra-{ws.name}-", dir=ws.path.parent))
    try:
        scratch.chmod(0o700)
        for name, text in files.items():
            (scratch / name).write_text(text)
        probe = engine_factory(scratch)
        probe.init()
        # `state pull` prints nothing where there is no state yet (`state list` fails there).
        out = pull_state(probe, f"cannot read {spec.backend}")
        try:
            existing = json.loads(out).get("resources", []) if out.strip() else []
        except (json.JSONDecodeError, AttributeError):
            existing = ["(unreadable state)"]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if existing:
        raise WorkspaceError(
            f"{spec.backend} already holds state for cluster {ws.name!r} ({len(existing)} "
            "resource(s)); nothing was moved. Another cluster of this name may use it: pick "
            "another backend prefix"
        )


def with_backend(spec: ClusterSpec, backend: str | None) -> ClusterSpec:
    """``spec`` with ``--backend`` applied (validated as the spec's own field)."""
    if backend is None:
        return spec
    return ClusterSpec.from_dict({**spec.to_dict(), "backend": backend})


def with_engine(spec: ClusterSpec, engine: str | None) -> ClusterSpec:
    if engine is None:
        return spec
    return dataclasses.replace(spec, engine=engine)


@contextlib.contextmanager
def pulled_states(
    workspaces: Sequence[Workspace], engine_factory: EngineFactory
) -> Iterator[list[Workspace]]:
    """The workspaces as `gc` reads them: a target's orphan search reads each workspace's
    terraform.tfstate, which a workspace with a shared backend does not have; in its place
    stands a private scratch copy holding its spec and the state pulled from the backend, so
    that a live cluster's resources are never listed as orphans."""
    scratch = Path(tempfile.mkdtemp(prefix="skyinfra-gc-"))
    try:
        seen: list[Workspace] = []
        for ws in workspaces:
            if not has_backend(ws.path):
                seen.append(ws)
                continue
            engine = engine_factory(ws.path)
            ensure_init(ws, engine)
            out = pull_state(
                engine, f"cluster {ws.name!r}: cannot read its state from {ws.spec().backend}"
            )
            copy = Workspace(scratch / ws.name)
            copy.ensure()
            copy.write_json(copy.spec_file, ws.read_json(ws.spec_file))
            if out.strip():
                copy.write_json(copy.state_file, json.loads(out))
            seen.append(copy)
        yield seen
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
