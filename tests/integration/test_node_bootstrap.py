"""The node bootstrap (infra/scripts/bootstrap-node.sh) as both targets run it, for real:
uv with one package cache shared by two nodes, each step in the phases file; pip, saying so,
when the uv it was given does not run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from skyinfra import resources
from skyinfra.targets.local.target import operator_uv
from skyinfra.wheel import build_runtime_wheel


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
