"""Shared fixtures: the repository root, the venv's console scripts, a small runtime tree,
and the loopback guard every test runs under (tests/loopback_guard/loopback_guard.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skyinfra.spec import validate_spec
from skyinfra.targets.local.target import local_context

REPO_ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
LOOPBACK_GUARD_DIR = REPO_ROOT / "tests" / "loopback_guard"

# A suite started in the background by a shell without job control (`make test &` in a script)
# inherits SIGINT ignored, and so would every process a test starts: the tests that press
# Ctrl-C (send SIGINT to a CLI they started) would then wait forever for it to end.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

sys.path.insert(0, str(LOOPBACK_GUARD_DIR))
# The guard's hooks and autouse fixture, registered for the whole suite.
from pytest_loopback_guard import loopback_only, pytest_configure  # noqa: E402, F401

# The AWS fixtures (moto's server, a real sshd, Terraform with the provider mirror), for the
# AWS tests of every level (unit/aws, terraform/aws, integration/aws, e2e/aws).
from tests.support.aws_fixtures import (  # noqa: E402, F401
    aws_env,
    ec2,
    moto_url,
    plugin_mirror,
    sshd,
    terraform,
)

# What a pytest process holds is frozen before each test: the collector walks only the new.
from tests.support.collector import (  # noqa: E402, F401
    pytest_collection_finish,
    pytest_runtest_setup,
)

# A test's timeout counts the test alone; fixture set-up and teardown have deadlines of their
# own, which name the stage that ran out (tests/support/deadlines.py).
from tests.support.deadlines import (  # noqa: E402, F401
    pytest_fixture_setup,
    pytest_itemcollected,
    pytest_runtest_teardown,
)

# Test files go to the pytest-xdist workers longest first.
from tests.support.schedule import pytest_xdist_make_scheduler  # noqa: E402, F401

# make bench-suite-then: only the tests an earlier suite had (SKYINFRA_SUITE_THEN names them).
from tests.support.suite_then import pytest_collection_modifyitems  # noqa: E402, F401

# After every run: seconds per tests/ folder, split into fixture set-up, calls and teardown.
from tests.support.timings import (  # noqa: E402, F401
    pytest_runtest_logreport,
    pytest_sessionfinish,
    pytest_terminal_summary,
)
from tests.support.tools import require_system_tool, skip_or_fail  # noqa: E402, F401


def skyinfra_argv() -> list[str]:
    """The console script as a user runs it (falls back to the module in the same venv)."""
    script = VENV_BIN / "skyinfra"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "skyinfra.cli"]


@pytest.fixture(scope="session")
def tf_plugin_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Terraform plugin cache per test worker: the first `init` unpacks a provider (the AWS
    one is 675 MB), every later one links to it. Tests on one worker run one at a time, so they
    never write the cache together."""
    return tmp_path_factory.mktemp("tf-plugins")


@pytest.fixture
def clean_env(tmp_path: Path, tf_plugin_cache: Path) -> dict[str, str]:
    """Environment for CLI subprocesses: caches in tmp, no inherited skyinfra settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYINFRA_")}
    env["SKYINFRA_CACHE"] = str(tmp_path / "cache")
    env["SKYINFRA_TF_PLUGIN_CACHE"] = str(tf_plugin_cache)
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


# Wheels of skyinfra's dependencies, so that tests install into fresh venvs without an index.
WHEELHOUSE_ENV = "SKYINFRA_WHEELHOUSE"


def require_wheelhouse() -> Path:
    """The dependency wheelhouse (`make wheelhouse`, which `make test` runs), or skip (fail
    in CI): tests never reach a package index."""
    wheelhouse = Path(os.environ.get(WHEELHOUSE_ENV) or REPO_ROOT / ".wheelhouse")
    if wheelhouse.is_dir() and any(wheelhouse.glob("*.whl")):
        return wheelhouse
    skip_or_fail(
        f"no dependency wheels in {wheelhouse}: run `make wheelhouse` (`make test` does) "
        f"or point ${WHEELHOUSE_ENV} at a folder of wheels"
    )


def offline_pip_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for pip that reads no pip configuration and no package index: only the
    --find-links a command names (tests send traffic to loopback at most)."""
    out = {k: v for k, v in env.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    out.update(
        {
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_NO_INDEX": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
    )
    return out


def make_venv(path: Path) -> Path:
    """A fresh virtual environment (with pip) from this interpreter's base Python; its python."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    return path / "bin" / "python"


# The local root module's template values for a fixed 2-node spec (the golden files'
# input), fresh on every call; shared by the render and the Terraform tests.
GoldenContext = Callable[[], dict[str, object]]


@pytest.fixture
def golden_context() -> GoldenContext:
    def make() -> dict[str, object]:
        spec = validate_spec(
            {
                "name": "demo",
                "nodes": 2,
                "python_packages": ["numpy>=1.26", "jax[cpu]"],
                "head_port": 29600,
            }
        )
        return local_context(
            spec,
            node_root=Path("/srv/skyinfra/demo/nodes"),
            python="/opt/python/bin/python3",
            wheel_path=Path("/cache/wheels/skyinfra_runtime-0.1.0-py3-none-any.whl"),
            wheel_sha256="ab" * 32,
            uv="/opt/python/bin/uv",
            uv_cache_dir="/srv/skyinfra/demo/uv-cache",
        )

    return make


def content_of(entry: dict[str, Any]) -> str:
    """A cloud-init write_files entry's text (unpacked when ``encoding: gz+b64``)."""
    import base64
    import gzip

    if entry.get("encoding") == "gz+b64":
        return gzip.decompress(base64.b64decode(entry["content"])).decode()
    return str(entry["content"])
