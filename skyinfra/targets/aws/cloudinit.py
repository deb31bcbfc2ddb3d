"""Render a node's cloud-init user data: one ``#cloud-config`` document (pure).

The document writes the topology and the node's identity, fetches the runtime wheel from S3
with the node's instance role (the document holds the object's plain address, never a
credential: staging.py says why), checks its sha256, runs the node bootstrap shared with the
local target, marks the node ready and (by default) installs an idle-shutdown timer.

The template is ``infra/templates/aws/cloud-init/user-data.yaml.j2``; the scripts it writes
to the node are ``infra/scripts/`` files (bootstrap-node.sh, provision.sh, idle-check.sh,
efa-env.sh), so each can be read and shellchecked on its own, embedded without their
whole-line comments (:func:`shell_without_comments`: EC2 takes 16 KB of user data, gzipped,
and the comments were a third of it); the Python ones byte for byte. Their values go beside
them: provision.sh sources ``provision-settings.sh``, idle-check.sh reads the environment its
systemd unit sets.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from skyinfra_runtime.spot import AWS_IMDS

from skyinfra import resources, templating
from skyinfra.errors import RenderError, SpecError
from skyinfra.targets.aws.spec import DEFAULT_IDLE_SHUTDOWN_MINUTES
from skyinfra.transport.bootstrap import NODE_ENV_FILE

TEMPLATE = "aws/cloud-init/user-data.yaml.j2"
# The scripts the user data writes to the node (infra/scripts/; the shell ones without their
# comment lines).
PROVISION_SCRIPT = "scripts/provision.sh"
IDLE_CHECK_SCRIPT = "scripts/idle-check.sh"
FETCH_SCRIPT = "scripts/fetch-s3-object.py"
# The node check bootstrap-node.sh runs last (--check-topology), and the EFA environment.
CHECK_SCRIPT = "scripts/check-node.py"
EFA_ENV_SCRIPT = "scripts/efa-env.sh"

# Where provision.sh leaves its outcome: `ready` (a timestamp) once the bootstrap finished,
# `failed` (the failing line and command) when it did not. The SSH transport reads both.
# The node directory (venv/, work/, pids/): the SSH transport's node root.
NODE_DIR = "/opt/skyinfra/node"
STATE_DIR = "/var/lib/skyinfra"
READY_MARKER = f"{STATE_DIR}/ready"
FAILED_MARKER = f"{STATE_DIR}/failed"
SCRIPT_DIR = "/opt/skyinfra"
# aws.recover (head.py): node 0's skyinfra, in a venv of its own under the node directory.
HEAD_DIR = "head"
HEAD_VENV = f"{HEAD_DIR}/venv"
# Where provision.sh puts the S3 wheelhouse's wheels (under SCRIPT_DIR).
WHEELHOUSE_DIR = "wheelhouse"
# cloud-init's copy of every module's and runcmd script's output on the node.
OUTPUT_LOG = "/var/log/cloud-init-output.log"
# How long the idle check counts a bootstrap that is still running (no ready or failed marker)
# as busy: past this a hung bootstrap no longer keeps the node alive (idle-check.sh).
PROVISION_MINUTES = 60

# A here-document's opening (not a here-string, <<<): its lines are data, comment-like or not.
_HEREDOC_RE = re.compile(r"<<-?\s*['\"]?[A-Za-z_]")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_WHEEL_RE = re.compile(r"^[A-Za-z0-9_.+-]+\.whl$")
_EXTRA_RE = re.compile(r"^[a-z0-9_]+$")
_VERSION_RE = re.compile(r"^[0-9][0-9a-z.+]*$")
_REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]+$")
# Directories go into the scripts unquoted.
_DIR_RE = re.compile(r"^/[A-Za-z0-9_./-]*$")
# Values that must never reach user data (it is readable by every process on the node
# through the instance metadata service, and shows in the console).
# How often a Spot node's job agents ask the metadata service for a notice (AWS suggests
# every 5 s; the notice gives about 120 s, and each second of it is time to save).
NOTICE_POLL_S = 2.0

_SECRET_PATTERNS = (
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"(?<![A-Za-z0-9/+=])aws_secret_access_key\s*[=:]", re.IGNORECASE),
)


@dataclass(frozen=True)
class NodeUserData:
    """What one node's user data needs, as plain values."""

    cluster_name: str
    node_index: int
    topology_json: str
    wheel_url: str
    wheel_sha256: str
    wheel_filename: str
    bootstrap_script: str
    # The staging bucket's region (the node signs its S3 GET for it).
    wheel_region: str = "us-east-1"
    jax_extra: str | None = "cuda12"
    # jax[extra]==jax_version (None: unpinned); the AWS target passes the spec's or the
    # operator's own version (skyinfra.targets.aws.spec.jax_requirement).
    jax_version: str | None = None
    # The uv the node installs first (the operator's version); "" installs none: pip.
    uv_version: str = ""
    python_packages: Sequence[str] = ()
    # The spec's default (on); 0 or None renders no idle timer.
    idle_shutdown_minutes: int | None = DEFAULT_IDLE_SHUTDOWN_MINUTES
    # aws.max_lifetime_hours in minutes: the node ends itself once up this long (None: never).
    max_lifetime_minutes: int | None = None
    ssh_user: str = "ubuntu"
    python: str = "python3"
    node_dir: str = "/opt/skyinfra/node"
    # Overridable so a test can run provision.sh outside /var/lib and /opt.
    state_dir: str = STATE_DIR
    script_dir: str = SCRIPT_DIR
    config_dir: str = "/etc/skyinfra"
    # aws.efa: the node's processes get what NCCL needs to use EFA (efa-env.sh).
    efa: bool = False
    # Checkpoints (issue 25): the node's checkpoint store, {"url", "region", "bucket_url"}
    # (checkpoint_store.node_settings); None writes none.
    checkpoints: dict[str, str] | None = None
    # A Spot node (issue 26): its job agents watch EC2's metadata service for an interruption
    # notice (skyinfra_runtime/spot.py reads notice.json); an On-Demand node gets none.
    spot: bool = False
    # aws.recover (issue 26): every node's authorized_keys lines for the cluster's own key
    # (head.py); node 0's skyinfra wheel (url, sha256, file name), installed into its head venv.
    authorized_keys: Sequence[str] = ()
    head_wheel: tuple[str, str, str] | None = None
    # A private network (issue 46): the S3 wheelhouse's index object (plain address, sha256;
    # wheelhouse.py). The node installs from it alone, offline, and asks no apt mirror.
    wheelhouse: tuple[str, str] | None = None
    forbidden_values: Iterable[str] = field(default=(), repr=False)


def default_bootstrap_script() -> str:
    """The node bootstrap the local target runs too (infra/scripts/bootstrap-node.sh)."""
    return resources.bootstrap_script()


def _check_wheel(params: NodeUserData) -> None:
    if not _SHA256_RE.match(params.wheel_sha256):
        raise RenderError("wheel_sha256", params.wheel_sha256, "64 lower-case hex digits")
    if not _WHEEL_RE.match(params.wheel_filename):
        raise RenderError(
            "wheel_filename", params.wheel_filename, "a wheel file name ending in .whl"
        )
    if not params.wheel_url.startswith("https://") and not params.wheel_url.startswith("http://"):
        raise RenderError("wheel_url", params.wheel_url, "an http(s) URL of the staged S3 object")
    if "?" in params.wheel_url or "#" in params.wheel_url:
        # A query string is where a presigned URL keeps its credential and token.
        raise RenderError(
            "wheel_url", "<redacted>", "the object's plain address, without a query string"
        )
    if not _REGION_RE.match(params.wheel_region):
        raise RenderError("wheel_region", params.wheel_region, "an AWS region such as us-east-1")


def _check_topology(topology_json: str) -> None:
    try:
        topology = json.loads(topology_json)
    except ValueError as err:
        raise RenderError("topology", topology_json[:80], f"JSON ({err})") from None
    if not isinstance(topology, dict) or topology.get("schema") != 1:
        raise RenderError(
            "topology", topology_json[:80], 'a schema 1 topology ({"schema": 1, ...})'
        )


def boot_topology(topology: dict[str, Any], node_index: int) -> dict[str, Any]:
    """The topology as the node gets it at boot: every field, but of the nodes only the head
    (node 0) and this one. The node check reads its own entry; `run` ships the full topology
    to every node before each run. Without the trim the user data would grow with the cluster
    (about 170 bytes a node) and pass EC2's 16 KB, even gzipped, at a few hundred nodes."""
    nodes = [n for n in topology.get("nodes") or [] if n.get("index") in (0, node_index)]
    return {**topology, "nodes": nodes}


def _check(params: NodeUserData) -> None:
    """Refuse a value skyinfra computed wrongly (RenderError: not the user's spec)."""
    _check_wheel(params)
    if params.head_wheel is not None:
        url, sha, filename = params.head_wheel
        _check_wheel(
            dataclasses.replace(params, wheel_url=url, wheel_sha256=sha, wheel_filename=filename)
        )
    if params.wheelhouse is not None:
        url, sha = params.wheelhouse
        _check_wheel(
            dataclasses.replace(params, wheel_url=url, wheel_sha256=sha, wheel_filename="i.whl")
        )
    for line in params.authorized_keys:
        if "\n" in line or "PRIVATE KEY" in line or not line.strip():
            raise RenderError("authorized_keys", "<redacted>", "public key lines")
    if params.jax_extra is not None and not _EXTRA_RE.match(params.jax_extra):
        raise RenderError("aws.jax_extra", params.jax_extra, "an extra name such as cuda12")
    for name in ("jax_version", "uv_version"):
        value = getattr(params, name)
        if value and not _VERSION_RE.match(value):
            raise RenderError(name, value, "a version such as 0.10.2")
    if params.idle_shutdown_minutes is not None and params.idle_shutdown_minutes < 0:
        raise RenderError(
            "aws.idle_shutdown_minutes", params.idle_shutdown_minutes, "minutes >= 1, or 0 for off"
        )
    for name in ("node_dir", "state_dir", "script_dir", "config_dir"):
        value = getattr(params, name)
        if not _DIR_RE.match(value):
            raise RenderError(name, value, "an absolute path of letters, digits and _./-")
    _check_topology(params.topology_json)
    if not params.bootstrap_script.startswith("#!"):
        raise RenderError(
            "bootstrap_script", params.bootstrap_script[:40], "a script starting with #!"
        )


def shell_without_comments(script: str) -> str:
    """A shell script without its whole-line comments, the first line (``#!``) kept: the same
    program to bash (tests/unit/aws/test_cloudinit.py compares bash's own reading of both).
    RenderError for a script with a here-document, whose ``#`` lines would be data."""
    if _HEREDOC_RE.search(script):
        raise RenderError(
            "script", script.splitlines()[0], "a shell script without here-documents (<<WORD)"
        )
    first, _, rest = script.partition("\n")
    kept = [line for line in rest.split("\n") if not line.lstrip().startswith("#")]
    return "\n".join([first, *kept])


def render_user_data(params: NodeUserData) -> str:
    """The node's ``#cloud-config`` document. Raises RenderError for a value the caller should
    never pass, SpecError for a secret the spec would leak into it."""
    _check(params)
    pin = f"=={params.jax_version}" if params.jax_version else ""
    packages = [f"jax[{params.jax_extra}]{pin}"] if params.jax_extra else []
    packages += list(params.python_packages)
    document = templating.render(
        TEMPLATE,
        dict(
            cluster_name=params.cluster_name,
            node_index=params.node_index,
            topology_json=json.dumps(
                boot_topology(json.loads(params.topology_json), params.node_index), sort_keys=True
            ),
            bootstrap_script=shell_without_comments(params.bootstrap_script),
            provision_script=shell_without_comments(resources.read_text(PROVISION_SCRIPT)),
            idle_check_script=shell_without_comments(resources.read_text(IDLE_CHECK_SCRIPT)),
            wheel_url=params.wheel_url,
            wheel_region=params.wheel_region,
            fetch_script=resources.read_text(FETCH_SCRIPT),
            check_script=resources.read_text(CHECK_SCRIPT),
            efa_env_script=(
                shell_without_comments(resources.read_text(EFA_ENV_SCRIPT)) if params.efa else None
            ),
            node_env_file=NODE_ENV_FILE,
            wheel_sha256=params.wheel_sha256,
            wheel_filename=params.wheel_filename,
            python=params.python,
            packages=packages,
            # No find-links but the fetched wheelhouse: JAX's CUDA wheels are on PyPI; Google's
            # release page is only for old jaxlib builds
            # (https://docs.jax.dev/en/latest/installation.html).
            find_links=[f"{params.script_dir}/{WHEELHOUSE_DIR}"] if params.wheelhouse else [],
            wheelhouse_url=params.wheelhouse[0] if params.wheelhouse else None,
            wheelhouse_sha256=params.wheelhouse[1] if params.wheelhouse else None,
            uv_version=params.uv_version,
            idle_shutdown_minutes=params.idle_shutdown_minutes or 0,
            max_lifetime_minutes=params.max_lifetime_minutes or 0,
            ssh_user=params.ssh_user,
            node_dir=params.node_dir,
            config_dir=params.config_dir,
            script_dir=params.script_dir,
            state_dir=params.state_dir,
            output_log=OUTPUT_LOG,
            provision_minutes=PROVISION_MINUTES,
            authorized_keys=list(params.authorized_keys),
            head_wheel_url=params.head_wheel[0] if params.head_wheel else None,
            head_wheel_sha256=params.head_wheel[1] if params.head_wheel else None,
            head_wheel_filename=params.head_wheel[2] if params.head_wheel else None,
            head_venv=HEAD_VENV,
            notice_json=(
                json.dumps({"imds": AWS_IMDS, "poll_s": NOTICE_POLL_S}, sort_keys=True) + "\n"
                if params.spot
                else None
            ),
            checkpoints_json=(
                None
                if params.checkpoints is None
                else json.dumps(params.checkpoints, sort_keys=True) + "\n"
            ),
        ),
    )
    # The scripts go in compressed: check them as text, too.
    assert_no_secret(document, params.forbidden_values)
    assert_no_secret(params.bootstrap_script, params.forbidden_values)
    return document


def assert_no_secret(document: str, forbidden_values: Iterable[str] = ()) -> None:
    """Refuse user data that holds a private key, an AWS secret key, or a caller-named secret."""
    for value in forbidden_values:
        if value and len(value) >= 8 and value in document:
            raise SpecError(
                "user_data",
                "<redacted>",
                "no secrets: a credential would end up in the instance's user data; "
                "remove it from the spec and hand it to the job at run time instead",
            )
    for pattern in _SECRET_PATTERNS:
        if pattern.search(document):
            raise SpecError(
                "user_data",
                "<redacted>",
                f"no secrets: the user data matches {pattern.pattern!r}; "
                "remove the key or credential from what the nodes receive",
            )
