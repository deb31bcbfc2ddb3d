"""Which Terraform drives a cluster (--terraform-bin > SKYINFRA_TERRAFORM_BIN > the spec's
engine > embedded), and a binary older than the modules' required_version refused first."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from skyinfra.errors import ConfigError, SpecError
from skyinfra.terraform import EmbeddedTerraform
from skyinfra.terraform.external import (
    ENGINE_ENV,
    chosen_engine,
    engine_factory,
    required_versions,
    satisfies,
)
from tests.conftest import skyinfra_argv


@pytest.mark.parametrize(
    ("version", "constraint", "ok"),
    [
        ("1.11.4", ">= 1.9", True),
        ("1.8.5", ">= 1.9", False),
        ("1.9.0", ">= 1.9", True),
        ("1.11.4", ">= 1.5, < 2.0", True),
        ("2.0.0", ">= 1.5, < 2.0", False),
        ("1.11.4", "~> 1.11.0", True),
        ("1.12.0", "~> 1.11.0", False),
        ("1.12.0", "~> 1.11", True),
        ("2.0.0", "~> 1.11", False),
        ("1.6.0-beta1", ">= 1.6", True),
        ("1.6.0", "!= 1.6.0", False),
        ("1.6.0", "1.6.0", True),
    ],
)
def test_version_constraints(version: str, constraint: str, ok: bool) -> None:
    assert satisfies(version, constraint) is ok


def test_required_versions_come_from_the_shipped_modules() -> None:
    assert required_versions("local") == [">= 1.5"]
    assert ">= 1.9" in required_versions("aws")


def fake_binary(folder: Path, version: str) -> Path:
    """A `terraform` that answers `version -json` with ``version`` and fails anything else."""
    path = folder / "terraform"
    path.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = version ]; then\n'
        f'  echo \'{{"terraform_version": "{version}", "platform": "linux_amd64"}}\'\n'
        "  exit 0\nfi\n"
        f"echo ran >> {folder}/ran\nexit 1\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_an_old_binary_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENGINE_ENV, raising=False)
    old = fake_binary(tmp_path, "1.8.0")
    with pytest.raises(ConfigError) as err:
        engine_factory(str(old), None, "aws")
    assert "1.8.0" in str(err.value) and ">= 1.9" in str(err.value)
    assert str(old) in str(err.value)
    assert not (tmp_path / "ran").exists()
    # The local target's modules ask for less: the same binary is fine there.
    assert engine_factory(str(old), None, "local")(tmp_path).version() == "1.8.0"


def test_engine_choice_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flag = fake_binary(tmp_path, "1.11.0")
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    from_env = fake_binary(env_dir, "1.11.0")
    monkeypatch.delenv(ENGINE_ENV, raising=False)
    assert chosen_engine(None, None) == (None, "default")
    assert chosen_engine(None, "embedded") == (None, "engine")
    assert chosen_engine(None, str(flag)) == (str(flag), "engine")
    monkeypatch.setenv(ENGINE_ENV, str(from_env))
    assert chosen_engine(None, str(flag)) == (str(from_env), ENGINE_ENV)
    assert chosen_engine(str(flag), None) == (str(flag), "--terraform-bin")
    assert chosen_engine("embedded", None) == (None, "--terraform-bin")
    # A name is looked up on PATH.
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert chosen_engine("terraform", None) == (str(flag), "--terraform-bin")
    monkeypatch.delenv(ENGINE_ENV)
    assert engine_factory(None, None, "local") is EmbeddedTerraform


def test_a_missing_binary_names_where_it_was_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENGINE_ENV, raising=False)
    with pytest.raises(SpecError) as err:
        chosen_engine(None, str(tmp_path / "no-such-tofu"))
    assert err.value.field == "engine"
    with pytest.raises(SpecError) as err:
        chosen_engine("no-such-tofu-anywhere", None)
    assert err.value.field == "--terraform-bin"
    monkeypatch.setenv(ENGINE_ENV, "no-such-tofu-anywhere")
    with pytest.raises(ConfigError, match=ENGINE_ENV):
        chosen_engine(None, None)


def test_up_with_an_old_binary_exits_2_and_writes_nothing(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    old = fake_binary(tmp_path, "1.4.2")  # the local modules require >= 1.5
    done = subprocess.run(
        [*skyinfra_argv(), "up", "--name", "old", "--terraform-bin", str(old)],
        cwd=tmp_path,
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "invalid setting --terraform-bin" in done.stderr
    assert "1.4.2" in done.stderr and "required_version '>= 1.5'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / ".skyinfra").exists()
    assert not (tmp_path / "ran").exists()
