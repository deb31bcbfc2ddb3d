"""What `skyinfra run` leaves out of the copy of the working directory: the defaults below,
the patterns in ``.skyinfraignore``, and skyinfra's own workspaces when they lie inside it.

Patterns are gitignore-like: a pattern without ``/`` matches a file or directory name at any
depth, one with ``/`` matches the path from the project's root; ``*`` and ``?`` are
wildcards. A line ``!PATTERN`` takes back what an earlier pattern (a default included) left
out: the last matching line decides. As in git, a file inside a directory that is left out
cannot be taken back without taking back the directory (``!.aws`` sends all of ``.aws/``).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Sequence
from pathlib import Path

IGNORE_FILE = ".skyinfraignore"
# Never shipped: VCS data, environments, caches, and skyinfra's own workspaces.
BUILD_IGNORES = (
    ".git",
    ".venv*",  # .venv, and the .venv-<tool> environments beside it
    "venv",
    ".skyinfra",
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".mypy_cache",
)
# Secrets and key material: every node (and on a cloud, every disk snapshot of it) would hold
# a copy, and training code does not need them. `!PATTERN` in .skyinfraignore sends one.
SECRET_IGNORES = (
    # dotenv files (API keys, tokens): .env, .env.local, .env.production, ...
    ".env",
    ".env.*",
    # SSH: a home directory's .ssh/, and private keys wherever they lie
    ".ssh",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    # cloud and cluster credentials: AWS, GCP, Azure, Kubernetes, Docker registries
    ".aws",
    ".gcp",
    ".config/gcloud",
    ".azure",
    ".kube",
    ".docker",
    "credentials*.json",
    "client_secret*.json",
    # private keys and key stores (TLS, signing)
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    ".gnupg",
    # package index and git credentials
    ".netrc",
    "_netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    ".pgpass",
    # Terraform state holds every secret of the resources it manages
    "*.tfstate",
    "*.tfstate.*",
)
DEFAULT_IGNORES = BUILD_IGNORES + SECRET_IGNORES


def read_ignore_patterns(src: Path) -> list[str]:
    """The defaults, then ``.skyinfraignore``'s lines in order (``!PATTERN`` kept as is)."""
    patterns = list(DEFAULT_IGNORES)
    ignore_file = src / IGNORE_FILE
    if ignore_file.is_file():
        for line in ignore_file.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                patterns.append(line.rstrip("/"))
    return patterns


def _matches(pattern: str, rel: str, name: str) -> bool:
    if "/" in pattern:
        return fnmatch.fnmatchcase(rel, pattern.lstrip("/"))
    return fnmatch.fnmatchcase(name, pattern)


def deciding_pattern(patterns: Sequence[str], rel: str) -> str | None:
    """The last pattern that matches ``rel`` (``!PATTERN`` for a negation), or None."""
    name = rel.rsplit("/", 1)[-1]
    for pattern in reversed(patterns):
        if pattern.startswith("!"):
            if _matches(pattern[1:].rstrip("/"), rel, name):
                return pattern
        elif _matches(pattern, rel, name):
            return pattern
    return None


def make_ignore(patterns: Sequence[str], extra_paths: Sequence[str] = ()) -> Callable[[str], bool]:
    """Whether a path relative to the copied directory is left out (see the module doc);
    ``extra_paths`` are always left out (skyinfra's workspaces), whatever the patterns say."""

    def left_out(rel: str) -> bool:
        if rel in extra_paths:
            return True
        pattern = deciding_pattern(patterns, rel)
        return pattern is not None and not pattern.startswith("!")

    def ignored(rel: str) -> bool:
        # A path inside a left-out directory is left out too, whichever transport asks.
        parts = rel.split("/")
        return any(left_out("/".join(parts[: i + 1])) for i in range(len(parts)))

    return ignored


def secrets_left_out(src: Path, patterns: Sequence[str], limit: int = 10) -> list[str]:
    """Up to ``limit`` paths under ``src`` that a secret pattern keeps out of the copy (a
    left-out directory counts once), for `run` to say what it did not send."""
    secret = set(SECRET_IGNORES)
    found: list[str] = []
    for directory, dirs, files in os.walk(src):
        rel_dir = os.path.relpath(directory, src)
        prefix = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
        kept_dirs = []
        for name in sorted(dirs) + sorted(files):
            rel = prefix + name
            pattern = deciding_pattern(patterns, rel)
            if pattern is None or pattern.startswith("!"):
                if name in dirs:
                    kept_dirs.append(name)
                continue
            if pattern in secret:
                found.append(rel)
                if len(found) >= limit:
                    return sorted(found)
        dirs[:] = kept_dirs
    return sorted(found)


def topology_path_inside(src: Path, workspace_dir: Path) -> list[str]:
    """The folder holding the workspaces (``workspace_dir``'s parent) as a path relative to
    the copied directory ``src`` when it lies under it, to keep it out of the copy."""
    try:
        rel = workspace_dir.parent.resolve().relative_to(src.resolve())
    except ValueError:
        return []
    return [str(rel)] if str(rel) != "." else []
