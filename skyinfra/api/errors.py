"""The errors of the Python API that the CLI's tree (skyinfra.errors) does not have already."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skyinfra.errors import RunError, UsageError


class PythonVersionError(UsageError):
    """A call by value (cloudpickle) needs the caller's Python minor version on the nodes; they
    run another. Raised before anything is copied or started. ``here`` is the caller's
    version, ``nodes`` each differing node's."""

    def __init__(self, call: str, here: str, executable: str, nodes: Mapping[int, str]) -> None:
        self.here = here
        self.nodes = dict(nodes)
        listed = ", ".join(f"node-{i} runs Python {v}" for i, v in sorted(self.nodes.items()))
        super().__init__(
            f"cluster.run({call}) sends the function by value (cloudpickle), which needs the "
            f"same Python minor version here and on the nodes: this Python is {here} "
            f"({executable}); {listed}. Nothing was copied or started. Run with Python "
            f"{here} on the nodes (local target: [local] python), or put the function in a "
            "module of the project so that it goes by reference"
        )


class RemoteError(RunError):
    """A call failed on the nodes. ``node`` is the first failing node, ``traceback`` the
    traceback text of its first failing worker (as the node printed it), ``outcomes`` every
    node's outcome: {node: {"exit_code", "meaning", "ended_by_skyinfra", "reason"}};
    ``run_id`` and ``run_dir`` (the workspace's runs/<id>/, with every node's log)."""

    def __init__(
        self,
        message: str,
        *,
        node: int | None,
        traceback: str,
        outcomes: Mapping[int, Mapping[str, Any]],
        run_id: str,
        run_dir: Path,
    ) -> None:
        self.traceback = traceback
        self.outcomes = {i: dict(o) for i, o in outcomes.items()}
        self.run_id = run_id
        self.run_dir = run_dir
        codes = {i: o.get("exit_code") for i, o in outcomes.items()}
        text = message
        if traceback:
            text += f"\n\nnode-{node} traceback (remote):\n{traceback.rstrip()}"
        super().__init__(text, node=node, exit_codes=codes)
