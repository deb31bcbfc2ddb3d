"""The environment and CLI config every Terraform command runs with.

Providers come from a filesystem mirror when SKYINFRA_TF_PROVIDER_MIRROR names one, else from
the registry; downloaded providers are cached (SKYINFRA_TF_PLUGIN_CACHE, default
~/.cache/skyinfra/terraform-plugins). The CLI config file is written beside that cache, named
by its content: never into a workspace or a module folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from skyinfra_runtime.rundirs import NODE_MARK_ENVS

from skyinfra.errors import TerraformError

# Environment variable naming a Terraform provider filesystem mirror (a directory holding
# registry.terraform.io/hashicorp/aws/<version>/<os_arch>/...). Never hard-coded.
MIRROR_ENV = "SKYINFRA_TF_PROVIDER_MIRROR"
PLUGIN_CACHE_ENV = "SKYINFRA_TF_PLUGIN_CACHE"


def cli_config_text(plugin_cache: Path, mirror: str | None) -> str:
    """Terraform CLI config: a plugin cache, and a filesystem mirror for providers if given."""
    text = f"plugin_cache_dir = {json.dumps(str(plugin_cache))}\n"
    if mirror:
        text += (
            "provider_installation {\n"
            f"  filesystem_mirror {{\n    path = {json.dumps(mirror)}\n  }}\n"
            "}\n"
        )
    return text


def provider_mirror(environ: Mapping[str, str] | None = None) -> Path | None:
    """The Terraform provider filesystem mirror named by SKYINFRA_TF_PROVIDER_MIRROR, or None.

    The one place that reads the setting: the engine and the tests both ask here. A value
    that is not a directory is an error now, not an obscure "provider not found" from init.
    """
    env = os.environ if environ is None else environ
    value = env.get(MIRROR_ENV, "").strip()
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        raise TerraformError(
            f"{MIRROR_ENV}={value!r} is not a directory: point it at a Terraform provider "
            "filesystem mirror (a folder holding registry.terraform.io/<namespace>/<name>/...), "
            "or unset it to install providers from the registry"
        )
    return path.absolute()


def terraform_env(workdir: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every Terraform command runs with (writes the CLI config file)."""
    env = dict(os.environ if base is None else base)
    cache = Path(
        env.get(PLUGIN_CACHE_ENV) or Path.home() / ".cache" / "skyinfra" / "terraform-plugins"
    )
    cache.mkdir(parents=True, exist_ok=True)
    mirror = provider_mirror(env)
    text = cli_config_text(cache, str(mirror) if mirror else None)
    # Kept beside the plugin cache, named by content: never written into a workspace or a
    # module folder, and concurrent commands with the same settings share one file.
    rc = cache.parent / f"terraformrc-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    if not rc.is_file() or rc.read_text() != text:
        tmp = rc.with_name(f"{rc.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(rc)
    env.update(
        TF_CLI_CONFIG_FILE=str(rc),
        TF_IN_AUTOMATION="1",  # no "run terraform apply next" hints in output
        TF_INPUT="0",  # never wait for a prompt
        CHECKPOINT_DISABLE="1",  # no version check over the network
        NO_COLOR="1",
    )
    env.pop("TF_CLI_ARGS", None)
    # The marks of a node's processes: a command started from inside a node must not pass
    # them to every node's bootstrap.
    for mark in NODE_MARK_ENVS:
        env.pop(mark, None)
    return env
