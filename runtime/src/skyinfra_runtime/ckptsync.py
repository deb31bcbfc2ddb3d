"""A node's checkpoint directory kept in S3: restored before the entry starts, uploaded while
the job runs and once more when it ends (standard library only).

Layout under the set's prefix ``<checkpoints_url prefix>/<NAME>/``::

    nodes/node-<i>/objects/<sha256>    a file's content, uploaded by node i
    nodes/node-<i>/manifest.json       node i's files: path -> sha256, size, mtime (written last)

**A node's upload counts only once its manifest is written.** Each round uploads the objects
of new and changed files first, then replaces the node's manifest with one PUT (atomic in
S3), then deletes the objects no manifest of the node names any more. A node killed between
two objects leaves objects no manifest names: a restore never sees them, and takes the node's
previous manifest, which describes files that were all uploaded. Every node uploads only what
it wrote (a file restored from another node's manifest and left unchanged is that node's).

A restore takes every node's manifest and writes their union into the directory (one path in
several manifests: the newest mtime wins, then the lowest node), each file through a temporary
name and a rename, with its recorded mtime. Files of the directory that no manifest names are
left alone.

Only files that stopped changing are uploaded while the job runs: a file's size and mtime
must be the same at two polls in a row. The final round (the job ended, or SIGTERM) takes
every file.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from skyinfra_runtime.s3 import Bucket, Credentials, CredentialSource, parse_url

MANIFEST = "manifest.json"
SCHEMA = 1
POLL_S = 5.0
PART_SUFFIX = ".skyinfra-part"
# The node's settings, written by cloud-init (AWS) or the enrolment (ssh): {"url", "region",
# "bucket_url"}, and "credentials": OPERATOR_CREDENTIALS where the node has no role to sign
# with (the agent gets the operator's on its stdin; never in this file).
SETTINGS_FILE = "checkpoints.json"
OPERATOR_CREDENTIALS = "operator"
# Test hook: seconds to wait after each object uploaded (lets a test kill a round midway).
DELAY_ENV = "SKYINFRA_CHECKPOINT_UPLOAD_DELAY_S"

Stat = tuple[int, int]  # size, mtime_ns


@dataclass(frozen=True)
class Entry:
    sha256: str
    size: int
    mtime_ns: int

    def to_dict(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "size": self.size, "mtime_ns": self.mtime_ns}


def safe_relpath(rel: object) -> str:
    """A manifest's path, refused when it could leave the directory."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\0" in rel:
        raise ValueError(f"bad path in a checkpoint manifest: {rel!r}")
    path = PurePosixPath(rel)
    if path.is_absolute() or any(part in ("", ".", "..") for part in rel.split("/")):
        raise ValueError(f"bad path in a checkpoint manifest: {rel!r}")
    return rel


def parse_manifest(data: bytes) -> dict[str, Entry]:
    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"not a schema {SCHEMA} checkpoint manifest")
    files = {}
    for rel, item in dict(doc.get("files") or {}).items():
        files[safe_relpath(rel)] = Entry(
            str(item["sha256"]), int(item["size"]), int(item["mtime_ns"])
        )
    return files


def manifest_bytes(node: int, files: dict[str, Entry]) -> bytes:
    doc = {
        "schema": SCHEMA,
        "node": node,
        "written_at": time.time(),
        "files": {rel: files[rel].to_dict() for rel in sorted(files)},
    }
    return json.dumps(doc, indent=1).encode()


def merge(manifests: dict[int, dict[str, Entry]]) -> dict[str, tuple[int, Entry]]:
    """The union of every node's files: path -> (node, entry); newest mtime, then lowest node."""
    out: dict[str, tuple[int, Entry]] = {}
    for node in sorted(manifests):
        for rel, entry in manifests[node].items():
            seen = out.get(rel)
            if seen is None or entry.mtime_ns > seen[1].mtime_ns:
                out[rel] = (node, entry)
    return out


def stable(before: dict[str, Stat], now: dict[str, Stat]) -> set[str]:
    """Files whose size and mtime did not change between two polls."""
    return {rel for rel, st in now.items() if before.get(rel) == st}


def scan(root: Path) -> dict[str, Stat]:
    """Every regular file under ``root`` (symlinks and our temporary files left out)."""
    out: dict[str, Stat] = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            if name.endswith(PART_SUFFIX):
                continue
            path = Path(folder) / name
            with contextlib.suppress(OSError):
                st = path.lstat()
                if path.is_file() and not path.is_symlink():
                    out[path.relative_to(root).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class Sync:
    """One node's side of one checkpoint set."""

    bucket: Bucket
    prefix: str  # "<url prefix>/<NAME>" (no trailing /)
    root: Path
    node: int
    say: Callable[[str], None] = lambda line: print(f"[checkpoints] {line}", file=sys.stderr)
    # This node's committed manifest (what S3 holds for it).
    mine: dict[str, Entry] = field(default_factory=dict)
    # Files restored from other nodes: path -> their stat right after the restore.
    foreign: dict[str, Stat] = field(default_factory=dict)
    _last_scan: dict[str, Stat] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    rounds: list[dict[str, float]] = field(default_factory=list)

    def _node_prefix(self, node: int) -> str:
        return f"{self.prefix}/nodes/node-{node}/"

    def restore(self) -> dict[str, int]:
        """Write the union of every node's manifest into the directory."""
        self.root.mkdir(parents=True, exist_ok=True)
        manifests: dict[int, dict[str, Entry]] = {}
        for key in self.bucket.list(f"{self.prefix}/nodes/"):
            tail = key[len(f"{self.prefix}/nodes/") :]
            name, _, rest = tail.partition("/")
            if rest != MANIFEST or not name.startswith("node-") or not name[5:].isdigit():
                continue
            data = self.bucket.get(key)
            if data is not None:
                manifests[int(name[5:])] = parse_manifest(data)
        self.mine = dict(manifests.get(self.node, {}))
        fetched = kept = 0
        for rel, (node, entry) in sorted(merge(manifests).items()):
            path = self.root / rel
            if not (
                path.is_file()
                and path.stat().st_size == entry.size
                and sha256_file(path) == entry.sha256
            ):
                path.parent.mkdir(parents=True, exist_ok=True)
                part = path.with_name(path.name + PART_SUFFIX)
                with part.open("wb") as out:
                    self.bucket.download(f"{self._node_prefix(node)}objects/{entry.sha256}", out)
                if sha256_file(part) != entry.sha256:
                    part.unlink()
                    raise OSError(f"checkpoint file {rel}: content does not match its manifest")
                os.replace(part, path)
                fetched += 1
            else:
                kept += 1
            os.utime(path, ns=(entry.mtime_ns, entry.mtime_ns))
            st = path.stat()
            if node == self.node:
                self.mine[rel] = Entry(entry.sha256, st.st_size, st.st_mtime_ns)
            else:
                self.foreign[rel] = (st.st_size, st.st_mtime_ns)
        self._last_scan = scan(self.root)
        self._drop_orphans()
        if manifests:
            self.say(
                f"restored {fetched + kept} file(s) of {len(manifests)} node(s) into "
                f"{self.root} ({fetched} fetched, {kept} already there)"
            )
        return {"files": fetched + kept, "fetched": fetched, "nodes": len(manifests)}

    def _drop_orphans(self) -> None:
        """Delete this node's objects that its manifest does not name: what an upload cut
        short left behind (only this node writes under its prefix)."""
        objects = f"{self._node_prefix(self.node)}objects/"
        named = {entry.sha256 for entry in self.mine.values()}
        for key in list(self.bucket.list(objects)):
            if key[len(objects) :] not in named:
                self.bucket.delete(key)

    def upload(self, *, final: bool = False) -> dict[str, float]:
        """One round: objects of stable new/changed files, then the manifest, then cleanup."""
        with self._lock:
            return self._upload(final)

    def _upload(self, final: bool) -> dict[str, float]:
        started = time.monotonic()
        sent_before = self.bucket.sent_bytes
        now = scan(self.root) if self.root.is_dir() else {}
        ready = set(now) if final else stable(self._last_scan, now)
        self._last_scan = now
        delay = float(os.environ.get(DELAY_ENV) or 0)
        new: dict[str, Entry] = {}
        have = {entry.sha256 for entry in self.mine.values()}
        objects = 0
        for rel, st in sorted(now.items()):
            if self.foreign.get(rel) == st:
                continue  # another node's file, as restored
            old = self.mine.get(rel)
            if old is not None and (old.size, old.mtime_ns) == st:
                new[rel] = old
                continue
            if rel not in ready:
                if old is not None:
                    new[rel] = old  # still changing: the last uploaded content stands
                continue
            path = self.root / rel
            try:
                digest = sha256_file(path)
                if digest not in have:
                    with path.open("rb") as handle:
                        key = f"{self._node_prefix(self.node)}objects/{digest}"
                        self.bucket.put_file(key, handle, st[0], digest)
                    have.add(digest)
                    objects += 1
                    if delay:
                        self.say(f"uploaded object {objects}: {rel}")
                        time.sleep(delay)
                after = path.stat()
            except FileNotFoundError:
                continue  # deleted meanwhile
            except OSError:
                # A multipart upload aborts when the file changes under it: as below, the
                # next round takes it. Any other failure ends the round.
                try:
                    after = path.stat()
                except FileNotFoundError:
                    continue
                if (after.st_size, after.st_mtime_ns) == st:
                    raise
            if (after.st_size, after.st_mtime_ns) != st:
                if old is not None:
                    new[rel] = old
                continue  # changed while read: the next round takes it
            new[rel] = Entry(digest, st[0], st[1])
        if new == self.mine:
            return {}
        self.bucket.put_bytes(
            f"{self._node_prefix(self.node)}{MANIFEST}", manifest_bytes(self.node, new)
        )
        dropped = {e.sha256 for e in self.mine.values()} - {e.sha256 for e in new.values()}
        self.mine = new
        for digest in sorted(dropped):
            self.bucket.delete(f"{self._node_prefix(self.node)}objects/{digest}")
        stats = {
            "objects": float(objects),
            "bytes": float(self.bucket.sent_bytes - sent_before),
            "seconds": time.monotonic() - started,
            "files": float(len(new)),
        }
        self.rounds.append(stats)
        return stats

    def run_until(self, stop: threading.Event, poll_s: float = POLL_S) -> None:
        """Upload every ``poll_s`` until ``stop`` is set; errors are said, never raised."""
        while not stop.wait(poll_s):
            try:
                self.upload()
            except (OSError, ValueError) as err:
                self.say(f"upload failed ({err}); trying again in {poll_s:g}s")

    def final(self) -> None:
        try:
            stats = self.upload(final=True)
        except (OSError, ValueError) as err:
            self.say(f"the final upload failed: {err}")
            return
        if stats:
            self.say(
                f"uploaded {len(self.mine)} file(s) to s3://{self.bucket_name()}/"
                f"{self._node_prefix(self.node)} ({int(stats['bytes'])} B sent)"
            )

    def bucket_name(self) -> str:
        return self.bucket.base.rsplit("/", 1)[-1].split(".", 1)[0]


def from_settings(
    node_dir: Path, checkpoint_dir: str, node: int, credentials: Credentials | None = None
) -> Sync | None:
    """The node's Sync for ``checkpoint_dir`` (its NAME is the folder's name), from the
    node's settings file; None when the node has none (no S3 for checkpoints).
    ``credentials``: the operator's, from the agent's stdin, for a store whose settings say
    its nodes have no role of their own (``"credentials": "operator"``: the ssh target)."""
    path = node_dir / SETTINGS_FILE
    if not checkpoint_dir or not path.is_file():
        return None
    settings = json.loads(path.read_text(encoding="utf-8"))
    _bucket, prefix = parse_url(str(settings["url"]))
    name = Path(checkpoint_dir).name
    # An emulator's stand-in nodes have no instance role: its dummy keys (never real ones).
    dummy = settings.get("emulator_access_key"), settings.get("emulator_secret_key")
    env = None
    if all(dummy):
        env = {"AWS_ACCESS_KEY_ID": str(dummy[0]), "AWS_SECRET_ACCESS_KEY": str(dummy[1])}
    if settings.get("credentials") == OPERATOR_CREDENTIALS:
        if credentials is None:
            raise ValueError(
                f"{settings['url']} is reached with the operator's credentials, sent with each "
                "job; this job's agent got none (start it with `skyinfra run` from a shell "
                "with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY set)"
            )
        env = credentials.as_environ()
    bucket = Bucket(str(settings["bucket_url"]), str(settings["region"]), CredentialSource(env))
    return Sync(bucket, f"{prefix}/{name}", Path(checkpoint_dir), node)


def main(argv: list[str]) -> int:
    """``skyinfra-runtime checkpoint-sync``: restore, then upload every --poll seconds until
    SIGTERM or SIGINT, then the final upload (what a job's agent does around its launcher)."""
    parser = argparse.ArgumentParser(prog="skyinfra-runtime checkpoint-sync")
    parser.add_argument("--dir", required=True, help="the checkpoint directory")
    parser.add_argument("--url", required=True, help="s3://bucket/prefix of the set")
    parser.add_argument("--bucket-url", required=True, help="how the bucket is reached")
    parser.add_argument("--region", required=True)
    parser.add_argument("--node", type=int, required=True)
    parser.add_argument("--poll", type=float, default=POLL_S)
    parser.add_argument("--once", action="store_true", help="restore, one final upload, exit")
    ns = parser.parse_args(argv)
    try:
        _bucket, prefix = parse_url(ns.url)
    except ValueError as err:
        print(f"skyinfra-runtime checkpoint-sync: --url: {err}", file=sys.stderr)
        return 2
    bucket = Bucket(ns.bucket_url, ns.region, CredentialSource())
    sync = Sync(bucket, prefix, Path(ns.dir), ns.node)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    sync.restore()
    print(json.dumps({"event": "restored"}), flush=True)
    if not ns.once:
        sync.run_until(stop, ns.poll)
    sync.final()
    print(json.dumps({"event": "done", "rounds": sync.rounds}), flush=True)
    return 0
