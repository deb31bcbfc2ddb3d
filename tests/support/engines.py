"""Both engines for the contract tests: the embedded Terraform, and an external binary driven
through python-terraform: the `terraform` on PATH, or where there is none a forwarding
executable to the embedded Terraform, so that the external engine's tests never skip."""

from __future__ import annotations

import shlex
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

from skyinfra.terraform import EmbeddedTerraform, TerraformEngine
from skyinfra.terraform.engine import embedded_argv
from skyinfra.terraform.external import ExternalTerraform

ENGINES = ("embedded", "external")


def forwarding_terraform(folder: Path) -> Path:
    """An executable ``terraform`` in ``folder`` that runs the embedded Terraform."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "terraform"
    path.write_text(f'#!/bin/sh\nexec {shlex.join(embedded_argv())} "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP)
    return path


def terraform_binary(scratch: Path) -> str:
    """The external binary the tests drive: PATH's terraform, else a forwarding one."""
    return shutil.which("terraform") or str(forwarding_terraform(scratch / "forwarding-bin"))


def make_engine(
    kind: str, workdir: Path, binary: str, env: Mapping[str, str] | None = None
) -> TerraformEngine:
    if kind == "embedded":
        return EmbeddedTerraform(workdir, env=env)
    return ExternalTerraform(workdir, binary, env=env)
