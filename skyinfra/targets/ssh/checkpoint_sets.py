"""`skyinfra checkpoints` on the ssh target: a set lives in each node's folder on its host
(``<node folder>/checkpoints/<NAME>``) and, with ``ssh.checkpoints_url``, under the store's
prefix too (``<prefix>/<NAME>/nodes/node-<i>/...``, the runtime's ckptsync layout).

Listing asks every enrolled host at once (one SSH command each), and every lost host a spare
replaced (its node's folder stays there until `down` removes it, and may hold sets), and lists
the store with the operator's credentials (checkpoint_store.operator_credentials); one entry
per set name, its size and items summed over every copy. Deleting removes the set from every
host and from the store; a host that cannot be reached is named with what is left there. The
pure part (merge, what a delete says) is apart from the SSH and S3 calls, for unit tests.
"""

from __future__ import annotations

import json
import os
import posixpath
import shlex
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from skyinfra_runtime.checkpoints import CHECKPOINTS_FOLDER, name_problem
from skyinfra_runtime.s3 import Bucket, CredentialSource, StoredObject, parse_url

from skyinfra.checkpoints import uses
from skyinfra.errors import CommandError, SkyinfraError, SpecError, UsageError
from skyinfra.spec import ClusterSpec
from skyinfra.targets.base import CheckpointListing, CheckpointSetInfo
from skyinfra.targets.ssh.checkpoint_store import SshCheckpointStore, operator_credentials
from skyinfra.targets.ssh.hosts import (
    HOSTS_FILE,
    enrolled,
    lost_hosts,
    lost_transport,
    node_transport,
)
from skyinfra.targets.ssh.spares import LostHost
from skyinfra.targets.ssh.spec import SshSpec
from skyinfra.workspace import Workspace

# Run by ssh.python on a host ($1: the node's checkpoints folder): one JSON object, each set
# folder's name -> [bytes, files, newest mtime], regular files only (as the local target
# measures its folders). Python rather than find(1): -printf is GNU's alone.
_MEASURE = r"""
import json, os, stat, sys
root, out = sys.argv[1], {}
try:
    names = os.listdir(root)
except OSError:
    names = []
for name in names:
    top = os.path.join(root, name)
    if os.path.islink(top) or not os.path.isdir(top):
        continue
    size = files = 0
    newest = None
    for base, _, found in os.walk(top):
        for f in found:
            try:
                st = os.lstat(os.path.join(base, f))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                size, files = size + st.st_size, files + 1
                newest = st.st_mtime if newest is None else max(newest, st.st_mtime)
    out[name] = [size, files, newest]
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Copy:
    """One copy of a set: in node ``node``'s folder on its host, in the folder a lost host
    kept (node None, ``on_lost_host``), or (node None) the store."""

    name: str
    node: int | None
    place: str  # "node-0 10.0.0.5:/home/ml/.skyinfra/lab/node-0/checkpoints/NAME", or its URL
    size_bytes: int
    items: int
    newest: float | None  # epoch seconds (None: empty)
    on_lost_host: bool = False

    @property
    def order(self) -> tuple[int, int]:
        """The nodes' copies first, by node; then the lost hosts'; the store's last."""
        return (0, self.node) if self.node is not None else (1 if self.on_lost_host else 2, 0)


@dataclass(frozen=True)
class HostFolder:
    """A node's folder on a host, where sets may be: an enrolled node's (``node``), or the one
    a lost host kept (node None; ``lost_at``: its place among hosts.json's lost hosts, as
    lost_transport dials them): ``label`` names it in what the listing says."""

    host: str
    node_dir: str
    node: int | None
    label: str
    lost_at: int | None = None

    @classmethod
    def of_lost(cls, lost: LostHost, lost_at: int) -> HostFolder:
        return cls(
            lost.host, lost.node_dir, None,
            f"lost host {lost.host} (node-{lost.index} until spare {lost.replaced_by} "
            "replaced it)",
            lost_at,
        )  # fmt: skip

    def place(self, name: str) -> str:
        where = f"{self.host}:{posixpath.join(self.node_dir, CHECKPOINTS_FOLDER, name)}"
        return f"node-{self.node} {where}" if self.node is not None else f"{self.label}: {where}"


@dataclass(frozen=True)
class Found:
    """What the hosts and the store hold: the copies, and the hosts that did not answer
    (what names the host: "host H", or a lost host's label -> why)."""

    copies: list[Copy]
    unreachable: dict[str, str]


def merge(copies: Sequence[Copy], used: Mapping[str, Sequence[str]]) -> list[CheckpointSetInfo]:
    """One entry per set name (sorted): bytes and items over every copy, the newest time,
    the nodes whose folder holds it, and every place it is."""
    by_name: dict[str, list[Copy]] = {}
    for c in copies:
        by_name.setdefault(c.name, []).append(c)
    out = []
    for name, found in sorted(by_name.items()):
        found.sort(key=lambda c: c.order)
        times = [c.newest for c in found if c.newest is not None]
        in_store = any(c.node is None and not c.on_lost_host for c in found)
        on_hosts = any(c.node is not None or c.on_lost_host for c in found)
        places = "; ".join(c.place for c in found)
        unit = "file or object" if in_store and on_hosts else "object" if in_store else "file"
        out.append(
            CheckpointSetInfo(
                name=name,
                size_bytes=sum(c.size_bytes for c in found),
                items=sum(c.items for c in found),
                item_unit=unit,
                modified=_iso(max(times)) if times else None,
                jobs=tuple(used.get(name, ())),
                location=places,
                location_key="places",
                place=places,
                nodes=tuple(c.node for c in found if c.node is not None),
            )
        )
    return out


def where_words(ws: Workspace, store: SshCheckpointStore | None, found: Found) -> str:
    """The listing's last line: where the sets were looked for, and who did not answer."""
    words = f"in each node's folder ~/.skyinfra/{ws.name}/node-<i>/{CHECKPOINTS_FOLDER}"
    if store:
        words += f" and under {store.url}/"
    for host, why in sorted(found.unreachable.items()):
        words += f" ({host}: its sets not listed: {why})"
    return words


def deleted_words(
    name: str, removed: Sequence[str], left: Mapping[str, str], store_objects: int | None,
    store_url: str | None,
) -> str:  # fmt: skip
    """What follows "deleted <set>": where it was removed (``removed``: "node-0 (host)";
    ``store_objects``: None without a store). A SkyinfraError instead when a host did not
    answer (``left``: "host H" or a lost host's label -> what is left there and why), naming
    it, what is left there and what was deleted."""
    parts = [f"the folders of {', '.join(removed)}" if removed else ""]
    if store_objects is not None:
        parts.append(f"{store_objects} object(s) under {store_url}/{name}/")
    done = " and ".join(p for p in parts if p) or "nothing"
    if left:
        hosts = "; ".join(f"{h}: {what}" for h, what in sorted(left.items()))
        raise SkyinfraError(
            f"checkpoint set {name!r}: deleted from {done}, but {hosts}. Run `skyinfra "
            f"checkpoints delete {name}` again once the host answers"
        )
    return f": from {done}"


def _credentials(store: SshCheckpointStore) -> CredentialSource:
    found = operator_credentials(store, os.environ)
    if isinstance(found, SpecError):
        raise found
    return CredentialSource(found.as_environ())


def _store_objects(store: SshCheckpointStore) -> list[StoredObject]:
    _, prefix = parse_url(store.url)
    bucket = Bucket(store.bucket_url(), store.region, _credentials(store))
    try:
        return list(bucket.objects(f"{prefix}/"))
    except OSError as err:
        raise SkyinfraError(
            f"could not list the checkpoint sets under {store.url}/ ({store.bucket_url()}): {err}"
        ) from None


def store_copies(store: SshCheckpointStore, objects: Sequence[StoredObject]) -> list[Copy]:
    """The store's sets (``<prefix>/<name>/...``), one copy each."""
    _, prefix = parse_url(store.url)
    found: dict[str, list[StoredObject]] = {}
    for o in objects:
        name, sep, _ = o.key[len(prefix) + 1 :].partition("/")
        if sep and not name_problem(name):  # a stray object beside the sets is not one
            found.setdefault(name, []).append(o)
    copies = []
    for name, items in found.items():
        times = [t for t in (_epoch(o.modified) for o in items) if t is not None]
        size = sum(o.size for o in items)
        newest = max(times) if times else None
        copies.append(Copy(name, None, f"{store.url}/{name}", size, len(items), newest))
    return copies


def folders(ws: Workspace) -> list[HostFolder]:
    """Where sets may be on the hosts: each enrolled node's folder, then each lost host's
    (not one that is enrolled again, whose folder is its node's now)."""
    if not (ws.path / HOSTS_FILE).is_file():
        return []
    hosts = enrolled(ws)
    nodes = [
        HostFolder(h["host"], h["node_dir"], i, f"host {h['host']}")
        for i, h in sorted(hosts.items())
    ]
    now = {(h["host"], h["node_dir"]) for h in hosts.values()}
    lost = [
        HostFolder.of_lost(x, k)
        for k, x in enumerate(lost_hosts(ws))
        if (x.host, x.node_dir) not in now
    ]
    return nodes + lost


def _on_hosts(
    ws: Workspace, spec: ClusterSpec, command: Callable[[str], str]
) -> tuple[dict[HostFolder, str], dict[HostFolder, str]]:
    """``command(checkpoints folder)`` run on every folder's host at once: folder -> its
    output, and folder -> why for those that did not answer. None enrolled (down): nothing."""
    where = folders(ws)
    if not where:
        return {}, {}
    nodes = node_transport(ws, spec, rooted=False)
    strays = (
        lost_transport(ws, spec, lost_hosts(ws)) if any(f.node is None for f in where) else None
    )

    def ask(folder: HostFolder) -> tuple[HostFolder, str, bool]:
        root = posixpath.join(folder.node_dir, CHECKPOINTS_FOLDER)
        try:
            if folder.node is not None:
                return folder, nodes.check_call(folder.node, command(root)), True
            assert strays is not None and folder.lost_at is not None
            return folder, strays.check_call(folder.lost_at, command(root)), True
        except CommandError as err:
            if err.returncode is None:
                return folder, f"not reachable ({err})", False
            tail = " ".join(err.stderr.strip().splitlines()[-3:])[-300:]
            return folder, f"its command failed (exit {err.returncode}: {tail})", False
        except SkyinfraError as err:
            return folder, f"not reachable ({err})", False

    try:
        with ThreadPoolExecutor(max_workers=min(16, len(where))) as pool:
            answers = list(pool.map(ask, where))
    finally:
        nodes.close()
        if strays is not None:
            strays.close()
    said = {f: out for f, out, ok in answers if ok}
    return said, {f: out for f, out, ok in answers if not ok}


def find_copies(ws: Workspace, spec: ClusterSpec) -> Found:
    section = spec.section_as(SshSpec)
    measure = f"{shlex.quote(section.python)} -c {shlex.quote(_MEASURE)}"
    said, failed = _on_hosts(ws, spec, lambda root: f"{measure} {shlex.quote(root)}")
    unreachable = {f.label: why for f, why in failed.items()}
    copies = []
    for folder, out in said.items():
        try:
            sets: dict[str, list[Any]] = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            unreachable[folder.label] = f"its answer was not a listing: {out.strip()[:200]!r}"
            continue
        for name, (size, files, newest) in sets.items():
            if not name_problem(name):
                copies.append(
                    Copy(name, folder.node, folder.place(name), int(size), int(files), newest,
                         on_lost_host=folder.node is None)
                )  # fmt: skip
    store = section.checkpoints
    if store:
        copies += store_copies(store, _store_objects(store))
    return Found(copies, unreachable)


def listing(ws: Workspace, spec: ClusterSpec) -> CheckpointListing:
    found = find_copies(ws, spec)
    store = spec.section_as(SshSpec).checkpoints
    return CheckpointListing(merge(found.copies, uses(ws)), where_words(ws, store, found))


def find(ws: Workspace, spec: ClusterSpec, name: str) -> CheckpointSetInfo:
    problem = name_problem(name)
    if problem:
        raise UsageError(f"checkpoint set {name!r}: expected {problem}")
    found = find_copies(ws, spec)
    sets = merge(found.copies, uses(ws))
    match = next((s for s in sets if s.name == name), None)
    if match is None:
        names = ", ".join(s.name for s in sets) or "none"
        where = where_words(ws, spec.section_as(SshSpec).checkpoints, found)
        raise UsageError(
            f"checkpoint set {name!r}: cluster {ws.name!r} has no such set {where} "
            f"(it has: {names})"
        )
    return match


def delete(ws: Workspace, spec: ClusterSpec, found: CheckpointSetInfo) -> str:
    """From every enrolled host and every lost host (not only those that listed it: one that
    did not answer then may have it), then from the store."""
    name = found.name
    if name_problem(name):  # found came from a listing; never rm a path made of anything else
        raise UsageError(f"checkpoint set {name!r}: expected {name_problem(name)}")

    def remove(root: str) -> str:
        path = shlex.quote(posixpath.join(root, name))
        return f"rm -rf -- {path} && [ ! -e {path} ]"

    said, failed = _on_hosts(ws, spec, remove)
    removed = [
        f"node-{f.node} ({f.host})" if f.node is not None else f.label
        for f in sorted(said, key=lambda f: (f.node is None, f.node or 0, f.host))
    ]
    left = {
        f.label: f"{why}; left there: "
        f"{posixpath.join(f.node_dir, CHECKPOINTS_FOLDER, name)} if it holds the set"
        for f, why in failed.items()
    }
    store = spec.section_as(SshSpec).checkpoints
    count = None
    if store:
        count = _delete_stored(store, name)
    return deleted_words(name, removed, left, count, store.url if store else None)


def _delete_stored(store: SshCheckpointStore, name: str) -> int:
    _, prefix = parse_url(store.url)
    bucket = Bucket(store.bucket_url(), store.region, _credentials(store))
    keys = [o.key for o in _store_objects(store) if o.key.startswith(f"{prefix}/{name}/")]
    done = 0
    try:
        for key in keys:
            bucket.delete(key)
            done += 1
    except OSError as err:
        raise SkyinfraError(
            f"checkpoint set {name!r}: S3 did not delete s3://{parse_url(store.url)[0]}/"
            f"{keys[done]}: {err} ({len(keys) - done} object(s) left under {store.url}/{name}/)"
        ) from None
    return done


def _epoch(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")
