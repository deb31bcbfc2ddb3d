"""`skyinfra checkpoints` on the ssh target: a set lives in each node's folder on its host
(``<node folder>/checkpoints/<NAME>``) and, with ``ssh.checkpoints_url``, under the store's
prefix too (``<prefix>/<NAME>/nodes/node-<i>/...``, the runtime's ckptsync layout).

Listing asks every enrolled host at once (one SSH command each) and lists the store with the
operator's credentials (checkpoint_store.operator_credentials); one entry per set name, its
size and items summed over every copy. Deleting removes the set from every host and from the
store; a host that cannot be reached is named with what is left there. The pure part (merge,
what a delete says) is apart from the SSH and S3 calls, for unit tests.
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
from skyinfra.targets.ssh.hosts import HOSTS_FILE, enrolled, node_transport
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
    """One copy of a set: in node ``node``'s folder on its host, or (node None) the store."""

    name: str
    node: int | None
    place: str  # "node-0 10.0.0.5:/home/ml/.skyinfra/lab/node-0/checkpoints/NAME", or its URL
    size_bytes: int
    items: int
    newest: float | None  # epoch seconds (None: empty)


@dataclass(frozen=True)
class Found:
    """What the hosts and the store hold: the copies, and the hosts that did not answer
    (host -> why)."""

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
        found.sort(key=lambda c: (c.node is None, c.node or 0))
        times = [c.newest for c in found if c.newest is not None]
        in_store = any(c.node is None for c in found)
        on_hosts = any(c.node is not None for c in found)
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
        words += f" (host {host}: its sets not listed: {why})"
    return words


def deleted_words(
    name: str, removed: Sequence[str], left: Mapping[str, str], store_objects: int | None,
    store_url: str | None,
) -> str:  # fmt: skip
    """What follows "deleted <set>": where it was removed (``removed``: "node-0 (host)";
    ``store_objects``: None without a store). A SkyinfraError instead when a host did not
    answer (``left``: host -> what is left there and why), naming it, what is left there and
    what was deleted."""
    parts = [f"the folders of {', '.join(removed)}" if removed else ""]
    if store_objects is not None:
        parts.append(f"{store_objects} object(s) under {store_url}/{name}/")
    done = " and ".join(p for p in parts if p) or "nothing"
    if left:
        hosts = "; ".join(f"host {h}: {what}" for h, what in sorted(left.items()))
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


def _on_hosts(
    ws: Workspace, spec: ClusterSpec, command: Callable[[str], str]
) -> tuple[dict[int, str], dict[str, str]]:
    """``command(checkpoints folder)`` run on every enrolled host at once: node -> its
    output, and host -> why for those that did not answer. None enrolled (down): nothing."""
    if not (ws.path / HOSTS_FILE).is_file():
        return {}, {}
    hosts = enrolled(ws)
    nodes = node_transport(ws, spec, rooted=False)

    def ask(i: int) -> tuple[int, str, bool]:
        root = posixpath.join(hosts[i]["node_dir"], CHECKPOINTS_FOLDER)
        try:
            return i, nodes.check_call(i, command(root)), True
        except CommandError as err:
            if err.returncode is None:
                return i, f"not reachable ({err})", False
            tail = " ".join(err.stderr.strip().splitlines()[-3:])[-300:]
            return i, f"its command failed (exit {err.returncode}: {tail})", False
        except SkyinfraError as err:
            return i, f"not reachable ({err})", False

    try:
        with ThreadPoolExecutor(max_workers=min(16, len(hosts) or 1)) as pool:
            answers = list(pool.map(ask, sorted(hosts)))
    finally:
        nodes.close()
    said = {i: out for i, out, ok in answers if ok}
    return said, {hosts[i]["host"]: out for i, out, ok in answers if not ok}


def find_copies(ws: Workspace, spec: ClusterSpec) -> Found:
    section = spec.section_as(SshSpec)
    measure = f"{shlex.quote(section.python)} -c {shlex.quote(_MEASURE)}"
    said, unreachable = _on_hosts(ws, spec, lambda root: f"{measure} {shlex.quote(root)}")
    hosts = enrolled(ws) if said else {}
    copies = []
    for i, out in sorted(said.items()):
        try:
            sets: dict[str, list[Any]] = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            unreachable[hosts[i]["host"]] = f"its answer was not a listing: {out.strip()[:200]!r}"
            continue
        root = posixpath.join(hosts[i]["node_dir"], CHECKPOINTS_FOLDER)
        for name, (size, files, newest) in sets.items():
            if not name_problem(name):
                place = f"node-{i} {hosts[i]['host']}:{root}/{name}"
                copies.append(Copy(name, i, place, int(size), int(files), newest))
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
    """From every enrolled host (not only those that listed it: one that did not answer
    then may have it), then from the store."""
    name = found.name
    if name_problem(name):  # found came from a listing; never rm a path made of anything else
        raise UsageError(f"checkpoint set {name!r}: expected {name_problem(name)}")

    def remove(root: str) -> str:
        path = shlex.quote(posixpath.join(root, name))
        return f"rm -rf -- {path} && [ ! -e {path} ]"

    said, unreachable = _on_hosts(ws, spec, remove)
    hosts = enrolled(ws) if said or unreachable else {}
    removed = [f"node-{i} ({hosts[i]['host']})" for i in sorted(said)]
    by_host = {h["host"]: h for h in hosts.values()}
    left = {
        host: f"{why}; left there: "
        f"{posixpath.join(by_host[host]['node_dir'], CHECKPOINTS_FOLDER, name)} if it holds the set"
        for host, why in unreachable.items()
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
