"""Cluster workspaces: ``<dir>/<name>/`` holds the rendered root module, tfvars, state,
the spec it was made from, ``topology.json``, the local nodes and ``runs/<id>/``.

``<dir>`` defaults to ``.skyinfra/clusters`` under the current directory; ``--dir`` (or
``SKYINFRA_DIR``) picks another, e.g. a folder a team commits.

A workspace is private (the folder 0700, what skyinfra writes 0600: tfvars and state can hold
URLs with credentials in them) and one operation at a time holds it (:meth:`Workspace.lock`).
Which cluster a command acts on is decided in one place, :func:`select_workspace`: only the
cluster the user named, by ``--cluster`` or by the spec's name, for anything that changes
something.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyinfra import lock_holders as holder_files
from skyinfra.errors import NoSuchClusterError, WorkspaceBusyError, WorkspaceError
from skyinfra.lock_holders import LockHolder
from skyinfra.spec import NAME_RE, ClusterSpec, check_name

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
LOCK_FILE = ".skyinfra.lock"

DEFAULT_DIR = Path(".skyinfra") / "clusters"
DIR_ENV = "SKYINFRA_DIR"


def clusters_dir(option: str | Path | None) -> Path:
    chosen = option or os.environ.get(DIR_ENV) or DEFAULT_DIR
    return Path(chosen).absolute()


@dataclass(frozen=True)
class Workspace:
    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def spec_file(self) -> Path:
        return self.path / "spec.json"

    @property
    def topology_file(self) -> Path:
        return self.path / "topology.json"

    @property
    def nodes_dir(self) -> Path:
        return self.path / "nodes"

    @property
    def runs_dir(self) -> Path:
        return self.path / "runs"

    @property
    def copy_cache_file(self) -> Path:
        """The hashes of the project's files `run` copied last (skyinfra.transport.tree)."""
        return self.path / "copy-cache.json"

    @property
    def state_file(self) -> Path:
        return self.path / "terraform.tfstate"

    @property
    def origin_file(self) -> Path:
        """Which spec file made the cluster (a different one is refused: see lifecycle.up)."""
        return self.path / "origin.json"

    def exists(self) -> bool:
        return self.spec_file.is_file()

    def spec(self) -> ClusterSpec:
        """The spec the cluster was last brought up with (spec.json), validated again."""
        return ClusterSpec.from_dict(self.read_json(self.spec_file))

    def ensure(self) -> None:
        """Create the workspace folder, private to its owner."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self.path.chmod(PRIVATE_DIR_MODE)
        except OSError as err:
            raise WorkspaceError(
                f"cannot create the workspace of cluster {self.name!r} at {self.path}: "
                f"{err.strerror}; choose a writable folder with --dir or $SKYINFRA_DIR"
            ) from None

    @contextlib.contextmanager
    def lock(self, command: str, *, shared: bool = False) -> Iterator[WorkspaceHold]:
        """Hold the workspace for one operation; another one is refused at once, naming every
        holder. ``shared``: operations that may overlap hold it together (`run` without
        verify, attached or detached: each starts a job of its own, and the head's queue
        orders them), while one that is not shared refuses them and is refused by them. The
        kernel drops the lock when the holder dies, so none is ever stale; who holds it is
        said by one holder file each (skyinfra.lock_holders), never decided by them."""
        self.ensure()
        path = self.path / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
        try:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            except BlockingIOError:
                raise self._busy() from None
            holder_files.remove_stale(self.path, alone=not shared)
            said = holder_files.write_holder(self.path, LockHolder.of_this_process(command))
            try:
                yield WorkspaceHold(self, fd, shared, said)
            finally:
                said.unlink(missing_ok=True)  # before the lock goes with the descriptor
        finally:
            os.close(fd)

    def _busy(self, own: Path | None = None) -> WorkspaceBusyError:
        holders = holder_files.live_holders(self.path, besides=own)
        return WorkspaceBusyError(self.name, self.path / LOCK_FILE, holders)

    def lock_holders(self) -> list[LockHolder]:
        """Who holds the workspace now (their holder files, oldest first; none: nobody).
        Only read, never locked: a command that starts meanwhile is not refused because of
        it."""
        return holder_files.live_holders(self.path)

    def write_files(
        self,
        files: Mapping[str, str],
        *,
        owned_dirs: Iterable[str] = (),
        retired: Iterable[str] = (),
    ) -> None:
        """Write rendered files (names are relative, ``/``-separated, may name sub-folders);
        each is replaced atomically so a crash leaves old or new. Files under ``owned_dirs``
        that ``files`` does not name are left over from an earlier render and are removed, and
        so are the ``retired`` files (names an older render used)."""
        self.ensure()
        for name in files:
            parts = name.split("/")
            if name.startswith("/") or any(part in ("", ".", "..") for part in parts):
                raise WorkspaceError(f"refusing to write {name!r}: not a plain relative path")
        for name, text in files.items():
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            # Scripts keep their execute bit; everything else is readable by the owner only.
            write_private(target, text, 0o700 if name.endswith(".sh") else PRIVATE_FILE_MODE)
        for name in retired:
            if name not in files:
                (self.path / name).unlink(missing_ok=True)
        wanted = {self.path / name for name in files}
        for owned in owned_dirs:
            root = self.path / owned
            if not root.is_dir():
                continue
            for stale in sorted(p for p in root.rglob("*") if p.is_file() and p not in wanted):
                stale.unlink()
            for folder in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
                if not any(folder.iterdir()):
                    folder.rmdir()

    @contextlib.contextmanager
    def restored_unless_kept(
        self,
        files: Iterable[str],
        *,
        owned_dirs: Iterable[str] = (),
        retired: Iterable[str] = (),
        keep_new: Iterable[str] = (),
    ) -> Iterator[Callable[[], None]]:
        """Put back, on the way out, every file that writing ``files`` (with ``owned_dirs``
        and ``retired``, as :meth:`write_files` takes them) would change, bytes and mode,
        and remove again what was absent, except the ``keep_new`` names; unless the body
        calls the ``keep`` function it is given (from then on, what it wrote stays). So a
        command refused or failed before it changed the cluster leaves the workspace exactly
        as it was."""
        owned_dirs, retired = tuple(owned_dirs), tuple(retired)
        names = (set(files) | set(retired)) - {k for k in keep_new if not (self.path / k).exists()}
        for owned in owned_dirs:
            root = self.path / owned
            if root.is_dir():
                names |= {p.relative_to(self.path).as_posix() for p in root.rglob("*")}
        saved: dict[str, tuple[bytes, int] | None] = {}
        for name in names:
            path = self.path / name
            saved[name] = (path.read_bytes(), path.stat().st_mode) if path.is_file() else None
        kept = False

        def keep() -> None:
            nonlocal kept
            kept = True

        try:
            yield keep
        finally:
            if not kept:
                self._put_back(saved, owned_dirs)

    def _put_back(
        self, saved: Mapping[str, tuple[bytes, int] | None], owned_dirs: Iterable[str]
    ) -> None:
        for name, old in sorted(saved.items()):
            path = self.path / name
            if old is None:
                if not path.is_dir():
                    path.unlink(missing_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(old[0])
            path.chmod(old[1] & 0o777)
        # Folders the render made are removed again; those that held something stay.
        had = {name for name, old in saved.items() if old is None and (self.path / name).is_dir()}
        for owned in owned_dirs:
            root = self.path / owned
            if not root.is_dir():
                continue
            for folder in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
                rel = folder.relative_to(self.path).as_posix()
                if rel not in had and not any(folder.iterdir()):
                    folder.rmdir()
            if root.relative_to(self.path).as_posix() not in had and not any(root.iterdir()):
                root.rmdir()

    def write_json(self, target: Path, data: Any) -> None:
        self.ensure()
        write_private(target, json.dumps(data, indent=2, sort_keys=False) + "\n")

    def write_text(self, target: Path, text: str) -> None:
        """A private (0600) file in the workspace, replaced atomically."""
        self.ensure()
        write_private(target, text)

    def read_json(self, target: Path) -> Any:
        try:
            return json.loads(target.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise WorkspaceError(
                f"cluster {self.name!r}: {target.name} is missing in {self.path}"
                " (was `skyinfra up` run for it?)"
            ) from None
        except json.JSONDecodeError as err:
            raise WorkspaceError(
                f"cluster {self.name!r}: {target} is not valid JSON ({err})"
            ) from err


@dataclass(frozen=True)
class WorkspaceHold:
    """The lock a :meth:`Workspace.lock` holds, for a shared holder that must change the
    cluster (an attached `run` replacing its lost nodes) without another holder meanwhile."""

    ws: Workspace
    fd: int
    shared: bool
    holder_file: Path  # its own, which a refusal of its upgrade does not name

    @contextlib.contextmanager
    def exclusively(self) -> Iterator[None]:
        """The workspace alone for the block, then shared again; WorkspaceBusyError at once
        while another command holds it (this hold is kept)."""
        if not self.shared:
            yield
            return
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            busy = self.ws._busy(self.holder_file)
            # Linux drops a shared lock whose upgrade failed: take it back (busy only if the
            # others left meanwhile and an exclusive command came between).
            try:
                fcntl.flock(self.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                raise self.ws._busy(self.holder_file) from None
            raise busy from None
        try:
            yield
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_SH)  # a downgrade never waits


def write_private(target: Path, text: str, mode: int = PRIVATE_FILE_MODE) -> None:
    """Replace ``target`` atomically (a crash leaves old or new) with a file of ``mode``."""
    # A name of this writer's own: two commands that share the workspace may write one file.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)  # the umask may have narrowed it; never widen beyond ``mode``
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def clusters_in(base: Path) -> list[str]:
    """The clusters that have a workspace in ``base`` (brought up at least once)."""
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if (p / "spec.json").is_file())


def select_workspace(
    base: Path,
    name: str | None,
    *,
    spec_name: str | None,
    changes_something: bool,
    say: Callable[[str], None],
) -> Workspace:
    """The cluster a command acts on: ``--cluster``, else the spec's name. A command that
    changes or destroys anything acts on nothing else; a read-only one may fall back to the
    only cluster in ``base`` and says that it did."""
    if name is not None:
        check_name(name, "--cluster")  # the spec's rule: no path can reach another folder
    elif spec_name is not None:
        name = spec_name
    else:
        existing = clusters_in(base)
        listed = f" (clusters there: {', '.join(existing)})" if existing else ""
        if changes_something or len(existing) != 1:
            raise NoSuchClusterError(
                f"which cluster? name it with --cluster NAME, or run where a skyinfra.toml "
                f"names it{listed or f'; there are no clusters in {base}'}"
            )
        name = existing[0]
        say(f"[skyinfra] cluster {name!r}: the only one in {base}")
    ws = Workspace(base / name)
    if not ws.exists():
        existing = clusters_in(base)
        listed = f"clusters there: {', '.join(existing)}" if existing else "there are none"
        raise NoSuchClusterError(
            f"no cluster named {name!r} in {base} ({listed}); bring it up with "
            f"`skyinfra up --name {name}`"
        )
    return ws


def applied_spec(clusters_root: str | Path | None, name: Any) -> ClusterSpec | None:
    """The applied spec (spec.json) of the cluster ``name`` under ``clusters_root``: what an
    existing cluster keeps where neither the flags nor the file say (`up`, the Python API).
    None where it has no workspace, or ``name`` is not a name (the spec's own check says so)."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        return None
    ws = Workspace(clusters_dir(clusters_root) / name)
    return ws.spec() if ws.exists() else None
