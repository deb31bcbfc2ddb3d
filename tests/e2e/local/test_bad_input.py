"""Bad input, as a suite: every case runs the real CLI entry point (``skyinfra.cli.main``, in
this process for speed) in a project that already has a cluster up, and asserts the exit code
from the one table (skyinfra/exitcodes.py), a message naming the offending field or value, no
traceback, and a project left exactly as it was (every file's path and sha256).

The spec-file cases of tests/unit/test_spec.py (BAD_SPECS) run the same way through a
subprocess; the cases here add flags, cluster selection, duplicate keys, rules that combine
fields, topology files and the runtime launcher's own input.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyinfra import exitcodes
from skyinfra.cli import main
from tests.conftest import skyinfra_argv

pytestmark = pytest.mark.slow

AWS = (
    'provider = "aws"\n[aws]\nregion = "us-east-1"\ninstance_type = "g5.xlarge"\n'
    'ssh_cidrs = ["203.0.113.4/32"]\n'
)


def fingerprint(root: Path) -> dict[str, str]:
    """Every path under ``root`` with the sha256 of its bytes ("dir" for folders)."""
    return {
        str(p.relative_to(root)): "dir"
        if p.is_dir()
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if "__pycache__" not in p.parts and p.name != ".skyinfra.lock"
    }


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, minimal_runtime_dir: Path) -> Iterator[Path]:
    """A project with one cluster up (`live`, 1 local node) that no case may touch."""
    root = tmp_path_factory.mktemp("bad-input")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")}
    env["SKYINFRA_RUNTIME_DIR"] = str(minimal_runtime_dir)
    env["SKYINFRA_CACHE"] = str(root.parent / "cache")
    cmd = [*skyinfra_argv(), "up", "--name", "live", "--nodes", "1"]
    up = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    (root / "entry.py").write_text("def main():\n    return 1\n")
    (root / "broken.py").write_text("def main():\n    return (1\n")
    yield root
    subprocess.run(
        [*skyinfra_argv(), "down", "--yes", "--cluster", "live"],
        cwd=root,
        env=env,
        capture_output=True,
        timeout=300,
    )


# (spec file text or None, argv, exit code, text the message must contain)
CASES: list[tuple[str | None, list[str], int, str]] = [
    # flags of `up`
    (None, ["up", "--name", "c", "--nodes", "0"], exitcodes.USAGE, "--nodes: got 0"),
    (None, ["up", "--name", "c", "--nodes", "2.5"], exitcodes.USAGE, "--nodes: got"),
    (None, ["up", "--name", "c", "--nodes", "-1"], exitcodes.USAGE, "--nodes: got -1"),
    (
        None,
        ["up", "--name", "c", "--procs-per-node", "0"],
        exitcodes.USAGE,
        "--procs-per-node: got",
    ),
    (
        None,
        ["up", "--name", "c", "--procs-per-node", "65"],
        exitcodes.USAGE,
        "--procs-per-node: got",
    ),
    (None, ["up", "--name", "Upper"], exitcodes.USAGE, "--name: got"),
    (None, ["up", "--name", ""], exitcodes.USAGE, "--name: got"),
    (None, ["up", "--name", "trailing-"], exitcodes.USAGE, "--name: got"),
    (None, ["up", "--name", "a" * 33], exitcodes.USAGE, "--name: got"),
    (None, ["up", "--name", "../escape"], exitcodes.USAGE, "--name: got"),
    (None, ["up", "--name", "c", "--provider", "gcp"], exitcodes.USAGE, "--provider: got"),
    (None, ["up", "--name", "c", "--plugin", ":x=1"], exitcodes.USAGE, "plugin"),
    (None, ["up", "--name", "c", "--plugin", "jax:init_timeout"], exitcodes.USAGE, "--plugin"),
    (None, ["up", "--name", "c", "--plugin", "horovod"], exitcodes.USAGE, "--plugin: got"),
    (None, ["up", "--name", "c", "--plugin", "torch:backend=nccl2"], exitcodes.USAGE, "backend"),
    (None, ["up", "--name", "c", "--package", "-e ."], exitcodes.USAGE, "--package: got"),
    (None, ["up", "--name", "c", "--package", "a b"], exitcodes.USAGE, "--package: got"),
    (None, ["up", "--name", "c", "--skip-preflight"], exitcodes.USAGE, "a flag of target 'aws'"),
    (None, ["up", "--spec", "missing.toml"], exitcodes.USAGE, "invalid value for --spec: got"),
    (None, ["up", "--spec", "."], exitcodes.USAGE, "--spec"),
    (None, ["up", "--name", "c", "--no-such-flag"], exitcodes.USAGE, "no-such-flag"),
    (None, ["up", "--name", "c", "--dir", "entry.py/clusters"], exitcodes.ERROR, "cannot create"),
    # rules that combine fields, refused at `up` rather than at the first run
    (
        None,
        ["up", "--name", "c", "--nodes", "2", "--plugin", "keras:backend=jax"],
        exitcodes.USAGE,
        "the jax plugin before keras",
    ),
    (
        None,
        ["up", "--name", "c", "--nodes", "2", "--plugin", "keras", "--plugin", "jax"],
        exitcodes.USAGE,
        "--plugin keras: got",
    ),
    ('name = "c"\nhead_port = 65535\n', ["up"], exitcodes.USAGE, "'head_port'"),
    ('name = "c"\nhead_port = "29500"\n', ["up"], exitcodes.USAGE, "'head_port'"),
    ('name = "live"\nnodes = 1\nhead_port = 29500\n', ["up", "--name", "twin"], 2, "is up on"),
    # A 2-node cluster's jobs take 29498-29501 (a pair per node): they would meet live's.
    ('name = "c"\nnodes = 2\nhead_port = 29498\n', ["up"], 2, "is up on 29500-29501"),
    # the spec file itself
    (
        'name = "c"\nnodes = 1\nname = "d"\n',
        ["up"],
        exitcodes.USAGE,
        "the key 'name' is given twice",
    ),
    ('name = "c"\n[local]\n[local]\n', ["up"], exitcodes.USAGE, "twice"),
    ('name = "c"\nplugins = "jax"\n', ["up"], exitcodes.USAGE, "'plugins'"),
    ('name = "c"\nplugins = [{name = "jax", x = 1}]\n', ["up"], exitcodes.USAGE, "plugins[0].x"),
    ('name = "c"\npython_packages = "numpy"\n', ["up"], exitcodes.USAGE, "'python_packages'"),
    ('name = "c"\n[local]\nbase_address = "127.0.0.0"\n', ["up"], 2, "'local.base_address'"),
    ('name = "c"\nnodes = 3\n[local]\nbase_address = "127.255.255.254"\n', ["up"], 2, "room"),
    ('name = "c"\n[local]\ncolour = 1\n', ["up"], exitcodes.USAGE, "'local.colour'"),
    ('name = "c"\n' + AWS + 'ssh_user = "Root!"\n', ["up"], exitcodes.USAGE, "'aws.ssh_user'"),
    (
        'name = "c"\n' + AWS.replace('["203.0.113.4/32"]', '["0.0.0.0/1", "128.0.0.0/1"]'),
        ["up"],
        exitcodes.USAGE,
        "cover the whole internet",
    ),
    (
        'name = "c"\n' + AWS.replace('["203.0.113.4/32"]', '["::/0"]'),
        ["up"],
        exitcodes.USAGE,
        "'aws.ssh_cidrs[0]'",
    ),
    ('name = "c"\n' + AWS + 'vpc_id = "vpc"\n', ["up"], exitcodes.USAGE, "'aws.vpc_id'"),
    ('name = "c"\n' + AWS + "placement_group = 1\n", ["up"], 2, "'aws.placement_group'"),
    ('name = "c"\n' + AWS + 'allow_ssh_from_anywhere = "yes"\n', ["up"], 2, "allow_ssh_from"),
    # which cluster: only what the user named
    (None, ["down", "--yes"], exitcodes.USAGE, "which cluster?"),
    (None, ["down", "--yes", "--cluster", "nope"], exitcodes.USAGE, "no cluster named 'nope'"),
    (
        None,
        ["down", "--yes", "--cluster", "../live"],
        exitcodes.USAGE,
        "invalid value for --cluster: got",
    ),
    (None, ["down", "--cluster", "live"], exitcodes.USAGE, "pass --yes"),
    (None, ["tf", "--", "state", "list"], exitcodes.USAGE, "which cluster?"),
    (None, ["tf", "--cluster", "live"], exitcodes.USAGE, "give Terraform arguments"),
    (None, ["run", "entry.py:main"], exitcodes.USAGE, "which cluster?"),
    (None, ["run", "--cluster", "gone", "entry.py:main"], exitcodes.USAGE, "'gone'"),
    (
        None,
        ["run", "--cluster", "live", "--wait-ready", "-1", "e.py"],
        exitcodes.USAGE,
        "wait-ready",
    ),
    (None, ["status", "--cluster", "Live"], exitcodes.USAGE, "invalid value for --cluster: got"),
    (None, ["status", "--cluster", "nope"], exitcodes.USAGE, "clusters there: live"),
    (None, ["topology", "--cluster", "nope"], exitcodes.USAGE, "no cluster named 'nope'"),
    ('name = "other"\n', ["status"], exitcodes.USAGE, "no cluster named 'other'"),
    ('name = "other"\n', ["down", "--yes"], exitcodes.USAGE, "no cluster named 'other'"),
    (None, ["up", "--name", "live", "--nodes", "1", "--provider", "aws"], 2, "aws"),
    # Compiled on this machine before anything is copied: the file and the line.
    (None, ["run", "--cluster", "live", "broken.py:main"], exitcodes.USAGE, "broken.py line 2"),
    (None, ["run", "--cluster", "live", "broken.py"], exitcodes.USAGE, "broken.py line 2"),
    # The torch wheels nodes install have no MPI backend: refused before anything is written.
    (
        None,
        ["up", "--name", "live", "--nodes", "1", "--plugin", "torch:backend=mpi"],
        exitcodes.USAGE,
        "without MPI",
    ),
]


@pytest.mark.parametrize(
    ("spec", "argv", "code", "message"), CASES, ids=[" ".join(c[1])[:60] for c in CASES]
)
def test_bad_input_exits_with_its_code_names_it_and_changes_nothing(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spec: str | None,
    argv: list[str],
    code: int,
    message: str,
) -> None:
    spec_file = project / "skyinfra.toml"
    if spec is not None:
        spec_file.write_text(spec)
    monkeypatch.chdir(project)
    for name in [k for k in os.environ if k.startswith("SKYINFRA_") and k != "SKYINFRA_CACHE"]:
        monkeypatch.delenv(name)
    before = fingerprint(project)
    try:
        with pytest.raises(SystemExit) as exited:
            main(argv)
    finally:
        spec_file.unlink(missing_ok=True)
    out, err = capsys.readouterr()
    assert exited.value.code == code, out + err
    assert message in out + err, out + err
    assert "Traceback" not in out + err
    after = fingerprint(project)
    after.pop("skyinfra.toml", None)
    before.pop("skyinfra.toml", None)
    assert after == before


def test_bad_topology_files_and_launcher_input_are_refused_before_any_worker(
    tmp_path: Path,
) -> None:
    """The runtime's own input: a topology file it cannot use is exit 3 naming the field; a bad
    --plugin is exit 2 before any worker starts."""
    good = {
        "schema": 1, "cluster": "c", "provider": "local", "head_addr": "127.0.0.1",
        "head_port": 29500, "procs_per_node": 1, "plugins": [],
        "nodes": [{"index": 0, "name": "node-0", "private_ip": "127.0.0.1", "public_ip": None,
                   "instance_id": "i", "accelerator": None}],
    }  # fmt: skip
    (tmp_path / "entry.py").write_text("def main():\n    return 1\n")
    cases: list[tuple[dict[str, object] | str, list[str], int, str]] = [
        ({**good, "schema": 2}, [], 3, "schema"),
        ({**good, "head_port": "x"}, [], 3, "head_port"),
        ({**good, "nodes": []}, [], 3, "nodes"),
        ("{not json", [], 3, "JSON"),
        (good, ["--plugin", "torch:backend=ucc"], 2, "backend"),
        (good, ["--node", "7"], 3, "7"),
    ]
    for topology, extra, code, message in cases:
        path = tmp_path / "topology.json"
        path.write_text(topology if isinstance(topology, str) else json.dumps(topology))
        argv = [sys.executable, "-m", "skyinfra_runtime", "launch", "--topology", str(path)]
        if "--node" not in extra:
            argv += ["--node", "0"]
        proc = subprocess.run(
            [*argv, *extra, "entry.py:main"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")},
        )
        assert proc.returncode == code, (topology, extra, proc.stderr)
        assert message in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
