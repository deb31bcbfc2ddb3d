"""Build the skyinfra-runtime wheel from runtime/, cached by a hash of its sources.

The hash (not the wheel file's, which embeds timestamps) is what the node resources
depend on: an unchanged runtime/ never replaces nodes, even after the cache is wiped.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from skyinfra.errors import CommandError

# SKYINFRA_RUNTIME_DIR lets tests (and forks) build the node runtime from another tree.
RUNTIME_DIR = Path(
    os.environ.get("SKYINFRA_RUNTIME_DIR") or Path(__file__).resolve().parent.parent / "runtime"
)
CACHE_ENV = "SKYINFRA_CACHE"
_SKIP_PARTS = {"__pycache__", "build", "dist", ".pytest_cache", ".mypy_cache"}


@dataclass(frozen=True)
class RuntimeWheel:
    path: Path
    source_sha256: str


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "skyinfra") / "wheels"


def source_hash(runtime_dir: Path = RUNTIME_DIR) -> str:
    """sha256 over the relative path and bytes of every source file, in sorted order."""
    digest = hashlib.sha256()
    files = sorted(
        p
        for p in runtime_dir.rglob("*")
        if p.is_file()
        and not (_SKIP_PARTS & set(p.relative_to(runtime_dir).parts))
        and not any(part.endswith(".egg-info") for part in p.relative_to(runtime_dir).parts)
        and p.suffix not in (".pyc", ".whl")
    )
    for path in files:
        digest.update(str(path.relative_to(runtime_dir)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def build_runtime_wheel(runtime_dir: Path = RUNTIME_DIR, cache: Path | None = None) -> RuntimeWheel:
    if not (runtime_dir / "pyproject.toml").is_file():
        raise CommandError(
            f"cannot build the runtime wheel: {runtime_dir}/pyproject.toml is missing"
        )
    sha = source_hash(runtime_dir)
    target = (cache or cache_dir()) / sha
    wheels = sorted(target.glob("skyinfra_runtime-*.whl")) if target.is_dir() else []
    if wheels:
        return RuntimeWheel(wheels[0], sha)
    tmp = target.with_name(f"{sha}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    argv = [
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
        "--quiet", "--disable-pip-version-check", "-w", str(tmp), str(runtime_dir),
    ]  # fmt: skip
    # pip writes build/ and *.egg-info into the source tree; a copy keeps runtime/ clean.
    src_copy = tmp / "src-copy"
    shutil.copytree(
        runtime_dir, src_copy, ignore=shutil.ignore_patterns(*_SKIP_PARTS, "*.egg-info")
    )
    argv[-1] = str(src_copy)
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CommandError(
            "building the skyinfra-runtime wheel failed",
            argv=argv,
            returncode=proc.returncode,
            stderr=proc.stderr,
        )
    shutil.rmtree(src_copy)
    try:
        tmp.replace(target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process won the race; use theirs
    wheels = sorted(target.glob("skyinfra_runtime-*.whl"))
    if not wheels:
        raise CommandError(f"pip wheel produced no skyinfra_runtime wheel in {target}", argv=argv)
    return RuntimeWheel(wheels[0], sha)
