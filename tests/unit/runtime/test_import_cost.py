"""What importing the runtime costs: every node process (agent, launcher, workers) and every
`skyinfra` command imports skyinfra_runtime."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.imports import loaded_by

# Loaded only when they are used: urllib.request with http.client (and ssl) is about 15 ms of
# start-up, needed only to ask the metadata service (skyinfra_runtime.spot.direct_opener);
# http.client, ssl and xml.etree about 10 ms, needed only for a request to S3
# (skyinfra_runtime.s3).
LAZY = ("urllib.request", "http.client", "ssl", "xml.etree.ElementTree")


@pytest.mark.parametrize(
    "module",
    [
        "skyinfra_runtime",
        # the node's agent, supervisor and job commands (`skyinfra-runtime jobs|logs|supervise`)
        "skyinfra_runtime.jobs.commands",
        "skyinfra_runtime.launcher",
    ],
)
def test_importing_the_runtime_loads_no_http_client(module: str) -> None:
    assert loaded_by(f"import {module}", LAZY) == []


# What the operator's frequent asks (`skyinfra jobs`, `logs`, `cancel` run `skyinfra-runtime
# jobs|logs|cancel` on a node) never need: the launcher and its plugins, the agent and the
# supervisor, the checkpoint store's client. Each was part of every such command's start.
NOT_FOR_THE_ASKS = (
    "skyinfra_runtime.launcher",
    "skyinfra_runtime.plugins",
    "skyinfra_runtime.info",
    "skyinfra_runtime.standbys",
    "skyinfra_runtime.jobs.supervise",
    "skyinfra_runtime.jobs.supervisor",
    "skyinfra_runtime.jobs.agent",
    "skyinfra_runtime.ckptsync",
    "skyinfra_runtime.s3",
    "subprocess",
)


def test_the_job_asks_import_only_the_job_records() -> None:
    """`skyinfra-runtime jobs` as the node runs it (the console script's module, then the
    command's), on an empty node: it lists no job and loads none of NOT_FOR_THE_ASKS."""
    code = (
        "import contextlib, io, tempfile\n"
        "from skyinfra_runtime.command import main\n"
        "with tempfile.TemporaryDirectory() as node, contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        main(['jobs', '--node-dir', node])\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, exc.code\n"
    )
    assert loaded_by(code, NOT_FOR_THE_ASKS) == []


def test_the_package_imports_its_public_names_when_first_used() -> None:
    """``import skyinfra_runtime`` loads none of its API's modules; ``from skyinfra_runtime
    import instance_info`` (and any public name) still gives the name itself."""
    code = (
        "import json, sys, skyinfra_runtime\n"
        "before = [m for m in ('skyinfra_runtime.plugins', 'skyinfra_runtime.info') "
        "if m in sys.modules]\n"
        "from skyinfra_runtime import instance_info, plugins\n"
        "from skyinfra_runtime.info import instance_info as direct\n"
        "import skyinfra_runtime.plugins as plugins_module\n"
        "missing = [n for n in skyinfra_runtime.__all__ if not hasattr(skyinfra_runtime, n)]\n"
        "print(json.dumps([before, instance_info is direct, plugins is plugins_module, missing]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [[], True, True, []]


# What a log follower never needs: the typed job record and topology, and dataclasses with
# inspect under them (about half of a follower's start). `skyinfra run` starts one
# `skyinfra-runtime logs --follow` on every node of every attached run.
NOT_FOR_A_FOLLOWER = (
    "dataclasses",
    "inspect",
    "skyinfra_runtime.jobrecord",
    "skyinfra_runtime.topology",
    "skyinfra_runtime.jobs.records",
    *NOT_FOR_THE_ASKS,
)


def test_a_log_follower_imports_no_typed_record(tmp_path: Path) -> None:
    """`skyinfra-runtime logs --follow` as the node runs it, on a node whose part of the job
    ended: it prints the node's whole log and loads none of NOT_FOR_A_FOLLOWER."""
    run = tmp_path / "runs" / "j1"
    run.mkdir(parents=True)
    (run / "output.log").write_text("first\nlast\n")
    (run / "node.json").write_text(json.dumps({"node": 0, "state": "ended"}))
    code = (
        "import sys\n"
        "from skyinfra_runtime.command import main\n"
        "try:\n"
        f"    main(['logs', '--job', 'j1', '--node-dir', {str(tmp_path)!r}, '--follow'])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "sys.stdout.flush()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "first\nlast\n"
    assert loaded_by(code, NOT_FOR_A_FOLLOWER) == []


def test_the_launcher_imports_no_worker_module() -> None:
    """The launcher starts workers (or hands a job to a standby) and never runs one: the
    worker's, the standby's and the plugins' modules are theirs alone (the launcher checks
    plugin flags against the plugin table)."""
    workers = ("skyinfra_runtime.worker", "skyinfra_runtime.standby", "skyinfra_runtime.plugins")
    assert loaded_by("import skyinfra_runtime.launcher", workers) == []
