"""The node bootstrap (infra/scripts/bootstrap-node.sh) as both targets run it, for real:
uv with one package cache shared by two nodes, each step in the phases file; pip, saying so,
when the uv it was given does not run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from skyinfra import resources
from skyinfra.targets.local.target import operator_uv
from skyinfra.wheel import build_runtime_wheel
from tests.support.spawner import node_pids, start_spawner
from tests.support.workers import kill_all


def bootstrap(script: Path, node_dir: Path, *flags: str) -> str:
    wheel = build_runtime_wheel().path
    proc = subprocess.run(
        ["bash", str(script), "--node-dir", str(node_dir), "--python", sys.executable,
         "--wheel", str(wheel), "--inherit-site-packages", *flags],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    # The script's last step imports skyinfra_runtime in the new venv: 0 means it does.
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_nodes_share_one_uv_cache_and_log_their_phases(tmp_path: Path) -> None:
    script = tmp_path / "bootstrap-node.sh"
    script.write_text(resources.bootstrap_script())
    uv, cache, phases = operator_uv(), tmp_path / "uv-cache", tmp_path / "phases"
    for node in ("node-0", "node-1"):
        flags = ("--uv", uv, "--cache-dir", str(cache), "--phase-file", str(phases))
        log = bootstrap(script, tmp_path / node, *flags)
        assert "bootstrap-node: installing with uv " in log
        assert "uv = " in (tmp_path / node / "venv" / "pyvenv.cfg").read_text()
    # The runtime wheel went through the one cache both nodes were given.
    assert any(cache.rglob("skyinfra_runtime*")), sorted(p.name for p in cache.iterdir())
    steps = [line.split()[0] for line in phases.read_text().splitlines()]
    assert steps == ["venv", "wheel", "venv", "wheel"]


def test_without_a_working_uv_the_node_falls_back_to_pip_and_says_so(tmp_path: Path) -> None:
    script = tmp_path / "bootstrap-node.sh"
    script.write_text(resources.bootstrap_script())
    broken = tmp_path / "uv"
    broken.write_text("#!/bin/sh\nexit 1\n")
    broken.chmod(0o755)
    log = bootstrap(script, tmp_path / "node-0", "--uv", str(broken))
    assert f"uv not available ({broken}); falling back to pip" in log
    assert "uv = " not in (tmp_path / "node-0" / "venv" / "pyvenv.cfg").read_text()


def made_wheel(folder: Path, init: str) -> Path:
    """A skyinfra-runtime wheel whose package holds only ``__init__.py`` (no IMDS stand-in)."""
    dist = "skyinfra_runtime-0.0.0.dist-info"
    wheel = folder / "skyinfra_runtime-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("skyinfra_runtime/__init__.py", init)
        zf.writestr(
            f"{dist}/METADATA", "Metadata-Version: 2.1\nName: skyinfra-runtime\nVersion: 0.0.0\n"
        )
        zf.writestr(
            f"{dist}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr(f"{dist}/RECORD", "")
    return wheel


def enrol(
    script: Path, node_dir: Path, wheel: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The bootstrap as the ssh and local targets run it: uv, the node's IMDS stand-in."""
    return subprocess.run(
        ["bash", str(script), "--node-dir", str(node_dir), "--python", sys.executable,
         "--wheel", str(wheel), "--uv", operator_uv(),
         "--cache-dir", str(node_dir.parent / "uv-cache"), "--imds-standin", "127.0.0.1"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip


def test_with_the_imds_standin_the_runtime_is_imported_by_the_standin_alone(
    tmp_path: Path,
) -> None:
    """Every interpreter that imports the runtime costs about 0.1 s of CPU per node (issue 45's
    figure 20: 8 hosts' enrolments share one machine): the stand-in's own start is the proof
    that the runtime imports, no separate import check runs beside it."""
    script = tmp_path / "bootstrap-node.sh"
    script.write_text(resources.bootstrap_script())
    hook, started = tmp_path / "hook", tmp_path / "started.jsonl"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import json, sys\n"
        f"with open({str(started)!r}, 'a') as f:\n"
        "    f.write(json.dumps(sys.orig_argv) + '\\n')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(hook)}
    node = tmp_path / "node-0"
    try:
        done = enrol(script, node, build_runtime_wheel().path, env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (node / "notice.json").is_file()
    finally:
        subprocess.run(["bash", str(script), "--remove", "--node-dir", str(node)], timeout=60)
    runs = [json.loads(line) for line in started.read_text().splitlines()]
    importing = [argv[1:] for argv in runs if any("skyinfra_runtime" in a for a in argv)]
    assert [argv[:3] for argv in importing] == [["-m", "skyinfra_runtime", "imds-standin"]]


def test_a_runtime_without_the_standin_enrols_and_one_that_does_not_import_stops(
    tmp_path: Path,
) -> None:
    script = tmp_path / "bootstrap-node.sh"
    script.write_text(resources.bootstrap_script())
    stripped = tmp_path / "stripped"
    stripped.mkdir()
    done = enrol(script, tmp_path / "node-0", made_wheel(stripped, '"""No stand-in."""\n'))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "this runtime has no IMDS stand-in" in done.stdout
    assert not (tmp_path / "node-0" / "notice.json").exists()
    broken = tmp_path / "broken"
    broken.mkdir()
    done = enrol(script, tmp_path / "node-1", made_wheel(broken, "raise ImportError('no')\n"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"skyinfra_runtime does not import in {tmp_path / 'node-1'}/venv" in done.stderr


def test_remove_ends_the_children_a_node_process_starts_while_it_is_ended(tmp_path: Path) -> None:
    """--remove TERMs each process of the node a later look finds and repeats its KILLs until
    a look finds none: one KILL of what a look found left the children started meanwhile (a
    keeper's standby started just before its KILL outlived `down`)."""
    script = tmp_path / "bootstrap-node.sh"
    script.write_text(resources.bootstrap_script())
    node = tmp_path / "node-0"
    spawner = start_spawner(node)
    try:
        done = subprocess.run(
            ["bash", str(script), "--remove", "--node-dir", str(node)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert spawner.wait(timeout=5) == -9
        assert node_pids(node) == []
    finally:
        kill_all([spawner.pid, *node_pids(node)])


def test_remove_renames_the_node_away_before_it_deletes_it(tmp_path: Path) -> None:
    """--remove renames the folder beside itself before it deletes it: while the delete is
    held (an `rm` first on its PATH that waits to be let go), the node's folder is already
    gone, so a second --remove (the destroy of the node's replacement) ends at once with
    nothing to do, and once let go nothing of the node is left. The folder stayed until its
    last file went: a replacement's destroy gave up after a minute on a venv of GBs."""
    script = tmp_path / "bootstrap-node.sh"
    script.write_text(resources.bootstrap_script())
    nodes = tmp_path / "nodes"
    node = nodes / "node-1"
    (node / "venv" / "lib").mkdir(parents=True)
    (node / ".skyinfra-node").touch()
    (node / "venv" / "lib" / "torch.py").write_text("x = 1\n")
    hold = tmp_path / "hold"
    hold.mkdir()
    (hold / "rm").write_text(
        '#!/bin/bash\ntouch "$HOLD/started"\n'
        'while [ ! -e "$HOLD/go" ]; do sleep 0.05; done\nexec /bin/rm "$@"\n'
    )
    (hold / "rm").chmod(0o755)
    env = {**os.environ, "PATH": f"{hold}:{os.environ['PATH']}", "HOLD": str(hold)}
    remove = ["bash", str(script), "--remove", "--node-dir", str(node)]
    first = subprocess.Popen(remove, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (hold / "started").exists() and first.poll() is None:
            assert time.monotonic() < deadline, "--remove never reached its delete"
            time.sleep(0.05)
        assert (hold / "started").exists(), first.communicate()[0]
        assert not node.exists()
        [trash] = nodes.iterdir()
        assert trash.name.startswith(".node-1.removing-") and (trash / ".skyinfra-node").exists()
        second = subprocess.run(remove, capture_output=True, text=True, timeout=60)
        assert second.returncode == 0 and second.stdout == "", second.stdout + second.stderr
        (hold / "go").touch()
        said = first.communicate(timeout=60)[0].decode()
        assert first.returncode == 0 and f"removed {node}" in said, said
        assert list(nodes.iterdir()) == []
    finally:
        (hold / "go").touch()
        if first.poll() is None:
            first.kill()
            first.wait()


def test_remove_ends_what_the_runtime_started_in_a_session_of_its_own(tmp_path: Path) -> None:
    """--remove ends a process that carries only SKYINFRA_NODE_DIR=DIR, in a session of its
    own and in no pid file: what the runtime starts on an ssh host (the standby keeper, its
    standbys, a warm worker that outlived its launcher) carries no local node's mark, and
    outlived the removal of its node. A neighbour node's process is left alone."""
    script = tmp_path / "bootstrap-node.sh"
    script.write_text(resources.bootstrap_script())
    node, neighbour = tmp_path / "node-0", tmp_path / "node-00"
    for folder in (node, neighbour):
        folder.mkdir()
        (folder / ".skyinfra-node").touch()
    marks = ("SKYINFRA_LOCAL_NODE_DIR", "SKYINFRA_NODE_DIR")
    env = {k: v for k, v in os.environ.items() if k not in marks}
    wait = [sys.executable, "-c", "import time; time.sleep(600)"]
    kept = [
        subprocess.Popen(wait, env={**env, "SKYINFRA_NODE_DIR": str(folder)},
                         start_new_session=True)
        for folder in (node, neighbour)
    ]  # fmt: skip
    try:
        done = subprocess.run(
            ["bash", str(script), "--remove", "--node-dir", str(node)],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert kept[0].wait(timeout=10) == -15
        assert kept[1].poll() is None and not node.exists() and neighbour.is_dir()
    finally:
        kill_all([p.pid for p in kept])
