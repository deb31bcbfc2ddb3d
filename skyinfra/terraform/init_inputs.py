"""When `terraform init` has nothing to do: the inputs it acts on are those of its last run.

init installs providers (by the lock file and required_providers), records module calls and
configures the backend. It reads only the configuration files, the dependency lock file, the
CLI config and a few variables; its results live under .terraform/. skyinfra ran it before
every plan, apply and `up` attempt, where it cost about a second (an AWS root: the provider's
hashes checked against the lock file) and did nothing when none of those had changed. The
engine now records a digest of those inputs beside init's results after each init, and skips
the next one while they are unchanged and every installed provider is still there (a plugin
cache that was emptied leaves .terraform/providers pointing at nothing).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

DATA_DIR = ".terraform"
# Written by skyinfra after a successful init, inside Terraform's data directory: it goes
# when .terraform goes, which is when init must run again anyway.
MARKER = "skyinfra-init-inputs.sha256"
# Files init reads: the configuration (root and local modules), the lock file, backend files.
CONFIG_SUFFIXES = (".tf", ".tf.json", ".tfbackend")
LOCK_FILE = ".terraform.lock.hcl"
# Variables that change what init installs or where it keeps it.
ENV_INPUTS = ("TF_CLI_CONFIG_FILE", "TF_DATA_DIR", "TF_WORKSPACE", "TF_PLUGIN_CACHE_DIR")


def _config_files(workdir: Path) -> list[Path]:
    found: list[Path] = []
    for root, dirs, files in os.walk(workdir):
        dirs[:] = sorted(d for d in dirs if d != DATA_DIR and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(CONFIG_SUFFIXES) or name == LOCK_FILE:
                found.append(Path(root) / name)
    return found


def digest(workdir: Path, env: Mapping[str, str], engine: Sequence[str]) -> str:
    """sha256 over what init acts on: each configuration file's path and bytes, the CLI config
    file's bytes, the variables in ENV_INPUTS and the engine's own command (its version)."""
    h = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        h.update(f"{label}\0{len(data)}\0".encode())
        h.update(data)

    for path in _config_files(workdir):
        add(f"file:{path.relative_to(workdir).as_posix()}", path.read_bytes())
    for name in ENV_INPUTS:
        add(f"env:{name}", env.get(name, "").encode())
    rc = env.get("TF_CLI_CONFIG_FILE")
    if rc and Path(rc).is_file():
        add("cli-config", Path(rc).read_bytes())
    add("engine", "\0".join(engine).encode())
    return h.hexdigest()


# In .terraform.lock.hcl: provider "registry.terraform.io/hashicorp/aws" { version = "5.100.0"
LOCKED_PROVIDER = re.compile(r'provider\s+"([^"]+)"\s*\{[^}]*?\bversion\s*=\s*"([^"]+)"', re.S)


def providers_installed(workdir: Path) -> bool:
    """Every provider the lock file names is installed: an executable terraform-provider-*
    in .terraform/providers/<address>/<version>/<os_arch>/ (links into the plugin cache are
    followed, so an emptied cache reads as not installed)."""
    try:
        lock = (workdir / LOCK_FILE).read_text()
    except FileNotFoundError:
        return True  # a configuration without providers has no lock file
    providers = workdir / DATA_DIR / "providers"
    for address, version in LOCKED_PROVIDER.findall(lock):
        binaries = list((providers / address / version).glob("*/terraform-provider-*"))
        if not binaries or not all(os.access(b, os.X_OK) for b in binaries):
            return False
    return True


def up_to_date(workdir: Path, current: str) -> bool:
    marker = workdir / DATA_DIR / MARKER
    try:
        recorded = marker.read_text().strip()
    except OSError:
        return False
    return recorded == current and providers_installed(workdir)


def record(workdir: Path, current: str) -> None:
    data_dir = workdir / DATA_DIR
    if data_dir.is_dir():
        (data_dir / MARKER).write_text(current + "\n")
