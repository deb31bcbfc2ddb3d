"""An external ``terraform`` or ``tofu`` binary as the engine, through python-terraform.

Chosen by ``--terraform-bin PATH``, else ``SKYINFRA_TERRAFORM_BIN``, else ``engine = "..."`` in
the spec; none of them (or ``"embedded"``): the embedded Terraform (engine.py).

python-terraform builds the command lines (``Terraform.generate_cmd_string``, the options
its ``cmd()`` takes). Its ``destroy()`` passes ``-force``, which Terraform >= 0.15 rejects, so
destroy is ``apply -destroy -auto-approve`` with explicit flags. The commands themselves run
through the embedded engine's runner (engine.py), not python-terraform's ``cmd()``: that one
runs with the operator's environment as it is (so Terraform would call
checkpoint-api.hashicorp.com, and could not get the CLI config and settings of config.py),
waits for the whole output, and shares the operator's session, while a cluster's commands
must stream their JSON events live and stop gracefully on one SIGINT, whatever happens to
the operator's terminal.

A binary older than what the root module and its modules require (``required_version``) is
refused before anything runs, naming both.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path

from python_terraform import IsFlagged, Terraform

from skyinfra import resources
from skyinfra.errors import ConfigError, SpecError, TerraformError
from skyinfra.terraform.config import terraform_env
from skyinfra.terraform.engine import EmbeddedTerraform, EngineFactory, TerraformEngine
from skyinfra.terraform.events import EventHandler

ENGINE_ENV = "SKYINFRA_TERRAFORM_BIN"
EMBEDDED = "embedded"


class ExternalTerraform(EmbeddedTerraform):
    """A ``terraform``/``tofu`` binary run in ``workdir`` (satisfies TerraformEngine)."""

    def __init__(
        self,
        workdir: Path,
        binary: str,
        env: Mapping[str, str] | None = None,
        *,
        lock_timeout: str | None = None,
    ) -> None:
        super().__init__(workdir, env, lock_timeout=lock_timeout)
        self.binary = binary
        self._tf = Terraform(working_dir=str(self.workdir), terraform_bin_path=binary)
        self._version: str | None = None

    def _argv_prefix(self) -> list[str]:
        # Through the relay (_relay.py): the binary survives the operator's death, as the
        # embedded Terraform does (a Go program dies of SIGPIPE on a broken stdout).
        return [sys.executable, "-m", "skyinfra.terraform._relay", self.binary]

    def destroy(self, on_event: EventHandler | None = None) -> None:
        argv: list[str] = self._tf.generate_cmd_string(
            "apply",
            destroy=IsFlagged,
            input=False,
            no_color=IsFlagged,
            auto_approve=IsFlagged,
            lock_timeout=self._lock_timeout(),
        )
        self._json_command(argv[1:], "destroy", on_event)

    def version(self) -> str:
        if self._version is None:
            self._version = binary_version(self.binary, self._base_env)
        return self._version

    def describe(self) -> str:
        name = Path(self.binary).name
        return f"{name} {self.version()} ({self.binary})"


def binary_version(binary: str, env: Mapping[str, str] | None = None) -> str:
    """``BINARY version -json``'s version (Terraform and OpenTofu both say terraform_version),
    asked with the engine's environment (no version check over the network)."""
    argv = [binary, "version", "-json"]
    try:
        done = subprocess.run(
            argv,
            env=terraform_env(Path.cwd(), env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TerraformError(f"cannot run {binary}: {exc}", argv=argv) from None
    try:
        return str(json.loads(done.stdout)["terraform_version"])
    except (json.JSONDecodeError, KeyError, TypeError):
        raise TerraformError(
            f"{binary} did not say its version: is it terraform or tofu?",
            argv=argv,
            returncode=done.returncode,
            stderr=done.stderr or done.stdout,
        ) from None


def resolve_binary(value: str, field: str) -> str:
    """A binary's absolute path from a path or a name on PATH; an error naming ``field``."""
    found = shutil.which(value) if os.sep not in value else value
    if found is None or not (os.path.isfile(found) and os.access(found, os.X_OK)):
        expected = '"embedded", or the path (or name on PATH) of a terraform or tofu binary'
        if field == ENGINE_ENV:
            raise ConfigError(field, value, expected)
        raise SpecError(field, value, expected)
    return os.path.abspath(found)


def chosen_engine(flag: str | None, spec_engine: str | None) -> tuple[str | None, str]:
    """Which engine: (binary path, or None for the embedded one; where the choice came from).
    ``--terraform-bin`` wins over SKYINFRA_TERRAFORM_BIN, which wins over the spec."""
    for value, field in (
        (flag, "--terraform-bin"),
        (os.environ.get(ENGINE_ENV), ENGINE_ENV),
        (spec_engine, "engine"),
    ):
        if value is None or not value.strip():
            continue
        if value.strip() == EMBEDDED:
            return None, field
        return resolve_binary(value.strip(), field), field
    return None, "default"


# ------------------------------------------------------------------ required_version

_REQUIRED = re.compile(r'required_version\s*=\s*"([^"]+)"')
_CONSTRAINT = re.compile(r"^\s*(>=|<=|~>|!=|>|<|=)?\s*v?(\d+(?:\.\d+){0,2})\S*\s*$")


def _numbers(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _pad(version: tuple[int, ...]) -> tuple[int, int, int]:
    padded = (*version, 0, 0, 0)[:3]
    return padded[0], padded[1], padded[2]


def satisfies(version: str, constraint: str) -> bool:
    """Whether ``version`` meets a Terraform version constraint ("``>= 1.9, < 2.0``").
    https://developer.hashicorp.com/terraform/language/expressions/version-constraints"""
    have = _pad(_numbers(re.sub(r"[^0-9.].*$", "", version.lstrip("v")) or "0"))
    for part in constraint.split(","):
        match = _CONSTRAINT.match(part)
        if match is None:
            raise TerraformError(f"cannot read the version constraint {constraint!r}")
        op, text = match.group(1) or "=", match.group(2)
        given = _numbers(text)
        want = _pad(given)
        if op == "~>":  # the rightmost given component may grow
            upper = (*given[:-2], given[-2] + 1) if len(given) > 1 else (given[0] + 1,)
            ok = want <= have < _pad(upper)
        else:
            ok = {
                "=": have == want,
                "!=": have != want,
                ">": have > want,
                ">=": have >= want,
                "<": have < want,
                "<=": have <= want,
            }[op]
        if not ok:
            return False
    return True


def required_versions(provider: str) -> list[str]:
    """The ``required_version`` constraints of a target's root-module templates and of the
    modules they call (infra/templates/<provider>/root, infra/modules/<provider>)."""
    texts = [
        *resources.tree_texts(f"templates/{provider}/root", (".j2",)).values(),
        *resources.tree_texts(f"modules/{provider}", (".tf",)).values(),
    ]
    return sorted({c for text in texts for c in _REQUIRED.findall(text)})


def check_required_version(
    describe: str, version: str, constraints: Iterable[str], field: str = "--terraform-bin"
) -> None:
    """Refuse a binary whose version misses a constraint, before anything runs; the error
    names where the binary was chosen (``field``)."""
    for constraint in constraints:
        if not satisfies(version, constraint):
            raise ConfigError(
                field,
                f"{describe} {version}",
                f"a Terraform that meets the modules' required_version {constraint!r}",
            )


def engine_factory(
    flag: str | None, spec_engine: str | None, provider: str | None
) -> EngineFactory:
    """The engine a command drives. An external binary is asked its version now and refused
    when it is older than ``provider``'s modules require (None: no check)."""
    binary, field = chosen_engine(flag, spec_engine)
    if binary is None:
        return EmbeddedTerraform
    version = binary_version(binary)
    if provider is not None:
        check_required_version(binary, version, required_versions(provider), field)
    return partial(_external, binary=binary, version=version)


def _external(workdir: Path, *, binary: str, version: str) -> TerraformEngine:
    engine = ExternalTerraform(workdir, binary)
    engine._version = version
    return engine
