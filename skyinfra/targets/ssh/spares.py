"""Lost hosts and the spares that stand in for them (pure: no SSH, no files).

A host enrolled as node ``i`` that stops answering is *lost*; the next spare of
``ssh.spare_hosts`` (in the spec's order) that is neither enrolled nor lost itself is enrolled
as node ``i`` in its place. The workspace's hosts.json keeps each lost host with the spare
that replaced it, so that node ``i`` stays on the spare (``assigned_hosts``) while the spec
still lists the lost host, and `down` can tidy the lost host once it answers again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyinfra.errors import NoSpareLeft
from skyinfra.targets.ssh.spec import SshSpec


@dataclass(frozen=True)
class LostHost:
    """Host ``host`` was node ``index`` until it stopped answering; ``replaced_by`` is the
    spare enrolled in its place. ``node_dir``: its node's folder there (left to clean)."""

    index: int
    host: str
    replaced_by: str
    node_dir: str
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "host": self.host,
            "replaced_by": self.replaced_by,
            "node_dir": self.node_dir,
            "why": self.why,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LostHost:
        return cls(
            index=int(data["index"]),
            host=str(data["host"]),
            replaced_by=str(data["replaced_by"]),
            node_dir=str(data["node_dir"]),
            why=str(data.get("why", "")),
        )


def _same(a: str, b: str) -> bool:
    return a.lower().rstrip(".") == b.lower().rstrip(".")


def assigned_hosts(section: SshSpec, nodes: int, lost: Sequence[LostHost]) -> tuple[str, ...]:
    """The host each node is on now: the spec's, or the spare that replaced it (and the
    spare that replaced that spare, in turn)."""
    out = []
    for host in section.node_hosts(nodes):
        seen: list[str] = []
        while not any(_same(host, s) for s in seen):
            seen.append(host)
            host = next((x.replaced_by for x in lost if _same(x.host, host)), host)
        out.append(host)
    return tuple(out)


def spares_left(section: SshSpec, assigned: Sequence[str], lost: Sequence[LostHost]) -> list[str]:
    """The spares, in the spec's order, that are neither enrolled nor lost."""
    taken = [*assigned, *(x.host for x in lost)]
    return [s for s in section.spare_hosts if not any(_same(s, t) for t in taken)]


def choose_spares(
    section: SshSpec,
    assigned: Sequence[str],
    lost_before: Sequence[LostHost],
    lost_now: Mapping[int, str],
    passed_over: Mapping[str, str] | None = None,
) -> dict[int, str]:
    """A spare for each node of ``lost_now`` (node index -> why its host is lost), lowest
    node first, the spares in the spec's order but those of ``passed_over`` (spare -> what
    happened, e.g. "did not answer: timed out" or "cannot be enrolled: ..."). NoSpareLeft
    naming the lost host(s) that get none, every spare passed over and why, and what to
    do."""
    passed = dict(passed_over or {})
    left = [s for s in spares_left(section, assigned, lost_before) if s not in passed]
    chosen: dict[int, str] = {}
    for index in sorted(lost_now):
        if not left:
            missing = [i for i in sorted(lost_now) if i not in chosen]
            names = ", ".join(f"host {assigned[i]} (node-{i})" for i in missing)
            raise NoSpareLeft(
                f"{names} lost: it stopped answering ({lost_now[missing[0]]}), and no spare "
                f"is left to enrol in its place ({_why_none(section, passed)}): "
                + ("bring the host or one of those spares back (a spare must be up, accept "
                   "ssh.key for ssh.user and have Python 3.10 or newer), or add a host to "
                   "ssh.spare_hosts, and run `skyinfra up`; nothing was enrolled" if passed
                   else "bring the host back, or add a host to ssh.spare_hosts and run "
                   "`skyinfra up`")
            )  # fmt: skip
        chosen[index] = left.pop(0)
    return chosen


def _why_none(section: SshSpec, passed: Mapping[str, str]) -> str:
    if not section.spare_hosts:
        return "ssh.spare_hosts lists none"
    tried = "; ".join(f"spare {s} {why}" for s, why in passed.items())
    others = [s for s in section.spare_hosts if s not in passed]
    taken = f"ssh.spare_hosts {', '.join(others)}: each is enrolled or lost" if others else ""
    return "; ".join(part for part in (tried, taken) if part)
