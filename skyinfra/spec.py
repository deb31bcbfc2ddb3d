"""The cluster spec: what the user asks for, validated completely before anything is written.

Sources, later ones win: defaults < TOML file (``skyinfra.toml`` or ``--spec``) < CLI flags.
``load_spec`` returns a frozen :class:`ClusterSpec` or raises :class:`SpecError` naming the
field, the value and what would be valid. It is pure apart from reading the spec file.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import tomllib
from skyinfra_runtime.errors import PluginFlagError, PluginOptionError
from skyinfra_runtime.plugins import parse_plugin_flag as runtime_parse_plugin_flag
from skyinfra_runtime.plugins import validate_plugins
from skyinfra_runtime.topology import PluginRef

from skyinfra.errors import SpecError

PROVIDERS = ("local", "aws")
# The jax[EXTRA] every AWS node installs; "none" installs no jax (a torch-only cluster, or an
# image that brings its own).
NO_JAX = "none"
JAX_EXTRAS = ("cuda12", "cuda13", "cpu", NO_JAX)
MAX_LOCAL_NODES = 32
# The nodes module accepts 1..64 (fixed private addresses in one subnet); match it here so
# the error comes from the spec, before anything runs.
MAX_AWS_NODES = 64
# The private key `run` reaches AWS nodes with; its public half (<path>.pub) is installed.
DEFAULT_SSH_KEY = "~/.ssh/id_ed25519"
# Idle shutdown is on by default: a forgotten GPU node ends itself after an hour idle.
DEFAULT_IDLE_SHUTDOWN_MINUTES = 60
MIN_IDLE_SHUTDOWN_MINUTES = 5

_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$|^[a-z]$")
# A pip requirement without spaces or leading dash: keeps pip options and shell words out.
_PACKAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-\[\],<>=!~*+]*$")
_REGION_RE = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
_INSTANCE_TYPE_RE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")
_AMI_RE = re.compile(r"^ami-[0-9a-f]{8,17}$")
_SUBNET_RE = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_VPC_RE = re.compile(r"^vpc-[0-9a-f]{8,17}$")
# A file path on one line (no control characters); whether the key exists is checked when
# the AWS target renders, not here (validation stays pure).
_SSH_KEY_RE = re.compile(r"^[^\x00-\x1f\x7f]{1,4096}$")
_SSH_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")

TOP_LEVEL_KEYS = (
    "name",
    "provider",
    "nodes",
    "procs_per_node",
    "head_port",
    "plugins",
    "python_packages",
    "local",
    "aws",
)
LOCAL_KEYS = ("base_address", "python")
AWS_KEYS = (
    "region",
    "instance_type",
    "ami",
    "disk_gb",
    "ssh_cidrs",
    "ssh_key",
    "ssh_user",
    "subnet_id",
    "vpc_id",
    "placement_group",
    "efa",
    "idle_shutdown_minutes",
    "jax_extra",
)


# A plugin as the spec names it: the runtime's own type, so the topology carries it as is.
# Its options are JSON values (strings, numbers, booleans, lists, tables), checked against
# the runtime's plugin table (skyinfra_runtime.plugins.table).
PluginSpec = PluginRef


@dataclass(frozen=True)
class LocalSpec:
    base_address: str = "127.0.0.2"
    # None: the operator's own interpreter (sys.executable), resolved when rendering.
    python: str | None = None


@dataclass(frozen=True)
class AwsSpec:
    region: str
    instance_type: str
    ssh_cidrs: tuple[str, ...]
    ami: str | None = None
    disk_gb: int = 200
    # Path of the private key; the AWS target installs "<ssh_key>.pub" as the nodes' key pair.
    ssh_key: str = DEFAULT_SSH_KEY
    # None: the login user of the AMI (ubuntu for the Deep Learning AMI), looked up at `up`.
    ssh_user: str | None = None
    subnet_id: str | None = None
    vpc_id: str | None = None
    placement_group: bool = False
    efa: bool = False
    # Minutes without a skyinfra process before a node shuts itself down (and so terminates);
    # 0 turns the idle timer off.
    idle_shutdown_minutes: int = DEFAULT_IDLE_SHUTDOWN_MINUTES
    jax_extra: str = "cuda12"


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    provider: str
    nodes: int
    procs_per_node: int | str = 1
    head_port: int = 29500
    plugins: tuple[PluginSpec, ...] = ()
    python_packages: tuple[str, ...] = ()
    local: LocalSpec | None = None
    aws: AwsSpec | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- parsing helpers


def parse_plugin_flag(text: str, field_name: str = "plugins") -> dict[str, Any]:
    """``keras:backend=jax,x=y`` -> ``{"name": "keras", "options": {...}}`` (checked later).

    The runtime's reading of ``NAME[:key=value,...]`` (values that are JSON are read as JSON);
    a malformed flag is a SpecError naming ``field_name``.
    """
    try:
        ref = runtime_parse_plugin_flag(text)
    except PluginFlagError as err:
        raise SpecError(field_name, text, err.expected) from None
    return {"name": ref.name, "options": dict(ref.options)}


def read_spec_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SpecError("--spec", str(path), f"a readable TOML file ({err.strerror})") from err
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SpecError("--spec", str(path), f"valid TOML ({err})") from err


def merge_overrides(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Flags that were given (not None) replace the file's values."""
    merged = dict(base)
    for key, value in overrides.items():
        if value is not None:
            merged[key] = value
    return merged


def load_spec(
    spec_path: Path | None, overrides: Mapping[str, Any], *, default_path: Path | None = None
) -> ClusterSpec:
    """Read the spec file (explicit, else ``default_path`` when it exists) and apply flags."""
    raw: dict[str, Any] = {}
    if spec_path is not None:
        raw = read_spec_file(spec_path)
    elif default_path is not None and default_path.is_file():
        raw = read_spec_file(default_path)
    return validate_spec(merge_overrides(raw, overrides))


# ---------------------------------------------------------------- validation (pure)


def _reject_unknown(raw: Mapping[str, Any], allowed: Sequence[str], prefix: str) -> None:
    for key in raw:
        if key not in allowed:
            raise SpecError(f"{prefix}{key}", raw[key], f"one of the known keys {list(allowed)}")


def _int(raw: Mapping[str, Any], key: str, path: str, default: int, lo: int, hi: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise SpecError(path, value, f"an integer from {lo} to {hi}")
    return value


def _bool(raw: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(path, value, "true or false")
    return value


def _str(
    raw: Mapping[str, Any], key: str, path: str, pattern: re.Pattern[str], expected: str
) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not pattern.match(value):
        raise SpecError(path, value, expected)
    return value


def _plugins(value: Any) -> tuple[PluginSpec, ...]:
    """The spec's plugin list, checked by the runtime's plugin table (one set of rules)."""
    if not isinstance(value, list):
        raise SpecError("plugins", value, 'a list like ["jax", "keras:backend=jax"]')
    refs: list[PluginRef] = []
    for i, item in enumerate(value):
        path = f"plugins[{i}]"
        entry = parse_plugin_flag(item, path) if isinstance(item, str) else item
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise SpecError(path, item, 'a plugin name or a table {name = "...", options = {}}')
        _reject_unknown(entry, ("name", "options"), f"{path}.")
        refs.append(PluginRef(entry["name"], entry.get("options", {})))
    try:
        return validate_plugins(refs)
    except PluginOptionError as err:
        where = f"plugins[{err.index}]" + (f".{err.field}" if err.field else "")
        raise SpecError(where, err.value, err.expected) from None


def _packages(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise SpecError("python_packages", value, 'a list of pip requirements like ["numpy>=1.26"]')
    for i, item in enumerate(value):
        if not isinstance(item, str) or not _PACKAGE_RE.match(item):
            raise SpecError(
                f"python_packages[{i}]",
                item,
                "a pip requirement without spaces or leading '-', "
                "e.g. 'numpy>=1.26' or 'jax[cuda12]'",
            )
    return tuple(value)


def _local(raw: Any, nodes: int) -> LocalSpec:
    if not isinstance(raw, dict):
        raise SpecError("local", raw, "a table")
    _reject_unknown(raw, LOCAL_KEYS, "local.")
    base = raw.get("base_address", "127.0.0.2")
    try:
        first = ipaddress.IPv4Address(base)
    except (ipaddress.AddressValueError, ValueError):
        first = None
    loopback = ipaddress.IPv4Network("127.0.0.0/8")
    if first is None or first not in loopback or int(first) & 0xFF == 0:
        raise SpecError(
            "local.base_address", base, "an IPv4 address in 127.0.0.0/8, e.g. 127.0.0.2"
        )
    if ipaddress.IPv4Address(int(first) + nodes - 1) not in loopback or int(
        first
    ) + nodes - 1 >= int(ipaddress.IPv4Address("127.255.255.255")):
        raise SpecError(
            "local.base_address", base, f"room for {nodes} consecutive addresses in 127.0.0.0/8"
        )
    python = raw.get("python")
    if python is not None and (not isinstance(python, str) or not Path(python).is_file()):
        raise SpecError("local.python", python, "the path of an existing Python interpreter")
    return LocalSpec(base_address=str(first), python=python)


def _idle_minutes(raw: Mapping[str, Any]) -> int:
    value = raw.get("idle_shutdown_minutes", DEFAULT_IDLE_SHUTDOWN_MINUTES)
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not (value == 0 or MIN_IDLE_SHUTDOWN_MINUTES <= value <= 7 * 24 * 60)
    ):
        raise SpecError(
            "aws.idle_shutdown_minutes",
            value,
            f"0 (idle shutdown off) or minutes from {MIN_IDLE_SHUTDOWN_MINUTES} to {7 * 24 * 60}",
        )
    return value


def _aws(raw: Any) -> AwsSpec:
    if not isinstance(raw, dict):
        raise SpecError("aws", raw, "a table with at least region, instance_type and ssh_cidrs")
    _reject_unknown(raw, AWS_KEYS, "aws.")
    region = _str(raw, "region", "aws.region", _REGION_RE, "an AWS region like 'us-east-1'")
    if region is None:
        raise SpecError(
            "aws.region", None, "an AWS region like 'us-east-1' (required for provider aws)"
        )
    instance_type = _str(
        raw,
        "instance_type",
        "aws.instance_type",
        _INSTANCE_TYPE_RE,
        "an instance type like 'g5.xlarge'",
    )
    if instance_type is None:
        raise SpecError("aws.instance_type", None, "an instance type like 'g5.xlarge' (required)")
    cidrs = raw.get("ssh_cidrs")
    if not isinstance(cidrs, list) or not cidrs:
        raise SpecError(
            "aws.ssh_cidrs", cidrs, 'a non-empty list of CIDRs, e.g. ["203.0.113.4/32"]'
        )
    for i, cidr in enumerate(cidrs):
        try:
            ipaddress.ip_network(cidr, strict=True)
        except (TypeError, ValueError):
            raise SpecError(
                f"aws.ssh_cidrs[{i}]", cidr, "a CIDR with host bits zero, e.g. 203.0.113.4/32"
            ) from None
    jax_extra = raw.get("jax_extra", "cuda12")
    if jax_extra not in JAX_EXTRAS:
        raise SpecError("aws.jax_extra", jax_extra, f"one of {list(JAX_EXTRAS)}")
    return AwsSpec(
        region=region,
        instance_type=instance_type,
        ssh_cidrs=tuple(cidrs),
        ami=_str(
            raw, "ami", "aws.ami", _AMI_RE, "an AMI id like 'ami-0123456789abcdef0' or absent"
        ),
        disk_gb=_int(raw, "disk_gb", "aws.disk_gb", 200, 8, 16384),
        ssh_key=_str(
            raw,
            "ssh_key",
            "aws.ssh_key",
            _SSH_KEY_RE,
            "the path of an SSH private key, e.g. '~/.ssh/id_ed25519' (its .pub is installed)",
        )
        or DEFAULT_SSH_KEY,
        ssh_user=_str(raw, "ssh_user", "aws.ssh_user", _SSH_USER_RE, "a Unix user name"),
        subnet_id=_str(
            raw, "subnet_id", "aws.subnet_id", _SUBNET_RE, "a subnet id like 'subnet-0abc1234'"
        ),
        vpc_id=_str(raw, "vpc_id", "aws.vpc_id", _VPC_RE, "a VPC id like 'vpc-0abc1234'"),
        placement_group=_bool(raw, "placement_group", "aws.placement_group", False),
        efa=_bool(raw, "efa", "aws.efa", False),
        idle_shutdown_minutes=_idle_minutes(raw),
        jax_extra=jax_extra,
    )


def validate_spec(raw: Mapping[str, Any]) -> ClusterSpec:
    """Check every field; the first problem raises SpecError (exit 2)."""
    _reject_unknown(raw, TOP_LEVEL_KEYS, "")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise SpecError(
            "name",
            name,
            "1-32 characters: lowercase letters, digits and '-', starting with a letter, "
            "not ending with '-'",
        )
    provider = raw.get("provider", "local")
    if provider not in PROVIDERS:
        raise SpecError("provider", provider, f"one of {list(PROVIDERS)}")
    max_nodes = MAX_LOCAL_NODES if provider == "local" else MAX_AWS_NODES
    nodes = _int(raw, "nodes", "nodes", 1, 1, max_nodes)
    ppn = raw.get("procs_per_node", 1)
    if ppn != "auto" and (isinstance(ppn, bool) or not isinstance(ppn, int) or not 1 <= ppn <= 64):
        raise SpecError("procs_per_node", ppn, "an integer from 1 to 64, or 'auto'")
    head_port = _int(raw, "head_port", "head_port", 29500, 1024, 65534)
    plugins = _plugins(raw.get("plugins", []))
    packages = _packages(raw.get("python_packages", []))
    local: LocalSpec | None = None
    aws: AwsSpec | None = None
    if provider == "local":
        local = _local(raw.get("local", {}), nodes)
        if "aws" in raw:
            _aws(raw["aws"])  # still checked: a broken section is a mistake even if unused now
    else:
        aws = _aws(raw.get("aws"))
        if "local" in raw:
            raise SpecError("local", raw["local"], "no [local] table when provider is 'aws'")
    return ClusterSpec(
        name=name,
        provider=provider,
        nodes=nodes,
        procs_per_node=ppn,
        head_port=head_port,
        plugins=plugins,
        python_packages=packages,
        local=local,
        aws=aws,
    )
