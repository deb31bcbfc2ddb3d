"""The workspace's record of the ssh target's hosts (hosts.json: the enrolled ones and the
lost ones a spare replaced) and the SSH transport to them, rooted at each node's folder."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from skyinfra.errors import WorkspaceError
from skyinfra.spec import ClusterSpec
from skyinfra.targets.ssh import enrol
from skyinfra.targets.ssh.contact import KNOWN_HOSTS
from skyinfra.targets.ssh.spares import LostHost, spares_left
from skyinfra.targets.ssh.spec import SshSpec
from skyinfra.transport.base import Readiness
from skyinfra.transport.ssh import ReadinessProbe, SshKeys, SshTransport
from skyinfra.transport.ssh import SshTarget as Login
from skyinfra.workspace import Workspace

# The workspace's record of the enrolled hosts (index, host, home, node folder, key), written
# by `up` before it applies: how the transport and `down` find each node's folder.
HOSTS_FILE = "hosts.json"


def enrolled(ws: Workspace) -> dict[int, dict[str, Any]]:
    path = ws.path / HOSTS_FILE
    if not path.is_file():
        raise WorkspaceError(
            f"cluster {ws.name!r}: {path} is missing; it is written by `skyinfra up` (run it)"
        )
    return {int(h["index"]): h for h in ws.read_json(path)["hosts"]}


def lost_hosts(ws: Workspace) -> list[LostHost]:
    """The hosts lost and replaced by a spare, as hosts.json keeps them (oldest first)."""
    path = ws.path / HOSTS_FILE
    if not path.is_file():
        return []
    return [LostHost.from_dict(x) for x in ws.read_json(path).get("lost", [])]


def write_hosts(
    ws: Workspace, records: Sequence[Mapping[str, Any]], lost: Sequence[LostHost]
) -> None:
    ws.write_json(
        ws.path / HOSTS_FILE, {"hosts": list(records), "lost": [x.to_dict() for x in lost]}
    )


# The enrolment's markers (provision.sh, run by Terraform's provisioner; no cloud-init).
ENROLMENT_PROBE = ReadinessProbe(
    ready_marker="/" + enrol.READY_MARKER,
    failed_marker="/" + enrol.FAILED_MARKER,
    cloud_init_status=None,
    bootstrap_log="`skyinfra up`'s output (the enrolment runs there)",
)


class HostsTransport(SshTransport):
    """The SSH transport to the enrolled hosts. A host that does not answer reads as lost
    (failed, naming it and the spare that would stand in): its enrolment ran inside `up`, so
    it is not still starting, as an AWS node may be."""

    def __init__(self, *args: Any, lost_words: Mapping[int, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lost_words = dict(lost_words)

    def readiness(self, node: int) -> Readiness:
        found = super().readiness(node)
        if found.state != "unreachable" or node not in self._lost_words:
            return found
        return Readiness("failed", f"{self._lost_words[node]} ({found.detail})")


def lost_words(section: SshSpec, host: str, spares: Sequence[str]) -> str:
    """What `status` (and `run`) say of node's host that stopped answering (``spares``: those
    left, in the order `up` tries them)."""
    if spares:
        spare = (
            f"spare {spares[0]}" if len(spares) == 1
            else f"the first of spares {', '.join(spares)} that answers"
        )  # fmt: skip
        return (
            f"host {host} lost: it stopped answering over SSH; `skyinfra jobs recover JOB` "
            f"(a job that lost it) or `skyinfra up` enrols {spare} in its place"
        )
    return (
        f"host {host} lost: it stopped answering over SSH, and no spare is left "
        "(ssh.spare_hosts): bring the host back, or add a spare and run `skyinfra up`"
    )


def _keys(ws: Workspace, section: SshSpec) -> SshKeys:
    return SshKeys(key_path=Path(section.key).expanduser(), known_hosts=ws.path / KNOWN_HOSTS)


def node_transport(
    ws: Workspace, spec: ClusterSpec, timeout_s: float | None = None, *, rooted: bool = True
) -> HostsTransport:
    section = spec.section_as(SshSpec)
    hosts = enrolled(ws)
    logins = {
        i: Login(host=h["host"], user=section.user, port=section.port,
                 root=h["node_dir"] if rooted else "")
        for i, h in hosts.items()
    }  # fmt: skip
    spares = spares_left(section, [h["host"] for h in hosts.values()], lost_hosts(ws))
    return HostsTransport(
        logins,
        keys=_keys(ws, section),
        node_root="" if rooted else "/",
        connect_timeout_s=timeout_s or 20.0,
        probe=ENROLMENT_PROBE,
        lost_words={i: lost_words(section, h["host"], spares) for i, h in hosts.items()},
    )


def lost_transport(ws: Workspace, spec: ClusterSpec, lost: Sequence[LostHost]) -> SshTransport:
    """The lost hosts, dialled as ``lost``'s positions (`down` tidies them once they answer
    again; held to the keys pinned when they were enrolled)."""
    section = spec.section_as(SshSpec)
    logins = {
        k: Login(host=x.host, user=section.user, port=section.port, root="")
        for k, x in enumerate(lost)
    }
    return SshTransport(logins, keys=_keys(ws, section), node_root="/", connect_timeout_s=10.0)


def left_on_host(node_dir: str) -> str:
    """The command that lists what of a node is left on its host (one line each)."""
    return f"sh -c {shlex.quote(_LEFT_SCRIPT)} _ {shlex.quote(node_dir)}"


# Shell: what of a node is left on its host: the folder (or what of it its removal, which
# renames it first, still deletes), the destroy provisioner's script beside it, and processes
# started in it or from its venv ($1: node folder). One line each.
# Once the node's folder is gone, what its destroy provisioner leaves beside it (its script's
# empty copy) and the folders above, once empty, go first: a partial `down` (another host
# did not answer) asks here without after_down's tidy.
_LEFT_SCRIPT = r"""
nd="$1"; cluster="$(dirname "$nd")"; top="$(dirname "$cluster")"
script="$cluster/.$(basename "$nd")-remove.sh"
if [ ! -e "$nd" ]; then
    [ -f "$script" ] && [ ! -s "$script" ] && rm -f "$script"
    rmdir "$cluster" 2>/dev/null; rmdir "$top" 2>/dev/null
fi
[ -e "$nd" ] && echo "folder $nd"
for t in "$cluster/.$(basename "$nd").removing-"*; do
    [ -e "$t" ] && echo "folder $t (the node's folder, still being deleted)"
done
[ -e "$script" ] && echo "file $script"
for p in /proc/[0-9]*; do
    cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
    # 2>/dev/null first: the shell reports a failed `<` (the process ended meanwhile) on the
    # stderr it has then.
    cmd=$(tr '\0' ' ' 2>/dev/null < "$p/cmdline") || continue
    case "$cwd/ $cmd" in *"$nd/"*) echo "process ${p#/proc/}: $cmd" ;; esac
done
[ -e "$top" ] && [ -z "$(ls -A "$top" 2>/dev/null)" ] && echo "empty folder $top"
exit 0
"""

# Shell ($1: node folder): remove the node as the destroy provisioner does (its processes
# ended, its folder removed: Terraform runs no destroy provisioner for a tainted resource, the
# one a failed enrolment leaves in state), what that provisioner leaves beside it (its
# script's empty copy, what an interrupted node's own removal still deletes) and the folders
# above it once empty: ~/.skyinfra/<cluster>, ~/.skyinfra.
_TIDY_SCRIPT = r"""
nd="$1"; cluster="$(dirname "$nd")"; top="$(dirname "$cluster")"
if [ -f "$nd/.enrol/bootstrap-node.sh" ]; then
    bash "$nd/.enrol/bootstrap-node.sh" --remove --node-dir "$nd" >/dev/null || exit 1
fi
rm -rf "$nd" "$cluster/.$(basename "$nd").removing-"*
rm -f "$cluster/.$(basename "$nd")-remove.sh"
rmdir "$cluster" 2>/dev/null || true
rmdir "$top" 2>/dev/null || true
exit 0
"""


def tidy(node_dir: str) -> str:
    return f"sh -c {shlex.quote(_TIDY_SCRIPT)} _ {shlex.quote(node_dir)}"
