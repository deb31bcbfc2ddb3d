"""`terraform init` runs when what it acts on changed, and only then (init_inputs.py): real
Terraform with the AWS provider from the mirror; the engine is the product's, with its
commands recorded."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from skyinfra.terraform import EmbeddedTerraform
from skyinfra.terraform.config import MIRROR_ENV, PLUGIN_CACHE_ENV

ROOT = """
terraform {
  required_providers {
    aws = { source = "hashicorp/aws" }
  }
}

variable "greeting" {
  type    = string
  default = "hello"
}

output "greeting" {
  value = var.greeting
}
"""


class RecordingTerraform(EmbeddedTerraform):
    """The embedded engine, noting the Terraform commands it starts."""

    def __init__(self, workdir: Path, env: Mapping[str, str]) -> None:
        super().__init__(workdir, env=env)
        self.ran: list[str] = []

    def command(self, args: Sequence[str], **kwargs: object) -> tuple[int, str, str]:
        self.ran.append(args[0])
        return super().command(args, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workdir = tmp_path / "root"
    workdir.mkdir()
    (workdir / "main.tf").write_text(ROOT)
    return workdir


def engine_for(workdir: Path, plugin_mirror: Path, cache: Path) -> RecordingTerraform:
    import os

    env = {**os.environ, MIRROR_ENV: str(plugin_mirror), PLUGIN_CACHE_ENV: str(cache)}
    return RecordingTerraform(workdir, env)


def inits(engine: RecordingTerraform) -> int:
    ran = engine.ran.count("init")
    engine.ran.clear()
    return ran


def test_init_runs_again_only_when_its_inputs_change(
    root: Path, plugin_mirror: Path, tf_plugin_cache: Path
) -> None:
    engine = engine_for(root, plugin_mirror, tf_plugin_cache)
    engine.init()
    assert inits(engine) == 1
    assert (root / ".terraform.lock.hcl").is_file()

    engine.init()  # nothing changed: Terraform is not started
    assert inits(engine) == 0
    assert engine.plan().no_changes is False  # and the skipped init left a working root
    assert engine.ran == ["plan"]
    engine.ran.clear()

    # A changed configuration file, a new module call, the lock file: init runs again.
    (root / "main.tf").write_text(ROOT.replace('"hello"', '"hi"'))
    engine.init()
    assert inits(engine) == 1
    module = root / "modules" / "extra"
    module.mkdir(parents=True)
    (module / "main.tf").write_text('output "x" {\n  value = 1\n}\n')
    (root / "extra.tf").write_text('module "extra" {\n  source = "./modules/extra"\n}\n')
    engine.init()
    assert inits(engine) == 1
    assert engine.plan().no_changes is False  # the module was installed: plan would fail
    engine.ran.clear()
    lock = root / ".terraform.lock.hcl"
    lock.write_text(lock.read_text() + "\n")
    engine.init()
    assert inits(engine) == 1
    engine.init()
    assert inits(engine) == 0

    # Another plugin cache (CLI config) or engine settings: init runs again.
    other = engine_for(root, plugin_mirror, tf_plugin_cache.parent / "another-cache")
    other.init()
    assert inits(other) == 1

    # .terraform gone: init runs.
    shutil.rmtree(root / ".terraform")
    other.init()
    assert inits(other) == 1


def test_a_provider_gone_from_the_plugin_cache_is_installed_again(
    root: Path, plugin_mirror: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    engine = engine_for(root, plugin_mirror, cache)
    engine.init()
    assert inits(engine) == 1
    shutil.rmtree(cache / "registry.terraform.io")  # .terraform/providers now links to nothing
    engine.init()
    assert inits(engine) == 1
    assert engine.plan().no_changes is False
