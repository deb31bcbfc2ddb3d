"""A pickled call: what the operator's Python API (``skyinfra.Cluster.run``) sends instead of an
entry in the project.

The operator puts ``call.pkl`` in the run's directory (beside ``work/``, the entry's working
directory, so the entry text is ``../call.pkl``): one JSON header line, then the pickle of
``(function, args, kwargs)``. ``by`` in the header says how the function travels:

- ``reference``: plain :mod:`pickle` (the function is importable from the project, which is
  first on ``sys.path``, or from the node's environment); nothing else is needed here.
- ``value``: cloudpickle (a function of ``__main__``, a notebook cell, a closure). The operator
  sends its own cloudpickle beside the call (``cloudpickle.zip``, imported from the zip), so the
  node unpickles with the very version that pickled, and nothing is installed on the node.
  The Python minor version must be the caller's (the operator checks it before copying; this
  module refuses too).

The function runs in the worker with the plugins set up, as a function entry does. Its value is
pickled (cloudpickle for a call by value) to ``result-w<worker>.pkl`` beside the call; the
worker's result JSON names that file. An exception of the function (or a call that cannot be
loaded here) leaves ``error.json`` beside the call (the node's first failing worker wins: the
file is created exclusively), with the traceback text, and fails the worker as usual.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import traceback
from pathlib import Path
from typing import Any

from skyinfra_runtime.errors import EntrypointError
from skyinfra_runtime.info import instance_info

CALL_FILE = "call.pkl"
# cloudpickle as the operator has it, shipped with a call by value.
VENDORED_CLOUDPICKLE = "cloudpickle.zip"
ERROR_FILE = "error.json"
HEADER_SCHEMA = 1


def result_file(worker: int) -> str:
    return f"result-w{worker}.pkl"


def read_call(path: Path) -> tuple[dict[str, Any], bytes]:
    """The header and the pickled payload of a call file."""
    with path.open("rb") as f:
        first = f.readline()
        payload = f.read()
    try:
        header = json.loads(first)
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("schema") != HEADER_SCHEMA:
        raise EntrypointError(f"{path} is not a skyinfra call file (no schema-1 header line)")
    return header, payload


def _use_shipped_cloudpickle(directory: Path) -> Any:
    """The cloudpickle that pickled the call: the zip sent with it, else the node's own."""
    shipped = directory / VENDORED_CLOUDPICKLE
    if shipped.is_file():
        for name in [m for m in sys.modules if m == "cloudpickle" or m.startswith("cloudpickle.")]:
            del sys.modules[name]
        sys.path.insert(0, str(shipped))
    try:
        import cloudpickle
    except ImportError:
        raise EntrypointError(
            f"a call by value needs cloudpickle: neither {shipped} nor the node's environment "
            "has it"
        ) from None
    return cloudpickle


def _load(path: Path) -> tuple[Any, tuple[Any, ...], dict[str, Any], bool]:
    header, payload = read_call(path)
    by_value = header.get("by") == "value"
    if by_value:
        _use_shipped_cloudpickle(path.parent)
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        if header.get("python") != here:
            raise EntrypointError(
                f"the call {header.get('name')!r} was pickled by value under Python "
                f"{header.get('python')}; this node runs Python {here} ({sys.executable})"
            )
    try:
        fn, args, kwargs = pickle.loads(payload)
    except Exception as exc:
        raise EntrypointError(
            f"the call {header.get('name')!r} (sent by {header.get('by')}) cannot be loaded "
            f"on this node: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(fn):
        raise EntrypointError(f"the call {header.get('name')!r} holds no function")
    return fn, tuple(args), dict(kwargs), by_value


def _write_error(directory: Path, text: str) -> None:
    info = instance_info()
    record = {
        "node": info.node,
        "worker": info.worker,
        "global_index": info.global_index,
        "traceback": text,
    }
    try:
        fd = os.open(directory / ERROR_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return  # another worker of this node failed first
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(record, f)


def run_call(path: Path) -> dict[str, Any]:
    """Load and call the function; pickle its value. Returns what the worker's result JSON
    holds as the value: ``{"pickle": FILE}``."""
    directory = path.resolve().parent
    try:
        fn, args, kwargs, by_value = _load(path)
    except EntrypointError as exc:
        _write_error(directory, f"{exc}\n")
        raise
    try:
        value = fn(*args, **kwargs)
    except Exception as exc:
        # The user's frames only: this module's own frame is left out.
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        _write_error(directory, "".join(traceback.format_exception(type(exc), exc, tb)))
        raise
    if by_value:
        import cloudpickle

        data = cloudpickle.dumps(value)
    else:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    name = result_file(instance_info().worker)
    tmp = directory / f".{name}.tmp"
    tmp.write_bytes(data)
    tmp.replace(directory / name)
    return {"pickle": name}
