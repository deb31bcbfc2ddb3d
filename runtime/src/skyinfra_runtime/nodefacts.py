"""``skyinfra-runtime node-facts --node-dir D``: what `skyinfra status` shows of a node beyond
its readiness, in one JSON line, read on the node: its Spot interruption (spot.py) and the
standby workers waiting there with their resident memory (standbys.py), read from /proc.

``NodeFacts`` is the one definition of that line: the node writes it, the operator reads it
(skyinfra.lifecycle.cluster_status). Standard library only: this runs on the nodes.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyinfra_runtime import spot, standbys

# A waiting standby's socket (warm.socket_path): w<slot>-<pid>.sock.
_SOCKET = re.compile(r"w(\d+)-(\d+)\.sock")


@dataclass(frozen=True)
class WaitingStandby:
    """A standby worker waiting for a job: its slot, its process, the memory it holds (the
    frameworks it imported) and since when it waits (its socket's time)."""

    slot: int
    pid: int
    rss_bytes: int
    waiting_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "slot": self.slot,
            "pid": self.pid,
            "rss_bytes": self.rss_bytes,
            "waiting_s": round(self.waiting_s, 1),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WaitingStandby:
        return cls(
            int(data.get("slot", 0)),
            int(data.get("pid", 0)),
            int(data.get("rss_bytes", 0)),
            float(data.get("waiting_s", 0.0)),
        )


@dataclass(frozen=True)
class NodeFacts:
    """A node's Spot interruption notice (None: none) and its waiting standbys."""

    interrupted: dict[str, Any] | None = None
    standbys: tuple[WaitingStandby, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "interrupted": self.interrupted,
            "standbys": [s.to_dict() for s in self.standbys],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeFacts:
        notice = data.get("interrupted")
        listed = data.get("standbys")
        return cls(
            dict(notice) if isinstance(notice, Mapping) and notice else None,
            tuple(
                WaitingStandby.from_dict(s)
                for s in (listed if isinstance(listed, list) else [])
                if isinstance(s, Mapping)
            ),
        )


def resident_bytes(pid: int) -> int | None:
    """A process's resident memory (VmRSS), None when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def waiting_standbys(node_dir: str | Path) -> tuple[WaitingStandby, ...]:
    """The node's standbys that wait for a job (a socket, a live process), by slot."""
    found = []
    for sock in standbys.folder(node_dir).glob("w*-*.sock"):
        match = _SOCKET.fullmatch(sock.name)
        if match is None:
            continue
        slot, pid = int(match[1]), int(match[2])
        rss = resident_bytes(pid)
        try:
            since = sock.lstat().st_mtime
        except OSError:
            continue  # taken meanwhile
        if rss is not None:
            found.append(WaitingStandby(slot, pid, rss, max(0.0, time.time() - since)))
    return tuple(sorted(found, key=lambda s: (s.slot, s.pid)))


def node_facts(node_dir: str | Path) -> NodeFacts:
    return NodeFacts(spot.node_interruption(node_dir), waiting_standbys(node_dir))


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="skyinfra-runtime node-facts")
    parser.add_argument("--node-dir", required=True)
    ns = parser.parse_args(argv)
    print(json.dumps(node_facts(ns.node_dir).to_dict()))
    return 0
