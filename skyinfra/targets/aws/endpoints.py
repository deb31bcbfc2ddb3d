"""Point boto3 and the rendered provider block at an AWS API emulator (moto, LocalStack).

Set ``SKYINFRA_AWS_ENDPOINT_URL=http://127.0.0.1:5000`` and every AWS call skyinfra makes, from
Python and from Terraform, goes there instead of AWS.

An emulator's instances are records, not machines: the addresses it hands out (public 54.x,
private 10.x) belong to nobody here, so in emulator mode skyinfra never dials them. A node is
reached only through ``SKYINFRA_AWS_EMULATED_NODES``, which maps node names to an sshd that
stands in for the node (and, optionally, a folder its paths live under); an unmapped node
reads as unreachable without any connection attempt.
"""

from __future__ import annotations

import ipaddress
import json
import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from skyinfra.errors import ConfigError

ENDPOINT_ENV_VAR = "SKYINFRA_AWS_ENDPOINT_URL"
EMULATED_NODES_ENV_VAR = "SKYINFRA_AWS_EMULATED_NODES"

# In emulator mode the rendered root module points the provider at the emulator through a
# shared config file of its own (the file, and the profile in it, that its provider block
# names), not an `endpoints {}` block: see emulator_config_text.
EMULATOR_CONFIG_FILE = "aws-emulator.config"
EMULATOR_PROFILE = "skyinfra-emulator"

# Emulators accept any credentials; these are the values LocalStack documents and moto
# accepts. They are placeholders, never secrets.
EMULATOR_ACCESS_KEY = "test"
EMULATOR_SECRET_KEY = "test"


@dataclass(frozen=True)
class Emulator:
    """An AWS API emulator reachable at ``url``."""

    url: str
    env_var: str = ENDPOINT_ENV_VAR
    access_key: str = EMULATOR_ACCESS_KEY
    secret_key: str = EMULATOR_SECRET_KEY


def parse_endpoint_url(value: str) -> str:
    """Check an endpoint override and return it without a trailing slash."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            ENDPOINT_ENV_VAR,
            value,
            "an http(s) URL of an AWS API emulator, e.g. http://127.0.0.1:5000",
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(ENDPOINT_ENV_VAR, value, "a URL without path, query or fragment")
    return f"{parts.scheme}://{parts.netloc}"


def emulator_from_env(environ: Mapping[str, str] | None = None) -> Emulator | None:
    """The emulator named by SKYINFRA_AWS_ENDPOINT_URL, or None to talk to AWS itself."""
    env = os.environ if environ is None else environ
    value = env.get(ENDPOINT_ENV_VAR, "")
    if not value.strip():
        return None
    return Emulator(url=parse_endpoint_url(value))


def emulator_config_text(emulator: Emulator) -> str:
    """The root module's AWS config file in emulator mode: one profile whose ``endpoint_url``
    (the SDKs' standard setting, AWS SDKs and Tools reference guide, "Service-specific
    endpoints") sends every service's API to the emulator.

    The provider's ``endpoints {}`` block would do the same, but hashicorp/aws 5.100 spends
    about 1.2 s of CPU validating that block (some 250 attributes) in every provider process,
    and Terraform starts three for a plan: an emulated `up` and `down` spent 21 s of CPU in
    Terraform and the provider with the block and 8 s with this file (same root module,
    moto on loopback, 2-core VM)."""
    return (
        f"# Emulator mode ({emulator.env_var}): every AWS API of this root module goes to\n"
        f"# {emulator.url}. Written by skyinfra; not read outside this module.\n"
        f"[profile {EMULATOR_PROFILE}]\n"
        f"endpoint_url = {emulator.url}\n"
    )


def boto3_client_kwargs(region: str, emulator: Emulator | None) -> dict[str, Any]:
    """Keyword arguments for ``boto3.client(service, **kwargs)`` / ``session.client``."""
    kwargs: dict[str, Any] = {"region_name": region}
    if emulator is not None:
        from botocore.config import Config

        kwargs["endpoint_url"] = emulator.url
        # Emulators serve S3 on one host, so bucket names go in the path, not the hostname.
        kwargs["config"] = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2})
    return kwargs


@dataclass(frozen=True)
class EmulatedNode:
    """Where an emulated node is reached: an sshd standing in for it, and a folder prefixed
    to every path of the node (empty: the machine's own /opt, /var/lib)."""

    host: str
    port: int
    root: str = ""


_EMULATED_NODES_EXAMPLE = (
    '{"node-0": {"ssh": "127.0.0.1:2222", "root": "/tmp/emulated/node-0"}, '
    '"node-1": "127.0.0.1:2223"}'
)


def _ssh_address(name: str, value: object) -> tuple[str, int]:
    text = value if isinstance(value, str) else ""
    host, _, port_text = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(host)
        port = int(port_text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise ConfigError(
            f"{EMULATED_NODES_ENV_VAR}[{name!r}].ssh",
            value,
            "IP:PORT of an sshd standing in for the node, e.g. 127.0.0.1:2222",
        )
    return host, port


def emulated_nodes_from_env(environ: Mapping[str, str] | None = None) -> dict[str, EmulatedNode]:
    """SKYINFRA_AWS_EMULATED_NODES: node name -> where to reach it (empty when unset).

    The value is a JSON object; each node maps to ``"IP:PORT"`` or to
    ``{"ssh": "IP:PORT", "root": "/abs/folder"}``.
    """
    env = os.environ if environ is None else environ
    text = env.get(EMULATED_NODES_ENV_VAR, "").strip()
    if not text:
        return {}
    try:
        raw = json.loads(text)
    except ValueError as err:
        raise ConfigError(
            EMULATED_NODES_ENV_VAR,
            text[:80],
            f"a JSON object ({err}), e.g. {_EMULATED_NODES_EXAMPLE}",
        ) from None
    if not isinstance(raw, dict):
        raise ConfigError(
            EMULATED_NODES_ENV_VAR, text[:80], f"a JSON object, e.g. {_EMULATED_NODES_EXAMPLE}"
        )
    nodes: dict[str, EmulatedNode] = {}
    for name, value in raw.items():
        entry = value if isinstance(value, dict) else {"ssh": value}
        unknown = sorted(set(entry) - {"ssh", "root"})
        if unknown:
            raise ConfigError(
                f"{EMULATED_NODES_ENV_VAR}[{name!r}].{unknown[0]}",
                entry[unknown[0]],
                "only the keys ssh and root",
            )
        host, port = _ssh_address(name, entry.get("ssh"))
        root = entry.get("root", "")
        if not isinstance(root, str) or (
            root and (not posixpath.isabs(root) or root != posixpath.normpath(root))
        ):
            raise ConfigError(
                f"{EMULATED_NODES_ENV_VAR}[{name!r}].root",
                root,
                "an absolute, normalised folder path (no trailing '/'), or absent",
            )
        nodes[str(name)] = EmulatedNode(host=host, port=port, root=root)
    return nodes
