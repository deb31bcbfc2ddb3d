"""Shared fixtures: the repository root, the venv's console scripts, a small runtime tree,
and the loopback guard every test runs under (tests/loopback_guard/loopback_guard.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
LOOPBACK_GUARD_DIR = REPO_ROOT / "tests" / "loopback_guard"

sys.path.insert(0, str(LOOPBACK_GUARD_DIR))
# The guard's hooks and autouse fixture, registered for the whole suite.
from pytest_loopback_guard import loopback_only, pytest_configure  # noqa: E402, F401


def skyinfra_argv() -> list[str]:
    """The console script as a user runs it (falls back to the module in the same venv)."""
    script = VENV_BIN / "skyinfra"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "skyinfra.cli"]


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    """Environment for CLI subprocesses: caches in tmp, no inherited skyinfra settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")}
    env["SKYINFRA_CACHE"] = str(tmp_path / "cache")
    env["SKYINFRA_TF_PLUGIN_CACHE"] = str(tmp_path / "tf-plugins")
    return env


@pytest.fixture(scope="session")
def minimal_runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runtime source tree with an importable skyinfra_runtime, for the Terraform-layer tests
    (they test Terraform and the bootstrap, not the runtime; the e2e tests use runtime/)."""
    root = tmp_path_factory.mktemp("minimal-runtime")
    pkg = root / "src" / "skyinfra_runtime"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""Minimal runtime for Terraform-layer tests."""\n')
    (root / "pyproject.toml").write_text(
        "[build-system]\n"
        'requires = ["setuptools>=68"]\n'
        'build-backend = "setuptools.build_meta"\n\n'
        "[project]\n"
        'name = "skyinfra-runtime"\n'
        'version = "0.0.0"\n\n'
        "[tool.setuptools.packages.find]\n"
        'where = ["src"]\n'
    )
    return root


def require_system_tool(path: str | None, package: str) -> str:
    """``path`` of a system tool, or skip (fail under SKYINFRA_REQUIRE_SYSTEM_TOOLS=1, as in CI:
    a CI run that silently skipped the real-sshd or cloud-init tests would prove nothing)."""
    if path is not None and os.path.exists(path):
        return path
    message = f"{package} is not installed (`make test` installs it; see tests/system-deps.sh)"
    if os.environ.get("SKYINFRA_REQUIRE_SYSTEM_TOOLS") == "1":
        pytest.fail(message)
    pytest.skip(message)
