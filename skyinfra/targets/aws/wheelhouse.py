"""The S3 wheelhouse of a private network's nodes (issue 46), its pure core.

A private subnet without NAT reaches S3 through its gateway endpoint and nothing else, so the
nodes cannot ask a package index. The operator downloads wheels of everything the nodes
install besides the runtime wheel (which is staged per workspace as before): uv itself, the
``jax[EXTRA]`` requirement and ``python_packages``, for the nodes' platform (the Deep Learning
AMI's Python and glibc, the instance type's architecture), and stages them in the account's
staging bucket under a content address: :func:`wheelhouse_key` of the sorted requirement set,
the Python version and the platform. Clusters of one account and region with the same
requirements share it; it is uploaded once (the index object, written last, says it is
complete). The nodes fetch the index and the wheels with their role through the endpoint
(fetch-s3-object.py --wheelhouse) and install with uv, offline, from that folder alone.

The index object's JSON (:class:`WheelhouseIndex`) is the one contract with the node side;
fetch-s3-object.py reads its ``files`` (name, sha256) and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from skyinfra.errors import SpecError

# Under the staging bucket: never a workspace's prefix (<cluster>/<workspace id>/), as a
# cluster's name cannot start with "_".
PREFIX = "_wheelhouse/"
INDEX_NAME = "index.json"
SCHEMA = 1
# The Deep Learning AMI skyinfra launches (preflight.DLAMI_PARAMETER): Ubuntu 24.04, whose
# python3 is 3.12 and whose glibc is 2.39. An aws.ami of another distribution must match it.
NODE_PYTHON = "3.12"
NODE_GLIBC = (2, 39)
# EC2's architecture names -> the wheel platform's machine.
_MACHINES = {"x86_64": "x86_64", "arm64": "aarch64"}
# manylinux's legacy names for glibc 2.17, 2.12 and 2.5 (PEP 600).
_LEGACY = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
_NO_MATCH = re.compile(r"No matching distribution found for (\S+)")


@dataclass(frozen=True)
class NodePlatform:
    """What a wheel must be built for to install on the nodes."""

    python: str = NODE_PYTHON
    machine: str = "x86_64"
    glibc: tuple[int, int] = NODE_GLIBC

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    @property
    def name(self) -> str:
        return f"{self.abi} manylinux_{self.glibc[0]}_{self.glibc[1]}_{self.machine}"

    def platform_tags(self) -> list[str]:
        """Every manylinux tag this glibc runs, newest first: pip's --platform takes only the
        tags it is given (it widens manylinux2014 and manylinux2010, never manylinux_2_X)."""
        major, minor = self.glibc
        tags = []
        for glibc_minor in range(minor, 4, -1):
            tags.append(f"manylinux_{major}_{glibc_minor}_{self.machine}")
            if glibc_minor in _LEGACY:
                tags.append(f"{_LEGACY[glibc_minor]}_{self.machine}")
        return tags


def node_platform(architectures: Sequence[str]) -> NodePlatform:
    """The nodes' platform for the instance type's EC2 architectures (x86_64 first)."""
    for arch in ("x86_64", "arm64"):
        if arch in architectures or (not architectures and arch == "x86_64"):
            return NodePlatform(machine=_MACHINES[arch])
    raise SpecError(
        "aws.instance_type",
        "/".join(architectures),
        "an x86_64 or arm64 instance type: the S3 wheelhouse has wheels for those only",
    )


def requirement_set(
    jax: str | None, python_packages: Iterable[str], uv_version: str
) -> tuple[str, ...]:
    """What the wheelhouse holds wheels for, sorted and without repeats (the content address
    does not move with the spec's order)."""
    found = {" ".join(p.split()) for p in python_packages if p.strip()}
    if jax:
        found.add(jax)
    found.add(f"uv=={uv_version}" if uv_version else "uv")
    return tuple(sorted(found))


def wheelhouse_key(requirements: Sequence[str], platform: NodePlatform) -> str:
    """The content address: sha256 of the sorted requirements, the Python and the platform."""
    material = json.dumps(
        {
            "requirements": sorted(requirements),
            "python": platform.python,
            "platform": platform.name,
        },
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()


def wheelhouse_prefix(key: str) -> str:
    return f"{PREFIX}{key}/"


@dataclass(frozen=True)
class WheelFile:
    name: str
    sha256: str
    size: int


@dataclass(frozen=True)
class WheelhouseIndex:
    """The index object: what the wheelhouse was built for and every wheel in it."""

    key: str
    requirements: tuple[str, ...]
    platform: str
    files: tuple[WheelFile, ...]
    schema: int = SCHEMA

    def to_json(self) -> str:
        return (
            json.dumps(
                {
                    "schema": self.schema,
                    "key": self.key,
                    "requirements": list(self.requirements),
                    "platform": self.platform,
                    "files": [
                        {"name": f.name, "sha256": f.sha256, "size": f.size} for f in self.files
                    ],
                },
                indent=1,
                sort_keys=True,
            )
            + "\n"
        )

    @classmethod
    def from_json(cls, text: str) -> WheelhouseIndex:
        raw: dict[str, Any] = json.loads(text)
        return cls(
            key=str(raw["key"]),
            requirements=tuple(raw["requirements"]),
            platform=str(raw["platform"]),
            files=tuple(
                WheelFile(str(f["name"]), str(f["sha256"]), int(f["size"])) for f in raw["files"]
            ),
            schema=int(raw["schema"]),
        )

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class StagedWheelhouse:
    """Where a wheelhouse is (its index object's plain address and digest, for the user data)
    and what this `up` uploaded for it (nothing when it was there already)."""

    bucket: str
    prefix: str
    index_url: str
    index_sha256: str
    index: WheelhouseIndex
    uploaded: tuple[str, ...] = ()

    @property
    def s3_url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def download_command(
    python: str, requirements: Sequence[str], platform: NodePlatform, dest: str
) -> list[str]:
    """pip's download of wheels only, for the nodes' platform. Where it looks is pip's own
    configuration (pip.conf, PIP_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX): a mirror works."""
    command = [python, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
    command += ["--only-binary=:all:", "--implementation", "cp"]
    command += ["--python-version", platform.python, "--abi", platform.abi]
    for tag in platform.platform_tags():
        command += ["--platform", tag]
    return [*command, "--dest", dest, *requirements]


def missing_wheel_error(
    pip_output: str, requirements: Sequence[str], platform: NodePlatform, fields: dict[str, str]
) -> SpecError:
    """The error for a download that found no wheel: the requirement pip names (one of the
    spec's, or a dependency of them), under the spec field it came from (``fields``:
    requirement -> field), and what would be valid."""
    found = _NO_MATCH.search(pip_output)
    missing = found.group(1) if found else None
    field = "python_packages"
    if missing is not None:
        for requirement, name in fields.items():
            if _project(requirement) == _project(missing):
                field = name
    where = f"no wheel for the nodes' platform ({platform.name})"
    if missing is None:
        last = pip_output.strip().splitlines()[-1:] or ["pip said nothing"]
        return SpecError(field, ", ".join(requirements), f"requirements with wheels: {last[0]}")
    hint = (
        "a version with such a wheel (a private network's nodes install from the S3 "
        "wheelhouse only, never build from source), or leave it out"
    )
    if field == "python_packages" and not any(
        _project(r) == _project(missing) for r in requirements
    ):
        needed_by = f"a dependency of {list(requirements)}"
        return SpecError(field, missing, f"{hint}: {needed_by} has {where}")
    return SpecError(field, missing, f"{hint}: it has {where}")


def _project(requirement: str) -> str:
    """The project name of a requirement, normalized (PEP 503)."""
    name = re.split(r"[\s\[<>=!~;@]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()
