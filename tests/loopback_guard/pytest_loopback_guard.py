"""pytest plugin: the suite, and every process it starts, reaches only loopback.

Registered by tests/conftest.py (and usable alone with ``-p pytest_loopback_guard`` when this
folder is on sys.path). See loopback_guard.py for what is refused and how.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import loopback_guard
import pytest

GUARD_DIR = Path(__file__).resolve().parent
_proxy: loopback_guard.RefusingProxy | None = None
# Which pytest-xdist worker ("" for none) made the log LOG_ENV names.
_LOG_OWNER_ENV = "LOOPBACK_GUARD_LOG_WORKER"


def pytest_configure(config: pytest.Config) -> None:
    """Guard this process and, through the environment, every process it starts."""
    global _proxy
    if _proxy is not None:
        return
    # One log per pytest process: a pytest started by a test shares its parent's, but each
    # pytest-xdist worker gets its own, or a refusal on one worker would fail (or be truncated
    # away by) a test running at the same time on another.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not os.environ.get(loopback_guard.LOG_ENV) or os.environ.get(_LOG_OWNER_ENV) != worker:
        fd, log = tempfile.mkstemp(prefix=f"loopback-guard-{worker}", suffix=".log")
        os.close(fd)
        os.environ[loopback_guard.LOG_ENV] = log
        os.environ[_LOG_OWNER_ENV] = worker
    _proxy = loopback_guard.RefusingProxy()
    os.environ.update(loopback_guard.proxy_environment(_proxy.url))
    paths = [str(GUARD_DIR), *filter(None, [os.environ.get("PYTHONPATH")])]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    loopback_guard.install()


def guard_log() -> Path:
    return Path(os.environ[loopback_guard.LOG_ENV])


@pytest.fixture(autouse=True)
def loopback_only() -> Iterator[None]:
    """Fail the test that sent (or tried to send) anything beyond loopback, naming where."""
    log = guard_log()
    start = log.stat().st_size if log.is_file() else 0
    yield
    if log.is_file() and log.stat().st_size > start:
        with log.open("rb") as f:
            f.seek(start)
            refused = f.read().decode(errors="replace")
        pytest.fail(
            "this test tried to reach beyond loopback (tests may use only 127.0.0.0/8 and "
            f"::1):\n{refused}",
            pytrace=False,
        )
