"""examples/keras_notebook.ipynb executed headless by a real Jupyter kernel (nbclient,
ipykernel): it brings a 2-node local cluster up, trains the seeds' Keras example on both nodes
(a function of a cell and the digits it read, sent by value) with identical weights, and
brings the cluster down, leaving no node folder and no process. The kernel's stdout is not a
terminal: no control codes in what the cells printed."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import REPO_ROOT
from tests.support.local_jobs import node_processes

pytestmark = pytest.mark.slow

NOTEBOOK = REPO_ROOT / "examples" / "keras_notebook.ipynb"


def _text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif out.get("output_type") == "error":
            parts.append("\n".join(out.get("traceback", [])))
        else:
            parts.append(json.dumps(out.get("data", {})))
    return "".join(parts)


def test_the_keras_notebook_runs_on_two_nodes_and_leaves_nothing(
    tmp_path: Path, tf_plugin_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(NOTEBOOK, project / NOTEBOOK.name)
    shutil.copy(NOTEBOOK.with_name("digits.csv.gz"), project)  # the notebook reads it
    for key in [k for k in os.environ if k.startswith("SKYINFRA_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SKYINFRA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SKYINFRA_TF_PLUGIN_CACHE", str(tf_plugin_cache))
    nb = nbformat.read(project / NOTEBOOK.name, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(project)}}
    )
    ws = project / ".skyinfra" / "clusters" / "notebook"
    try:
        client.execute()
    finally:
        if (ws / "topology.json").is_file():  # a failed cell: bring it down all the same
            import skyinfra

            monkeypatch.chdir(project)
            skyinfra.Cluster(name="notebook").down(yes=True)
    code = [c for c in nb.cells if c.cell_type == "code"]
    printed = [_text(c) for c in code]
    assert "cluster 'notebook' is up: 2 node(s)" in printed[0]
    results = [json.loads(line.replace("'", '"')) for line in printed[2].splitlines()[-2:]]
    assert [r["node"] for r in results] == [0, 1]
    assert results[0]["weights_sha256"] == results[1]["weights_sha256"]
    assert results[0]["accuracy"] > 0.8
    assert "nothing of cluster 'notebook' is left" in printed[3]
    for text in printed:
        assert "\x1b" not in text and "\r" not in text
    assert not list((ws / "nodes").glob("node-*"))
    assert node_processes(ws / "nodes") == []
