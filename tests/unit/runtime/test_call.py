"""The runtime's side of a pickled call (skyinfra_runtime.call), in a fresh interpreter with
the call file in a run directory: the value pickled beside it, an exception's traceback in
error.json (the first failing worker wins), a call by value refused on another Python."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

from skyinfra_runtime.call import CALL_FILE, ERROR_FILE, HEADER_SCHEMA

RUN = """
import sys
from pathlib import Path
from skyinfra_runtime.call import run_call
print(run_call(Path(sys.argv[1])))
"""


def _call(folder: Path, payload: object, **header: object) -> Path:
    head = {"schema": HEADER_SCHEMA, "name": "t", "by": "reference", "python": "3.11", **header}
    path = folder / CALL_FILE
    path.write_bytes(json.dumps(head).encode() + b"\n" + pickle.dumps(payload))
    return path


def _run(path: Path, worker: int = 0) -> subprocess.CompletedProcess[str]:
    env = {"SKYINFRA_WORKER": str(worker), "SKYINFRA_WORKERS_PER_NODE": "2", "PATH": "/usr/bin"}
    return subprocess.run(
        [sys.executable, "-c", RUN, str(path)], capture_output=True, text=True, env=env
    )


def test_the_value_is_pickled_beside_the_call(tmp_path: Path) -> None:
    import math

    done = _run(_call(tmp_path, (math.hypot, (3.0, 4.0), {})), worker=1)
    assert done.returncode == 0, done.stderr
    assert "{'pickle': 'result-w1.pkl'}" in done.stdout
    assert pickle.loads((tmp_path / "result-w1.pkl").read_bytes()) == 5.0


def test_an_exception_leaves_its_traceback_and_the_first_one_wins(tmp_path: Path) -> None:
    import operator

    path = _call(tmp_path, (operator.truediv, (1, 0), {}))
    assert _run(path, worker=0).returncode != 0
    assert _run(path, worker=1).returncode != 0
    record = json.loads((tmp_path / ERROR_FILE).read_text())
    assert record["worker"] == 0
    assert "ZeroDivisionError: division by zero" in record["traceback"]
    assert "run_call" not in record["traceback"]  # the user's frames only


def test_a_call_by_value_from_another_python_is_refused(tmp_path: Path) -> None:
    import math

    path = _call(tmp_path, (math.hypot, (3.0, 4.0), {}), by="value", python="2.7")
    done = _run(path)
    assert done.returncode != 0
    said = json.loads((tmp_path / ERROR_FILE).read_text())["traceback"]
    assert "pickled by value under Python 2.7" in said and "this node runs Python 3." in said
