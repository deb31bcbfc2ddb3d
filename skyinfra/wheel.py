"""The skyinfra-runtime wheel that every node installs, built in-process and reproducibly.

No source tree and no pip are needed: the wheel is assembled from the importable
``skyinfra_runtime`` package (wherever it is installed: a regular or an editable install, or a
checkout on ``sys.path``) and the distribution's metadata (:mod:`importlib.metadata`). The
archive is byte-for-byte deterministic (sorted entries, fixed timestamps and permissions,
stored uncompressed so that no zlib version enters the bytes, metadata written from a fixed
set of fields), so its sha256 depends only on the runtime's name, version, requirements, entry
points and files. That sha256 is what the node resources depend on: an unchanged runtime
never replaces nodes, even after the cache is wiped.

``SKYINFRA_RUNTIME_DIR`` (or the ``runtime_dir`` argument) builds from a runtime source tree
instead: ``pyproject.toml`` (its ``[project]`` table) and ``src/skyinfra_runtime/``. Tests use it
to install a tiny stand-in runtime on nodes; forks can use it to ship their own.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyinfra.errors import RuntimeWheelError

RUNTIME_DIST = "skyinfra-runtime"
RUNTIME_PACKAGE = "skyinfra_runtime"
RUNTIME_DIR_ENV = "SKYINFRA_RUNTIME_DIR"
OPERATOR_DIST = "skyinfra"
OPERATOR_PACKAGE = "skyinfra"
CACHE_ENV = "SKYINFRA_CACHE"
WHEEL_TAG = "py3-none-any"
# The earliest time a zip entry can carry; every entry gets it, with mode 0644.
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
_FILE_MODE = 0o100644 << 16
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class RuntimeWheel:
    path: Path
    sha256: str


@dataclass(frozen=True)
class RuntimeSource:
    """What goes into the wheel: metadata fields and the package folder."""

    name: str
    version: str
    package_dir: Path
    summary: str = ""
    requires_python: str | None = None
    requires_dist: tuple[str, ...] = ()
    # (group, name, value), e.g. ("console_scripts", "skyinfra-runtime", "pkg.mod:main")
    entry_points: tuple[tuple[str, str, str], ...] = ()

    @property
    def wheel_name(self) -> str:
        return f"{_escape(self.name)}-{_escape_version(self.version)}-{WHEEL_TAG}.whl"

    @property
    def dist_info(self) -> str:
        return f"{_escape(self.name)}-{_escape_version(self.version)}.dist-info"


def cache_root() -> Path:
    """skyinfra's cache on this machine: $SKYINFRA_CACHE, else ~/.cache/skyinfra."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "skyinfra")


def cache_dir() -> Path:
    return cache_root() / "wheels"


def _escape(name: str) -> str:
    # Binary distribution format: runs of -_. become one underscore.
    return re.sub(r"[-_.]+", "_", name).lower()


def _escape_version(version: str) -> str:
    return version.replace("-", "_")


def installed_source(
    dist_name: str = RUNTIME_DIST, package: str = RUNTIME_PACKAGE
) -> RuntimeSource:
    """The runtime this Python imports (or ``package`` of ``dist_name``: skyinfra itself, for
    a head that recovers jobs), with its installed distribution's metadata."""
    # Imported here: the local target imports this module (cache_root) for every command, and
    # importlib.metadata (email, zipfile, csv) is needed only to build the wheel.
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec else []
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if not locations or dist is None:
        raise RuntimeWheelError(
            f"cannot build the {dist_name} wheel: {dist_name} is not installed in this Python "
            f"({'no metadata' if locations else f'{package} does not import'}); "
            f"install it (`pip install {dist_name}`, the same version as skyinfra)"
            + (
                f" or set {RUNTIME_DIR_ENV} to a runtime source tree"
                if package == RUNTIME_PACKAGE
                else ""
            )
        )
    meta = dist.metadata

    def field(name: str) -> str | None:
        values = meta.get_all(name) or []
        return str(values[0]) if values else None

    return RuntimeSource(
        name=dist.name,
        version=dist.version,
        package_dir=Path(locations[0]),
        summary=field("Summary") or "",
        requires_python=field("Requires-Python"),
        requires_dist=tuple(dist.requires or ()),
        entry_points=tuple(sorted((ep.group, ep.name, ep.value) for ep in dist.entry_points)),
    )


def tree_source(runtime_dir: Path) -> RuntimeSource:
    """A runtime source tree: ``pyproject.toml``'s ``[project]`` and ``src/skyinfra_runtime``."""
    import tomllib

    pyproject = runtime_dir / "pyproject.toml"
    package_dir = runtime_dir / "src" / RUNTIME_PACKAGE
    if not pyproject.is_file() or not (package_dir / "__init__.py").is_file():
        raise RuntimeWheelError(
            f"cannot build the runtime wheel from {runtime_dir} ({RUNTIME_DIR_ENV}): it needs "
            f"pyproject.toml and src/{RUNTIME_PACKAGE}/__init__.py"
        )
    try:
        project: dict[str, Any] = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        name, version = str(project["name"]), str(project["version"])
    except (tomllib.TOMLDecodeError, KeyError) as err:
        raise RuntimeWheelError(
            f"cannot build the runtime wheel: {pyproject} needs a [project] table with name "
            f"and version ({err})"
        ) from None
    entry_points = [("console_scripts", k, v) for k, v in project.get("scripts", {}).items()]
    entry_points += [("gui_scripts", k, v) for k, v in project.get("gui-scripts", {}).items()]
    for group, table in project.get("entry-points", {}).items():
        entry_points += [(group, k, v) for k, v in table.items()]
    return RuntimeSource(
        name=name,
        version=version,
        package_dir=package_dir,
        summary=str(project.get("description", "")),
        requires_python=project.get("requires-python"),
        requires_dist=tuple(project.get("dependencies", ())),
        entry_points=tuple(sorted(entry_points)),
    )


def package_files(package_dir: Path) -> list[tuple[str, Path]]:
    """(name in the wheel, file) for every file of the package, sorted; byte code and hidden
    files (editor and OS leftovers) stay out."""
    found = []
    # os.walk follows a linked folder (skyinfra/_infra -> ../infra in a checkout), which
    # Path.rglob does not: its files go in as the package's own, as in a built wheel.
    for folder, _, names in os.walk(package_dir, followlinks=True):
        for name in names:
            path = Path(folder) / name
            rel = path.relative_to(package_dir)
            if (
                not path.is_file()
                or _SKIP_DIRS & set(rel.parts)
                or any(part.startswith(".") for part in rel.parts)
                or path.suffix in _SKIP_SUFFIXES
            ):
                continue
            found.append((f"{package_dir.name}/{rel.as_posix()}", path))
    return sorted(found)


def _metadata(source: RuntimeSource) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {source.name}", f"Version: {source.version}"]
    if source.summary:
        lines.append(f"Summary: {' '.join(source.summary.split())}")
    if source.requires_python:
        lines.append(f"Requires-Python: {source.requires_python}")
    lines += [f"Requires-Dist: {req}" for req in source.requires_dist]
    return "\n".join(lines) + "\n"


def _entry_points(entries: Iterable[tuple[str, str, str]]) -> str:
    out: list[str] = []
    for group in sorted({g for g, _, _ in entries}):
        out.append(f"[{group}]")
        out += [f"{name} = {value}" for g, name, value in sorted(entries) if g == group]
        out.append("")
    return "\n".join(out)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def wheel_bytes(source: RuntimeSource) -> bytes:
    """The wheel as bytes: the same source gives the same bytes, every time, anywhere."""
    entries: list[tuple[str, bytes]] = [
        (arcname, path.read_bytes()) for arcname, path in package_files(source.package_dir)
    ]
    if not any(name == f"{source.package_dir.name}/__init__.py" for name, _ in entries):
        raise RuntimeWheelError(
            f"cannot build the {source.name} wheel: {source.package_dir} has no __init__.py"
        )
    info = source.dist_info
    entries.append((f"{info}/METADATA", _metadata(source).encode()))
    entries.append(
        (
            f"{info}/WHEEL",
            (
                "Wheel-Version: 1.0\nGenerator: skyinfra.wheel\n"
                f"Root-Is-Purelib: true\nTag: {WHEEL_TAG}\n"
            ).encode(),
        )
    )
    if source.entry_points:
        entries.append((f"{info}/entry_points.txt", _entry_points(source.entry_points).encode()))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in entries:
        writer.writerow([name, _record_hash(data), len(data)])
    writer.writerow([f"{info}/RECORD", "", ""])
    entries.append((f"{info}/RECORD", record.getvalue().encode()))

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in entries:
            item = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
            item.external_attr = _FILE_MODE
            item.create_system = 3  # Unix, on every platform
            item.compress_type = zipfile.ZIP_STORED
            archive.writestr(item, data)
    return buffer.getvalue()


def build_runtime_wheel(runtime_dir: Path | None = None, cache: Path | None = None) -> RuntimeWheel:
    """Build (or find in the cache) the runtime wheel: ``<cache>/<sha256>/<wheel name>``.

    From ``runtime_dir``, else ``$SKYINFRA_RUNTIME_DIR``, else the installed runtime.
    """
    env_dir = os.environ.get(RUNTIME_DIR_ENV)
    chosen = runtime_dir or (Path(env_dir) if env_dir else None)
    source = tree_source(chosen) if chosen is not None else installed_source()
    return _cached(source, cache)


def build_operator_wheel(cache: Path | None = None) -> RuntimeWheel:
    """skyinfra's own wheel, from the installed package (its Terraform modules, templates and
    scripts inside), the same way: what a head that recovers jobs itself installs."""
    return _cached(installed_source(OPERATOR_DIST, OPERATOR_PACKAGE), cache)


def _cached(source: RuntimeSource, cache: Path | None) -> RuntimeWheel:
    data = wheel_bytes(source)
    sha = hashlib.sha256(data).hexdigest()
    target = (cache or cache_dir()) / sha / source.wheel_name
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == sha:
        return RuntimeWheel(target, sha)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    tmp.replace(target)  # atomic: a concurrent build writes the same bytes
    return RuntimeWheel(target, sha)
