"""Start-up imports only what the command needs: `skyinfra --help` and `skyinfra topology` on
a local cluster load neither boto3 nor paramiko (the AWS target's SDKs, a third of the
start-up before). Each command runs in a fresh interpreter, which then lists what it loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from skyinfra_runtime.topology import Node

from skyinfra.spec import validate_spec
from skyinfra.topology import build_topology
from tests.support.imports import loaded_by

HEAVY = ("boto3", "botocore", "paramiko")

# Runs `skyinfra ARGS...` through the console script's main, then prints the heavy top-level
# packages it loaded as the last line of stderr.
PROBE = """
import json, sys
from skyinfra.cli import main
try:
    main(sys.argv[1:])
except SystemExit as end:
    code = end.code
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
print(json.dumps({"code": code, "loaded": loaded}), file=sys.stderr)
"""


def _loaded_by(args: list[str], cwd: Path) -> list[str]:
    probe = f"HEAVY = {HEAVY!r}\n{PROBE}"
    proc = subprocess.run(
        [sys.executable, "-c", probe, *args], cwd=cwd, capture_output=True, text=True
    )
    result = json.loads(proc.stderr.strip().splitlines()[-1])
    assert result["code"] in (0, None), proc.stdout + proc.stderr
    assert proc.stdout, proc.stderr  # the command did its work (help text, topology)
    loaded: list[str] = result["loaded"]
    return loaded


def test_help_loads_no_target_sdk(tmp_path: Path) -> None:
    assert _loaded_by(["--help"], tmp_path) == []


def test_every_command_help_loads_no_target_sdk(tmp_path: Path) -> None:
    for command in ("up", "plan", "render", "run", "status", "prices"):
        assert _loaded_by([command, "--help"], tmp_path) == [], command


def test_topology_of_a_local_cluster_loads_no_target_sdk(tmp_path: Path) -> None:
    """A local cluster's workspace as `up` leaves it (spec.json, topology.json), found through
    ./skyinfra.toml as a user runs it."""
    spec = validate_spec({"name": "quiet", "nodes": 2, "provider": "local"})
    ws = tmp_path / "clusters" / spec.name
    ws.mkdir(parents=True)
    (ws / "spec.json").write_text(json.dumps(spec.to_dict()))
    nodes = [Node(i, f"node-{i}", f"127.0.0.{2 + i}", None, None) for i in range(2)]
    topology = build_topology(spec, head_addr="127.0.0.2", nodes=nodes)
    (ws / "topology.json").write_text(json.dumps(topology.to_dict()))
    (tmp_path / "skyinfra.toml").write_text('name = "quiet"\nnodes = 2\n')

    assert _loaded_by(["topology", "--dir", str(tmp_path / "clusters")], tmp_path) == []


def test_validate_of_an_aws_spec_loads_no_target_sdk(tmp_path: Path) -> None:
    """`validate` needs no cloud: checking an AWS spec loads neither boto3 nor paramiko."""
    (tmp_path / "id").write_text("a private key\n")
    (tmp_path / "skyinfra.toml").write_text(
        'name = "gpu"\nprovider = "aws"\n[aws]\nregion = "us-east-1"\n'
        'instance_type = "g5.xlarge"\nssh_cidrs = ["203.0.113.4/32"]\nssh_key = "id"\n'
    )
    assert _loaded_by(["validate"], tmp_path) == []


# What `skyinfra jobs`, `logs`, `cancel` and `run` on a local cluster never need: Jinja (the
# templates are rendered by `up`), importlib.metadata (email, zipfile, csv: only an AWS spec's
# jax pin asks it), `up`'s planning (lifecycle.changes). Each was part of their start.
NOT_FOR_JOBS = ("jinja2", "importlib.metadata", "email", "skyinfra.lifecycle.changes")


def test_the_job_commands_path_on_a_local_cluster_loads_no_templates_or_metadata() -> None:
    """The modules `skyinfra jobs` imports to reach a local cluster's head (the CLI, the
    lifecycle's transport_for and the local target's module) load none of NOT_FOR_JOBS."""
    code = (
        "import skyinfra.cli.main, skyinfra.cli.jobs, skyinfra.run.job\n"
        "from skyinfra import lifecycle\n"
        "lifecycle.transport_for, lifecycle.not_up_error\n"
        "import skyinfra.targets.local.target\n"
    )
    assert loaded_by(code, NOT_FOR_JOBS) == []


# What every command on a local cluster (and `run`, the most frequent) never needs: another
# target's spec parsers (each command builds its flags from every target's declaration), the
# Python API, the Terraform engine (a workspace without a shared backend), the wheel builder and
# the renderer (`up`'s), the API's review of costs, concurrent.futures with logging. Together
# about a third of `skyinfra run`'s start before.
NOT_FOR_A_LOCAL_RUN = (
    "skyinfra.targets.aws.spec",
    "skyinfra.targets.aws.spec_parsing",
    "skyinfra.targets.ssh.spec",
    "skyinfra.targets.ssh.checkpoint_store",
    "skyinfra.api.cluster",
    "skyinfra.terraform.engine",
    "skyinfra.wheel",
    "skyinfra.render",
    "skyinfra.review.cost",
    "concurrent.futures",
    "logging",
    # The plugins' classes are the workers' (the operator checks a spec against the plugin
    # table alone): about 20 ms of every command's start.
    "skyinfra_runtime.plugins",
)


def test_run_on_a_local_cluster_loads_no_other_target_nor_up_s_modules(tmp_path: Path) -> None:
    """The modules `skyinfra run` imports on its way to a local cluster's nodes (the CLI with
    every target's flags, the run session, the lifecycle's verbs, the local target, the
    readiness of two nodes asked in parallel, the shared-state check) load none of
    NOT_FOR_A_LOCAL_RUN."""
    nodes = [Node(i, f"node-{i}", f"127.0.0.{2 + i}", None, None) for i in range(2)]
    spec = validate_spec({"name": "quiet", "nodes": 2, "provider": "local"})
    topology = build_topology(spec, head_addr="127.0.0.2", nodes=nodes)
    (tmp_path / "topology.json").write_text(json.dumps(topology.to_dict()))
    code = (
        "import pathlib\n"
        "import skyinfra.cli.main, skyinfra.cli.running, skyinfra.run.session\n"
        "from skyinfra.api.subset import selected_nodes\n"
        "from skyinfra.cli.resolve import refresh_shared_topology\n"
        "from skyinfra.lifecycle import verbs\n"
        "from skyinfra.spec import validate_spec\n"
        "from skyinfra.topology import read_topology\n"
        "from skyinfra.transport.base import Readiness\n"
        "from skyinfra.transport.readiness import check_readiness\n"
        "from skyinfra.workspace import Workspace\n"
        "spec = validate_spec({'name': 'quiet', 'nodes': 2, 'provider': 'local'})\n"
        "target = verbs.target_of(spec)\n"
        f"topology = read_topology(pathlib.Path({str(tmp_path / 'topology.json')!r}))\n"
        "class Asked:\n"
        "    def readiness(self, node):\n"
        "        return Readiness('ready')\n"
        "assert set(check_readiness(Asked(), topology)) == {0, 1}\n"
        f"refresh_shared_topology(Workspace(pathlib.Path({str(tmp_path)!r})))\n"
    )
    assert loaded_by(code, NOT_FOR_A_LOCAL_RUN) == []
