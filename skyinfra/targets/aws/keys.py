"""The SSH key pair the nodes accept: the spec's private key file and its public key line."""

from __future__ import annotations

import re
from pathlib import Path

import paramiko

from skyinfra.errors import SpecError
from skyinfra.targets.aws.spec import AwsSpec, check_ssh_key_file

_PUBLIC_KEY_RE = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+")


def _public_key_of(private: Path, aws: AwsSpec) -> str:
    """The public key line: from ``<key>.pub`` when it is there, else derived by paramiko."""
    public_file = Path(f"{private}.pub")
    if public_file.is_file():
        lines = public_file.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        return lines[0].strip() if lines else ""
    try:
        key = paramiko.PKey.from_path(private)
    except (paramiko.SSHException, OSError, ValueError) as err:
        raise SpecError(
            "aws.ssh_key",
            aws.ssh_key,
            f"a private key paramiko can read, or its public key beside it as "
            f"{public_file.name} ({err})",
        ) from None
    return f"{key.get_name()} {key.get_base64()}"


def ssh_key_paths(aws: AwsSpec) -> tuple[Path, str]:
    """The private key file and its public key line; SpecError when the key is unusable."""
    private = check_ssh_key_file(aws)
    public = _public_key_of(private, aws)
    if not _PUBLIC_KEY_RE.match(public):
        raise SpecError(
            "aws.ssh_key",
            f"{private}.pub",
            "one OpenSSH public key line (ssh-ed25519 AAAA..., ssh-rsa AAAA... or ecdsa-sha2-...)",
        )
    return private, public
