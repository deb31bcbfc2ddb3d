"""Static checks of the AWS modules with real Terraform: fmt, validate, `terraform test`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from aws_tf import MODULES, Terraform

MODULE_NAMES = ("network", "security", "nodes")


def test_modules_are_fmt_clean(terraform: Terraform) -> None:
    result = terraform(MODULES, "fmt", "-check", "-recursive", "-diff", "-no-color")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def initialised(terraform: Terraform, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each module copied out of the tree (no .terraform in the repo) and initialised."""
    base = tmp_path_factory.mktemp("modules")
    dirs = {}
    for name in MODULE_NAMES:
        target = base / name
        shutil.copytree(MODULES / name, target)
        terraform(target, "init", "-backend=false", "-input=false", "-no-color").check()
        dirs[name] = target
    return dirs


@pytest.mark.parametrize("name", MODULE_NAMES)
def test_module_validates(terraform: Terraform, initialised: dict[str, Path], name: str) -> None:
    result = terraform(initialised[name], "validate", "-json", "-no-color")
    assert '"valid": true' in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("name", MODULE_NAMES)
def test_terraform_test_files_pass(
    terraform: Terraform, initialised: dict[str, Path], name: str
) -> None:
    result = terraform(initialised[name], "test", "-no-color")
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert "0 failed" in result.stdout
    assert " passed, 0 failed" in result.stdout
