"""System tools some tests use for real (sshd, cloud-init, checkov, the wheelhouse)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def skip_or_fail(message: str) -> NoReturn:
    """Skip, or fail under SKYINFRA_REQUIRE_SYSTEM_TOOLS=1 (as in CI: a CI run that silently
    skipped the real-sshd, cloud-init or pip-install tests would prove nothing)."""
    if os.environ.get("SKYINFRA_REQUIRE_SYSTEM_TOOLS") == "1":
        pytest.fail(message)
    pytest.skip(message)


def require_system_tool(path: str | None, package: str) -> str:
    """``path`` of a system tool, or skip (fail in CI, see skip_or_fail)."""
    if path is not None and os.path.exists(path):
        return path
    skip_or_fail(f"{package} is not installed (`make test` installs it; see tests/system-deps.sh)")
