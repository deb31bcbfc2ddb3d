"""Static checks of the AWS modules with real Terraform (the product's engine): fmt, validate,
`terraform test`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.aws import MODULES_DIR, TerraformFactory

MODULE_NAMES = ("network", "security", "nodes", "bastion")


def test_modules_are_fmt_clean(terraform: TerraformFactory) -> None:
    code, out, err = terraform(MODULES_DIR).command(
        ["fmt", "-check", "-recursive", "-diff", "-no-color"]
    )
    assert code == 0, out + err


@pytest.fixture(scope="module")
def initialised(
    terraform: TerraformFactory, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Each module copied out of the tree (no .terraform in the repo) and initialised."""
    base = tmp_path_factory.mktemp("modules")
    dirs = {}
    for name in MODULE_NAMES:
        target = base / name
        shutil.copytree(MODULES_DIR / name, target)
        code, out, err = terraform(target).command(
            ["init", "-backend=false", "-input=false", "-no-color"]
        )
        assert code == 0, out + err
        dirs[name] = target
    return dirs


@pytest.mark.parametrize("name", MODULE_NAMES)
def test_module_validates(
    terraform: TerraformFactory, initialised: dict[str, Path], name: str
) -> None:
    result = terraform(initialised[name]).validate()
    assert result["valid"] is True, json.dumps(result["diagnostics"])


@pytest.mark.parametrize("name", MODULE_NAMES)
def test_terraform_test_files_pass(
    terraform: TerraformFactory, initialised: dict[str, Path], name: str
) -> None:
    code, out, err = terraform(initialised[name]).command(["test", "-no-color"])
    assert code == 0, out[-6000:] + err[-3000:]
    assert "0 failed" in out
    assert " passed, 0 failed" in out
