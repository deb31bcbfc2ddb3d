"""A Python call sent to the nodes and its results read back (the node's side is
skyinfra_runtime.call).

By reference when the function is importable on the nodes (a module of the project, which is
copied and first on their ``sys.path``, or an installed one) and the whole call pickles with
plain :mod:`pickle`: nothing but the runtime is needed on the nodes. By value otherwise (a
function of ``__main__``, a notebook cell, a closure, a lambda): cloudpickle, whose own source
travels with the call (``cloudpickle.zip``), so the nodes unpickle with the version that
pickled and nothing is installed on them; this needs the caller's Python minor version on the
nodes, checked before anything is copied (:func:`check_python`).
"""

from __future__ import annotations

import concurrent.futures
import io
import json
import pickle
import secrets
import site
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyinfra_runtime.call import (
    CALL_FILE,
    ERROR_FILE,
    HEADER_SCHEMA,
    VENDORED_CLOUDPICKLE,
    result_file,
)

from skyinfra.api.errors import PythonVersionError, RemoteError
from skyinfra.errors import UsageError
from skyinfra.run.report import RunReport, worker_results
from skyinfra.transport.base import NodeTransport

# The entry `run` gives the nodes for a call: relative to the entry's working directory
# (runs/<id>/work), the call file beside it.
CALL_ENTRY = f"../{CALL_FILE}"
# A zip's entries get this fixed time: the same cloudpickle gives the same bytes.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def python_minor() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


@dataclass
class Call:
    """A function with its arguments, pickled into ``files`` (name -> local file), the files
    a run puts beside work/ on every node."""

    name: str
    by_value: bool
    files: dict[str, Path] = field(default_factory=dict)


def describe(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None) or "?"
    return f"{module}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def _installed_paths() -> list[Path]:
    paths = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(site.getsitepackages())
    return [Path(p).resolve() for p in paths if p]


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
    except ValueError:
        return False
    return True


def importable_on_nodes(fn: Callable[..., Any], src: Path) -> bool:
    """Whether the nodes can import ``fn`` by its name: a module of the project (``src``, which
    is copied and first on their sys.path) under that very name, or an installed module (the
    nodes must have it, as for `skyinfra run`'s entries)."""
    name = str(getattr(fn, "__module__", None) or "")
    qualname = str(getattr(fn, "__qualname__", ""))
    if not name or name == "__main__" or "<locals>" in qualname or "<lambda>" in qualname:
        return False
    module = sys.modules.get(name)
    if module is None:
        return False
    file = getattr(module, "__file__", None)
    if file is None:  # built into the interpreter (sys, math on some builds)
        return True
    path = Path(file).resolve()
    root = src.resolve()
    if _inside(path, root):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts and parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts) == name
    return any(_inside(path, installed) for installed in _installed_paths())


def pickle_call(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    folder: Path,
    src: Path,
) -> Call:
    """Pickle ``(fn, args, kwargs)`` into ``folder``: by reference when the nodes can import
    ``fn`` (:func:`importable_on_nodes`) and plain pickle takes the call, else by value with
    cloudpickle (and cloudpickle's own source beside it)."""
    if not callable(fn):
        raise UsageError(f"cluster.run: {fn!r} is not a function; expected a callable")
    name = describe(fn)
    payload: bytes | None = None
    if importable_on_nodes(fn, src):
        try:
            payload = pickle.dumps((fn, tuple(args), dict(kwargs)), protocol=5)
        except (pickle.PicklingError, TypeError, AttributeError):
            payload = None  # an argument only cloudpickle can send (a lambda): by value
    by_value = payload is None
    if payload is None:
        import cloudpickle

        # A function of a module the nodes cannot import (outside the project) goes by value
        # with its module's code, not by its name.
        module = sys.modules.get(getattr(fn, "__module__", "") or "")
        by_name = module is not None and module.__name__ != "__main__"
        if by_name:
            cloudpickle.register_pickle_by_value(module)
        try:
            payload = cloudpickle.dumps((fn, tuple(args), dict(kwargs)), protocol=5)
        except Exception as exc:
            raise UsageError(
                f"cluster.run({name}): the call cannot be pickled ({type(exc).__name__}: {exc});"
                " pass arguments that pickle (arrays, numbers, strings, plain objects), not "
                "open files, locks or sockets; nothing was copied or started"
            ) from None
        finally:
            if by_name:
                cloudpickle.unregister_pickle_by_value(module)
    header = {
        "schema": HEADER_SCHEMA,
        "name": name,
        "by": "value" if by_value else "reference",
        "python": python_minor(),
    }
    files: dict[str, Path] = {}
    call_path = folder / CALL_FILE
    call_path.write_bytes(json.dumps(header).encode() + b"\n" + payload)
    files[CALL_FILE] = call_path
    if by_value:
        files[VENDORED_CLOUDPICKLE] = cloudpickle_zip(folder)
    return Call(name, by_value, files)


def cloudpickle_zip(folder: Path) -> Path:
    """This installation's cloudpickle package as a zip the nodes import it from."""
    import cloudpickle

    package = Path(cloudpickle.__file__).parent
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for source in sorted(package.glob("*.py")):
            info = zipfile.ZipInfo(f"cloudpickle/{source.name}", date_time=_ZIP_TIME)
            zf.writestr(info, source.read_bytes(), zipfile.ZIP_DEFLATED)
    path = folder / VENDORED_CLOUDPICKLE
    path.write_bytes(buffer.getvalue())
    return path


# ------------------------------------------------------------- the nodes' Python version


def _version_of(pyvenv_cfg: str) -> str | None:
    """ "3.11" from a venv's pyvenv.cfg (uv writes version_info, the venv module version)."""
    values = {}
    for line in pyvenv_cfg.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    full = values.get("version_info") or values.get("version")
    if not full:
        return None
    parts = full.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 and all(p.isdigit() for p in parts[:2]) else None


def node_python(transport: NodeTransport, node: int) -> str:
    """The Python minor version of the node's environment (the one that runs the workers):
    its venv's pyvenv.cfg, else its interpreter's own answer."""
    root = transport.node_root(node)
    with tempfile.TemporaryDirectory(prefix="skyinfra-pyvenv-") as tmp:
        local = Path(tmp) / "pyvenv.cfg"
        if transport.fetch(node, f"{root}/venv/pyvenv.cfg", local):
            found = _version_of(local.read_text(encoding="utf-8", errors="replace"))
            if found:
                return found
    proc = transport.start(
        node,
        [f"{root}/venv/bin/python", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        env={},
        cwd=root,
        tag=f"python-version-{secrets.token_hex(3)}",
    )
    out = [line.strip() for line in proc.lines()]
    code = proc.wait(60)
    if code != 0 or not out:
        raise UsageError(
            f"node {node}: cannot tell which Python its environment runs ({root}/venv: "
            f"exit {code}: {' '.join(out)}); nothing was copied or started"
        )
    return out[-1]


def check_python(transport: NodeTransport, nodes: Sequence[int], call: Call) -> None:
    """A call by value needs the caller's Python minor version on every node: refused before
    anything is copied, naming both versions."""
    if not call.by_value:
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(nodes))) as pool:
        found = dict(zip(nodes, pool.map(lambda i: node_python(transport, i), nodes), strict=True))
    here = python_minor()
    other = {i: v for i, v in found.items() if v != here}
    if other:
        raise PythonVersionError(call.name, here, sys.executable, other)


# ------------------------------------------------------------------- results coming back


def fetch_results(transport: NodeTransport, report: RunReport) -> list[Any]:
    """Every worker's returned value, in rank order (node, then worker)."""
    ranked: list[tuple[int, Any]] = []
    for i, outcome in report.outcomes.items():
        remote_run = f"{transport.node_root(i)}/runs/{report.run_id}"
        for worker in worker_results(outcome):
            value = worker.get("value")
            rank = int(worker.get("global_index", i))
            if not (isinstance(value, dict) and isinstance(value.get("pickle"), str)):
                ranked.append((rank, value))
                continue
            name = result_file(int(worker.get("worker", 0)))
            local = report.run_dir / f"node-{i}.{name}"
            if not transport.fetch(i, f"{remote_run}/{name}", local):
                raise UsageError(f"node {i}: its result {remote_run}/{name} is missing")
            ranked.append((rank, pickle.loads(local.read_bytes())))
    return [value for _, value in sorted(ranked, key=lambda item: item[0])]


def fetch_error(transport: NodeTransport, run_id: str, run_dir: Path, node: int) -> str:
    """The traceback text of the node's first failing worker ("" when it left none: it was
    killed, or failed before the call started)."""
    local = run_dir / f"node-{node}.{ERROR_FILE}"
    remote = f"{transport.node_root(node)}/runs/{run_id}/{ERROR_FILE}"
    if not transport.fetch(node, remote, local):
        return ""
    try:
        record = json.loads(local.read_text(encoding="utf-8"))
    except ValueError:
        return ""
    return str(record.get("traceback", "")) if isinstance(record, dict) else ""


def remote_error(
    transport: NodeTransport,
    name: str,
    run_id: str,
    run_dir: Path,
    first: int,
    outcomes: Mapping[int, Mapping[str, Any]],
) -> RemoteError:
    """One error for a failed call: every node's outcome ({node: {exit_code, meaning,
    reason, ...}}) and the traceback text of the first failing node's first failing worker."""
    per_node = "; ".join(f"node-{i}: {o['reason']}" for i, o in sorted(outcomes.items()))
    return RemoteError(
        f"{name} failed on node {first} (run {run_id}); {per_node}; logs in {run_dir}",
        node=first,
        traceback=fetch_error(transport, run_id, run_dir, first),
        outcomes=outcomes,
        run_id=run_id,
        run_dir=run_dir,
    )
