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

import os
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
    SpecError,
    TerraformError,
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
    WithoutLadder,
)
from skyinfra.targets.ssh import drill, enrol, replace
from skyinfra.targets.ssh.checkpoint_store import operator_credentials
from skyinfra.targets.ssh.contact import KNOWN_HOSTS, write_known_hosts
from skyinfra.targets.ssh.declaration import SshDeclaration
from skyinfra.targets.ssh.hosts import (
    HOSTS_FILE,
    enrolled,
    left_on_host,
    lost_hosts,
    node_transport,
    tidy,
    write_hosts,
)
from skyinfra.targets.ssh.spares import spares_left
from skyinfra.targets.ssh.spec import SshSpec, check_key_file
from skyinfra.topology import Topology
from skyinfra.transport.bootstrap import node_shell_line
from skyinfra.transport.ssh import SshTransport
from skyinfra.wheel import build_runtime_wheel
from skyinfra.workspace import Workspace

if TYPE_CHECKING:
    from skyinfra_runtime.s3 import Credentials

    from skyinfra.review.cost import PlannedPlace, SpotPrices
    from skyinfra.run.head_recovery import HeadRecovery
    from skyinfra.targets.base import Target
    from skyinfra.terraform import EngineFactory, PlanSummary

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


class SshHostsTarget(SshDeclaration, WithoutLadder):
    """Nodes on the user's own machines, reached over SSH; its name, spec table and (no)
    flags are its declaration's (spec.py)."""

    # Enrolment runs inside `up`: a node not ready by then never will be.
    wait_ready_s: ClassVar[float] = 0.0

    def _prepare(
        self, spec: ClusterSpec, ws: Workspace, echo: Echo, *, replacing: bool
    ) -> tuple[dict[str, str], replace.Reached, list[dict[str, Any]]]:
        section = spec.section_as(SshSpec)
        reached = replace.reach_hosts(spec, ws, echo, replacing=replacing)
        facts = reached.contacted.facts
        timeline.lap("first contact")
        wheel = build_runtime_wheel()
        timeline.lap("wheel build")
        spares = spares_left(section, [f.host for f in facts], reached.lost)
        wheel_path, uv_path = enrol.payload(wheel.path, wheel.sha256, Path(operator_uv()))
        ctx = enrol.context(
            spec, facts, wheel_path=wheel_path, wheel_sha256=wheel.sha256, uv_path=str(uv_path),
            spares=spares,
        )  # fmt: skip
        for line in ctx["host_lines"]:
            echo(f"[skyinfra] enrols {line}")
        if spares:
            echo(f"[skyinfra] spare hosts (enrolled only when a host is lost): {', '.join(spares)}")
        if section.checkpoints:
            echo(
                f"[skyinfra] checkpoint sets kept in {section.checkpoints.url} "
                f"({section.checkpoints.bucket_url()}), reached from the hosts with the AWS "
                "credentials of the shell that starts each job (sent with it, never written there)"
            )
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
        return enrol.files(ctx), reached, records

    def render(
        self, spec: ClusterSpec, ws: Workspace, *, echo: Echo, options: TargetOptions
    ) -> dict[str, str]:
        """Contacts every host first (its key pinned, its home and Python read; a spare in
        place of a lost one): the root module names each host's folder and key. Writes
        nothing into the workspace. A lost host is refused, naming `up` (`plan` would replace
        its node through a destroy that needs the host)."""
        return self._prepare(spec, ws, echo, replacing=False)[0]

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
        """Contact, render once, record the pinned keys and the hosts (a lost host's node
        taken out of the state for its spare), apply; the spares get the checkpoints."""
        self.store_credentials(spec)  # exit 2 before any host is dialled
        with timeline.stage("prepare"):
            files, reached, records = self._prepare(spec, ws, echo, replacing=True)
        was_enrolled = set(enrolled(ws)) if (ws.path / HOSTS_FILE).is_file() else set()
        write_known_hosts(ws.path / KNOWN_HOSTS, reached.contacted.known_hosts)
        write_hosts(ws, records, reached.lost)
        # Enrolled again on their hosts (nodes_to_replace): they get checkpoints as spares do.
        rebuilt = drill.gone_nodes(ws, spec, was_enrolled - set(reached.replaced))
        replace.forget_lost_nodes(ws, reached, engine_factory, echo)
        try:
            done = apply(files)
        except TerraformError:
            # Terraform says only that the remote command failed: say why, host by host, and
            # take off each host whose enrolment failed what it had put there.
            self._undo_failed_enrolments(ws, spec, echo)
            raise
        replace.seed_checkpoints(ws, spec, reached, echo, rebuilt)
        return done

    def _undo_failed_enrolments(self, ws: Workspace, spec: ClusterSpec, echo: Echo) -> None:
        """Each host whose bootstrap failed (its failed marker): what it said last, shown;
        its node removed (processes, folder). Hosts that enrolled stay, as Terraform's state
        says (`up` again, or `down`)."""
        nodes = node_transport(ws, spec, rooted=False)
        try:
            for i, h in sorted(enrolled(ws).items()):
                marker = shlex.quote(posixpath.join(h["node_dir"], enrol.FAILED_MARKER))
                try:
                    said = nodes.check_call(i, f"if [ -f {marker} ]; then cat {marker}; fi")
                    if not said.strip():
                        continue
                    echo(f"[skyinfra] host {h['host']}: enrolment failed: {said.strip()}")
                    nodes.check_call(i, tidy(h["node_dir"]))
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
        """Each node's host, rooted at its folder; one that does not answer reads as lost."""
        return node_transport(ws, spec, connect_timeout_s)

    def nodes_to_replace(
        self, ws: Workspace, spec: ClusterSpec, in_state: Callable[[], Sequence[str]]
    ) -> list[str]:
        """Nodes whose host answers but whose folder is gone (a drill's interrupted node, a
        folder removed by hand): enrolled again there (drill.py). A lost host's node is
        replaced by a spare when `up` contacts the hosts (replace.py), not here."""
        if not (ws.path / HOSTS_FILE).is_file():
            return []
        nodes = drill.node_indexes(in_state())
        return [nodes[i] for i in drill.gone_nodes(ws, spec, nodes)]

    def after_down(self, ws: Workspace, spec: ClusterSpec, *, echo: Echo) -> None:
        """The destroy provisioner ended each node's processes and removed its folder; a
        node Terraform held as tainted (no destroy provisioner runs for it) is removed here
        the same way, and what the provisioner leaves beside the folder (its script's empty
        copy) and the empty folders above go too, host by host."""
        if not (ws.path / HOSTS_FILE).is_file():
            return
        nodes = node_transport(ws, spec, rooted=False)
        try:
            for i, h in sorted(enrolled(ws).items()):
                try:
                    nodes.check_call(i, tidy(h["node_dir"]))
                except SkyinfraError as err:
                    echo(f"[skyinfra] host {h['host']}: could not tidy {h['node_dir']}: {err}")
        finally:
            nodes.close()
        replace.tidy_lost(ws, spec)

    def leftovers(self, ws: Workspace, spec: ClusterSpec, *, echo: Echo) -> list[str]:
        """Asked of every host: the node's folder, processes in it or from its venv, and the
        empty ~/.skyinfra folders. Each host's answer is said; a host that cannot be reached
        is named with what is left to clean there."""
        if not (ws.path / HOSTS_FILE).is_file():
            return []
        hosts = enrolled(ws)
        nodes = node_transport(ws, spec, rooted=False)

        def ask(i: int) -> list[str]:
            h = hosts[i]
            try:
                out = nodes.check_call(i, left_on_host(h["node_dir"]))
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
                left = [line for lines in pool.map(ask, sorted(hosts)) for line in lines]
        finally:
            nodes.close()
        return left + replace.lost_left(ws, spec, echo)

    def orphans(
        self, workspaces: Sequence[Workspace], specs: Sequence[ClusterSpec], *, echo: Echo
    ) -> list[str]:
        """Nothing searched: the hosts carry no tags; `down`'s own check (leftovers) asks
        each host of a cluster."""
        return []

    def spot_prices(
        self, spec: ClusterSpec, echo: Echo, place: PlannedPlace | None = None
    ) -> SpotPrices | None:
        """None: the user's own machines have no market."""
        return None

    def status_details(self, ws: Workspace, spec: ClusterSpec) -> dict[str, Any]:
        """The enrolled hosts, node 0 first; the spares left and the lost hosts a spare
        replaced (with it)."""
        path = ws.path / HOSTS_FILE
        if not path.is_file():
            return {}
        hosts = [h["host"] for _, h in sorted(enrolled(ws).items())]
        lost = lost_hosts(ws)
        return {
            "hosts": hosts,
            "spare_hosts": spares_left(spec.section_as(SshSpec), hosts, lost),
            "lost_hosts": [x.to_dict() for x in lost],
        }

    def node_installs(self, ws: Workspace, spec: ClusterSpec) -> dict[str, str]:
        """{}: the nodes install the runtime wheel and the spec's packages only."""
        return {}

    def applies_as_is(self, ws: Workspace) -> bool:
        """False: the workspace is the operator's, rendered by `up`."""
        return False

    def head_recovery(self, ws: Workspace, spec: ClusterSpec) -> HeadRecovery | None:
        """None: node 0 has neither the operator's key nor its known_hosts, so it cannot
        enrol a spare; a detached job that lost a host waits for `skyinfra jobs recover`."""
        return None

    def store_credentials(self, spec: ClusterSpec) -> Credentials | None:
        """With ssh.checkpoints_url: this environment's AWS credentials (the hosts have no
        role), for each job's agents' stdin; SpecError naming the field when there are none."""
        store = spec.section_as(SshSpec).checkpoints
        if store is None:
            return None
        found = operator_credentials(store, os.environ)
        if isinstance(found, SpecError):
            raise found
        return found

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
        h = enrolled(ws)[node]
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
        for i, h in sorted(enrolled(ws).items()):
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
        """The notice sent to the node's stand-in on its host, over SSH (drill.py)."""
        drill.interrupt(ws, spec, request, echo)

    def checkpoint_sets(self, ws: Workspace, spec: ClusterSpec) -> CheckpointListing:
        """Each enrolled host's node folder (asked at once) and ssh.checkpoints_url's prefix:
        one entry per set (checkpoint_sets.py)."""
        from skyinfra.targets.ssh import checkpoint_sets

        return checkpoint_sets.listing(ws, spec)

    def checkpoint_set(self, ws: Workspace, spec: ClusterSpec, name: str) -> CheckpointSetInfo:
        from skyinfra.targets.ssh import checkpoint_sets

        return checkpoint_sets.find(ws, spec, name)

    def delete_checkpoint_set(
        self, ws: Workspace, spec: ClusterSpec, found: CheckpointSetInfo
    ) -> str:
        """From every enrolled host and the store; a host that does not answer is named with
        what is left there (exit 1)."""
        from skyinfra.targets.ssh import checkpoint_sets

        return checkpoint_sets.delete(ws, spec, found)


if TYPE_CHECKING:
    _satisfies_the_protocol: Target = SshHostsTarget()
