"""The ssh target: machines the user already has (a lab's servers, VMs rented by hand),
enrolled over SSH by Terraform's ``terraform_data`` with file and remote-exec provisioners
(infra/modules/ssh). No root, no sudo, no Docker, no agent: each node is a folder under the
login user's home (``~/.skyinfra/<cluster>/node-<i>``) with its own venv, made by the bootstrap
every target runs; `down` ends the node's processes, removes the folder and checks, host by
host, that nothing is left.

The node transport is the SSH transport every SSH-reached target shares
(skyinfra/transport/ssh.py: paramiko, process groups recorded in the node's pids/), each node
rooted at its folder; host keys are the ones pinned at first
contact (contact.py) in the workspace's known_hosts.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from skyinfra import timeline
from skyinfra.errors import (
    ConfigError,
    SkyinfraError,
    TerraformError,
    UnsupportedByTarget,
    WorkspaceError,
)
from skyinfra.spec import ClusterSpec
from skyinfra.targets.base import (
    Apply,
    Ask,
    CheckpointListing,
    CheckpointSetInfo,
    Echo,
    InterruptRequest,
    Shell,
    TargetOptions,
)
from skyinfra.targets.ssh import enrol
from skyinfra.targets.ssh.contact import KNOWN_HOSTS, contact, write_known_hosts
from skyinfra.targets.ssh.spec import SshDeclaration, SshSpec, check_key_file
from skyinfra.topology import Topology
from skyinfra.transport.bootstrap import node_shell_line
from skyinfra.transport.ssh import ReadinessProbe, SshKeys, SshTransport
from skyinfra.transport.ssh import SshTarget as Login
from skyinfra.wheel import build_runtime_wheel
from skyinfra.workspace import Workspace

if TYPE_CHECKING:
    from skyinfra.review.cost import SpotPrices
    from skyinfra.run.head_recovery import HeadRecovery
    from skyinfra.targets.base import Target
    from skyinfra.terraform import EngineFactory, PlanSummary

# The workspace's record of the enrolled hosts (index, host, home, node folder, key), written
# by `up` before it applies: how the transport and `down` find each node's folder.
HOSTS_FILE = "hosts.json"
SSH_CONFIG_FILE = "ssh_config"


def operator_uv() -> str:
    """The operator's uv binary (the `uv` package, a dependency of skyinfra), copied to each
    host: the node's venv is made with it."""
    try:
        import uv

        return str(uv.find_uv_bin())
    except (ImportError, FileNotFoundError) as err:
        raise ConfigError(
            "uv", None, f"the uv package installed beside skyinfra (pip install uv): {err}"
        ) from None


def _hosts(ws: Workspace) -> dict[int, dict[str, Any]]:
    path = ws.path / HOSTS_FILE
    if not path.is_file():
        raise WorkspaceError(
            f"cluster {ws.name!r}: {path} is missing; it is written by `skyinfra up` (run it)"
        )
    return {int(h["index"]): h for h in ws.read_json(path)["hosts"]}


# The enrolment's markers (provision.sh, run by Terraform's provisioner; no cloud-init).
ENROLMENT_PROBE = ReadinessProbe(
    ready_marker="/" + enrol.READY_MARKER,
    failed_marker="/" + enrol.FAILED_MARKER,
    cloud_init_status=None,
    bootstrap_log="`skyinfra up`'s output (the enrolment runs there)",
)


def _transport(
    ws: Workspace, spec: ClusterSpec, timeout_s: float | None = None, *, rooted: bool = True
) -> SshTransport:
    section = spec.section_as(SshSpec)
    hosts = _hosts(ws)
    logins = {
        i: Login(host=h["host"], user=section.user, port=section.port,
                 root=h["node_dir"] if rooted else "")
        for i, h in hosts.items()
    }  # fmt: skip
    return SshTransport(
        logins,
        keys=SshKeys(key_path=Path(section.key).expanduser(), known_hosts=ws.path / KNOWN_HOSTS),
        node_root="" if rooted else "/",
        connect_timeout_s=timeout_s or 20.0,
        probe=ENROLMENT_PROBE,
    )


# Shell: what of a node is left on its host: the folder, and processes started in it or from
# its venv ($1: node folder). One line each.
_LEFT_SCRIPT = r"""
nd="$1"; top="$(dirname "$(dirname "$nd")")"
[ -e "$nd" ] && echo "folder $nd"
for p in /proc/[0-9]*; do
    cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
    cmd=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null) || continue
    case "$cwd/ $cmd" in *"$nd/"*) echo "process ${p#/proc/}: $cmd" ;; esac
done
[ -e "$top" ] && [ -z "$(ls -A "$top" 2>/dev/null)" ] && echo "empty folder $top"
exit 0
"""

# Shell ($1: node folder): remove the node as the destroy provisioner does (its processes
# ended, its folder removed: Terraform runs no destroy provisioner for a tainted resource, the
# one a failed enrolment leaves in state), what that provisioner leaves beside it (its
# script's empty copy) and the folders above it once empty: ~/.skyinfra/<cluster>, ~/.skyinfra.
_TIDY_SCRIPT = r"""
nd="$1"; cluster="$(dirname "$nd")"; top="$(dirname "$cluster")"
if [ -f "$nd/.enrol/bootstrap-node.sh" ]; then
    bash "$nd/.enrol/bootstrap-node.sh" --remove --node-dir "$nd" >/dev/null || exit 1
fi
rm -rf "$nd"
rm -f "$cluster/.$(basename "$nd")-remove.sh"
rmdir "$cluster" 2>/dev/null || true
rmdir "$top" 2>/dev/null || true
exit 0
"""


def _tidy(node_dir: str) -> str:
    return f"sh -c {shlex.quote(_TIDY_SCRIPT)} _ {shlex.quote(node_dir)}"


class SshHostsTarget(SshDeclaration):
    """Nodes on the user's own machines, reached over SSH; its name, spec table and (no)
    flags are its declaration's (spec.py)."""

    # Enrolment runs inside `up`: a node not ready by then never will be.
    wait_ready_s: ClassVar[float] = 0.0

    def _prepare(
        self, spec: ClusterSpec, ws: Workspace, echo: Echo
    ) -> tuple[dict[str, str], str, list[dict[str, Any]]]:
        section = spec.section_as(SshSpec)
        hosts = section.node_hosts(spec.nodes)
        facts, known = contact(section, hosts, ws.path / KNOWN_HOSTS, echo=echo)
        timeline.lap("first contact")
        wheel = build_runtime_wheel()
        timeline.lap("wheel build")
        ctx = enrol.context(
            spec, facts, wheel_path=wheel.path, wheel_sha256=wheel.sha256, uv_path=operator_uv()
        )
        for line in ctx["host_lines"]:
            echo(f"[skyinfra] enrols {line}")
        records = [
            {
                "index": f.index,
                "host": f.host,
                "home": f.home,
                "node_dir": f.node_dir(spec.name),
                "python": f.python_version,
                "host_key": f.host_key,
            }
            for f in facts
        ]
        return enrol.files(ctx), known, records

    def render(
        self, spec: ClusterSpec, ws: Workspace, *, echo: Echo, options: TargetOptions
    ) -> dict[str, str]:
        """Contacts every host first (its key pinned, its home and Python read): the root
        module names each host's folder and key. Writes nothing into the workspace."""
        return self._prepare(spec, ws, echo)[0]

    def launch(
        self,
        spec: ClusterSpec,
        ws: Workspace,
        *,
        echo: Echo,
        options: TargetOptions,
        apply: Apply,
        engine_factory: EngineFactory,
    ) -> tuple[PlanSummary, Topology]:
        """Contact, render once, record the pinned keys and the hosts, apply."""
        with timeline.stage("prepare"):
            files, known, records = self._prepare(spec, ws, echo)
        write_known_hosts(ws.path / KNOWN_HOSTS, known)
        ws.write_json(ws.path / HOSTS_FILE, {"hosts": records})
        try:
            return apply(files)
        except TerraformError:
            # Terraform says only that the remote command failed: say why, host by host, and
            # take off each host whose enrolment failed what it had put there.
            self._undo_failed_enrolments(ws, spec, echo)
            raise

    def _undo_failed_enrolments(self, ws: Workspace, spec: ClusterSpec, echo: Echo) -> None:
        """Each host whose bootstrap failed (its failed marker): what it said last, shown;
        its node removed (processes, folder). Hosts that enrolled stay, as Terraform's state
        says (`up` again, or `down`)."""
        nodes = _transport(ws, spec, rooted=False)
        try:
            for i, h in sorted(_hosts(ws).items()):
                marker = shlex.quote(posixpath.join(h["node_dir"], enrol.FAILED_MARKER))
                try:
                    said = nodes.check_call(i, f"if [ -f {marker} ]; then cat {marker}; fi")
                    if not said.strip():
                        continue
                    echo(f"[skyinfra] host {h['host']}: enrolment failed: {said.strip()}")
                    nodes.check_call(i, _tidy(h["node_dir"]))
                    echo(f"[skyinfra] host {h['host']}: removed {h['node_dir']}")
                except SkyinfraError as err:
                    echo(f"[skyinfra] host {h['host']}: could not look at {h['node_dir']}: {err}")
        finally:
            nodes.close()

    def transport(
        self,
        ws: Workspace,
        spec: ClusterSpec,
        topology: Topology,
        *,
        connect_timeout_s: float | None = None,
    ) -> SshTransport:
        return _transport(ws, spec, connect_timeout_s)

    def nodes_to_replace(
        self, ws: Workspace, spec: ClusterSpec, in_state: Callable[[], Sequence[str]]
    ) -> list[str]:
        """None yet: a host whose folder was removed by hand is found by `status` (failed);
        replacing it (and lost hosts) is left to the spare-hosts work of issue 45."""
        return []

    def after_down(self, ws: Workspace, spec: ClusterSpec, *, echo: Echo) -> None:
        """The destroy provisioner ended each node's processes and removed its folder; a
        node Terraform held as tainted (no destroy provisioner runs for it) is removed here
        the same way, and what the provisioner leaves beside the folder (its script's empty
        copy) and the empty folders above go too, host by host."""
        if not (ws.path / HOSTS_FILE).is_file():
            return
        nodes = _transport(ws, spec, rooted=False)
        try:
            for i, h in sorted(_hosts(ws).items()):
                try:
                    nodes.check_call(i, _tidy(h["node_dir"]))
                except SkyinfraError as err:
                    echo(f"[skyinfra] host {h['host']}: could not tidy {h['node_dir']}: {err}")
        finally:
            nodes.close()

    def leftovers(self, ws: Workspace, spec: ClusterSpec, *, echo: Echo) -> list[str]:
        """Asked of every host: the node's folder, processes in it or from its venv, and the
        empty ~/.skyinfra folders. Each host's answer is said; a host that cannot be reached
        is named with what is left to clean there."""
        if not (ws.path / HOSTS_FILE).is_file():
            return []
        hosts = _hosts(ws)
        nodes = _transport(ws, spec, rooted=False)

        def ask(i: int) -> list[str]:
            h = hosts[i]
            try:
                out = nodes.check_call(
                    i, f"sh -c {shlex.quote(_LEFT_SCRIPT)} _ {shlex.quote(h['node_dir'])}"
                )
            except SkyinfraError as err:
                return [
                    f"host {h['host']}: not reachable ({err}); left to clean there: the node "
                    f"folder {h['node_dir']}, and the node's processes may still run there "
                    "(`skyinfra down` again once the host answers removes both)"
                ]
            found = [f"host {h['host']}: {line}" for line in out.splitlines() if line.strip()]
            if not found:
                echo(f"[skyinfra] host {h['host']}: nothing left ({h['node_dir']} gone, "
                     "no process of the node)")  # fmt: skip
            return found

        try:
            with ThreadPoolExecutor(max_workers=min(16, len(hosts) or 1)) as pool:
                return [line for lines in pool.map(ask, sorted(hosts)) for line in lines]
        finally:
            nodes.close()

    def orphans(
        self, workspaces: Sequence[Workspace], specs: Sequence[ClusterSpec], *, echo: Echo
    ) -> list[str]:
        """Nothing searched: the hosts carry no tags; `down`'s own check (leftovers) asks
        each host of a cluster."""
        return []

    def spot_prices(self, spec: ClusterSpec, echo: Echo) -> SpotPrices | None:
        """None: the user's own machines have no market."""
        return None

    def status_details(self, ws: Workspace, spec: ClusterSpec) -> dict[str, Any]:
        """The enrolled hosts, node 0 first."""
        path = ws.path / HOSTS_FILE
        if not path.is_file():
            return {}
        return {"hosts": [h["host"] for h in ws.read_json(path)["hosts"]]}

    def node_installs(self, ws: Workspace, spec: ClusterSpec) -> dict[str, str]:
        """{}: the nodes install the runtime wheel and the spec's packages only."""
        return {}

    def applies_as_is(self, ws: Workspace) -> bool:
        """False: the workspace is the operator's, rendered by `up`."""
        return False

    def head_recovery(self, ws: Workspace, spec: ClusterSpec) -> HeadRecovery | None:
        """None: lost hosts are not replaced yet (spare_hosts: a later part of issue 45)."""
        return None

    def _options(self, ws: Workspace, spec: ClusterSpec) -> list[str]:
        key = check_key_file(spec.section_as(SshSpec)).resolve()
        return [
            "-i", str(key),
            "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={(ws.path / KNOWN_HOSTS).resolve()}",
            "-o", "StrictHostKeyChecking=yes",
        ]  # fmt: skip

    def shell(
        self,
        ws: Workspace,
        spec: ClusterSpec,
        topology: Topology,
        node: int,
        command: Sequence[str],
    ) -> Shell:
        """ssh to the host (held to its pinned key): a login shell, or ``command`` run in
        the node's folder with its venv first on PATH and SKYINFRA_NODE*."""
        section = spec.section_as(SshSpec)
        h = _hosts(ws)[node]
        argv = ["ssh", *self._options(ws, spec), "-p", str(section.port),
                f"{section.user}@{h['host']}"]  # fmt: skip
        if not command:
            return Shell(argv)
        return Shell([*argv, node_shell_line(h["node_dir"], node, command)])

    def ssh_config(
        self, ws: Workspace, spec: ClusterSpec, topology: Topology, *, echo: Echo
    ) -> str:
        """A ``Host <cluster>-node-<i>`` block per host, held to the pinned keys; also
        written to the workspace's ssh_config (0600)."""
        section = spec.section_as(SshSpec)
        options = self._options(ws, spec)
        lines = [
            f"# skyinfra: cluster {spec.name} ({spec.provider}), written by "
            "`skyinfra ssh --config`.",
            f"# Include it from ~/.ssh/config: Include {(ws.path / SSH_CONFIG_FILE).resolve()}",
        ]
        for i, h in sorted(_hosts(ws).items()):
            lines += [
                "",
                f"Host {spec.name}-node-{i}",
                f"    HostName {h['host']}",
                f"    Port {section.port}",
                f"    User {section.user}",
                f"    IdentityFile {options[1]}",
                "    IdentitiesOnly yes",
                f"    {options[5].replace('=', ' ', 1)}",
                "    StrictHostKeyChecking yes",
            ]
        text = "\n".join(lines) + "\n"
        ws.write_text(ws.path / SSH_CONFIG_FILE, text)
        return text

    def interrupt_node(
        self,
        ws: Workspace,
        spec: ClusterSpec,
        topology: Topology,
        request: InterruptRequest,
        *,
        ask: Ask | None,
        echo: Echo,
    ) -> None:
        """Unsupported yet: the hosts have no interruption-notice stand-in."""
        raise UnsupportedByTarget(
            self.name,
            "interrupt_node",
            f"drill: the {self.name} target's hosts have no interruption-notice stand-in "
            "yet; stop a job with `skyinfra cancel` instead",
        )

    def _no_checkpoint_sets(self, verb: str) -> UnsupportedByTarget:
        return UnsupportedByTarget(
            self.name,
            verb,
            f"checkpoints: the {self.name} target keeps no checkpoint sets yet (each host's "
            "job folder holds what the job wrote); list them with `skyinfra ssh`",
        )

    def checkpoint_sets(self, ws: Workspace, spec: ClusterSpec) -> CheckpointListing:
        raise self._no_checkpoint_sets("checkpoint_sets")

    def checkpoint_set(self, ws: Workspace, spec: ClusterSpec, name: str) -> CheckpointSetInfo:
        raise self._no_checkpoint_sets("checkpoint_set")

    def delete_checkpoint_set(
        self, ws: Workspace, spec: ClusterSpec, found: CheckpointSetInfo
    ) -> str:
        raise self._no_checkpoint_sets("delete_checkpoint_set")


if TYPE_CHECKING:
    _satisfies_the_protocol: Target = SshHostsTarget()
