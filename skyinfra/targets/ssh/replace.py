"""A lost host replaced by a spare (issue 45), as `up` does it (and so `jobs recover` and a
run's restarts, which replace lost nodes through `up`).

`up` contacts the host each node is on; an enrolled host that does not answer is lost, and the
next spare (spares.py) that answers (one that does not is passed over, named) is enrolled as
that node through the same Terraform: the
root module gains the spare's ``terraform_data`` (its key pinned at first contact). The lost
host's record leaves Terraform's state first (its destroy would have to reach it) and stays in
hosts.json, for `down` to tidy once the host answers again. The spare then gets the job's
checkpoint sets from the lowest node that was not lost, as a replaced AWS node restores them.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from skyinfra.errors import SkyinfraError, TerraformError, TransportError, UsageError
from skyinfra.spec import ClusterSpec
from skyinfra.targets.ssh.contact import KNOWN_HOSTS, Contacted, contact
from skyinfra.targets.ssh.hosts import (
    HOSTS_FILE,
    enrolled,
    left_on_host,
    lost_hosts,
    lost_transport,
    node_transport,
    tidy,
    write_hosts,
)
from skyinfra.targets.ssh.spares import LostHost, assigned_hosts, choose_spares
from skyinfra.targets.ssh.spec import SshSpec
from skyinfra.workspace import Workspace

if TYPE_CHECKING:
    from skyinfra.terraform import EngineFactory

Echo = Callable[[str], None]
# Where a node's checkpoint sets are, under its folder (the runtime's checkpoints.root_for).
CHECKPOINTS = "checkpoints"


@dataclass(frozen=True)
class Reached:
    """The hosts `up` enrols (``contacted``: every node's, spares in place of lost hosts),
    the lost hosts (earlier ones and this `up`'s) and the nodes a spare takes over now."""

    contacted: Contacted
    lost: list[LostHost]
    replaced: dict[int, str] = field(default_factory=dict)


def reach_hosts(spec: ClusterSpec, ws: Workspace, echo: Echo, *, replacing: bool) -> Reached:
    """Contact each node's host; an enrolled one that does not answer is lost and the next
    spare that answers stands in (NoSpareLeft naming it and the spares tried when there is
    none). Not ``replacing`` (`plan`, `render`): a lost host is refused, naming `up` and that
    spare (UsageError), as only `up` takes its node out of Terraform's state first."""
    section = spec.section_as(SshSpec)
    lost = lost_hosts(ws)
    assigned = assigned_hosts(section, spec.nodes, lost)
    records = enrolled(ws) if (ws.path / HOSTS_FILE).is_file() else {}
    # Only a host a node is enrolled on can be lost; any other is refused as at first `up`.
    on_it = {i for i, h in records.items() if i < len(assigned) and h["host"] == assigned[i]}
    known = ws.path / KNOWN_HOSTS
    found = contact(section, assigned, known, echo=echo, lost_ok=on_it)
    if not found.unreachable:
        return Reached(found, lost)
    replaced = _spares_that_answer(section, assigned, lost, found.unreachable, known, echo)
    if not replacing:
        raise UsageError(_only_up_replaces(assigned, replaced, found.unreachable))
    for i, spare in replaced.items():
        why = found.unreachable[i]
        echo(
            f"[skyinfra] host {assigned[i]} (node-{i}) lost: it stopped answering ({why}); "
            f"spare {spare} is enrolled as node-{i} in its place"
        )
        lost = [*lost, LostHost(i, assigned[i], spare, records[i]["node_dir"], why)]
    assigned = tuple(replaced.get(i, h) for i, h in enumerate(assigned))
    labels = {
        i: f"{_spare_label(section, s)}, standing in for node-{i}" for i, s in replaced.items()
    }
    return Reached(contact(section, assigned, known, echo=echo, labels=labels), lost, replaced)


def _spare_label(section: SshSpec, spare: str) -> str:
    return f"ssh.spare_hosts[{section.spare_hosts.index(spare)}]"


def _spares_that_answer(
    section: SshSpec,
    assigned: Sequence[str],
    lost: Sequence[LostHost],
    unreachable: Mapping[int, str],
    known: Path,
    echo: Echo,
) -> dict[int, str]:
    """A spare that answers for each node of ``unreachable`` (choose_spares' order): the
    chosen spares are contacted at once; one that does not answer (unreachable, or it refuses
    the key) or answers but fails the enrolment check (its Python older than 3.10, say) is
    passed over, named with why, and the choice made again without it, until every spare
    contacted is fit or NoSpareLeft names each spare passed over. A changed host key still
    stops everything (HostKeyChangedError). Nothing is written: `up` enrols only after this."""
    passed: dict[str, str] = {}
    while True:
        chosen = choose_spares(section, assigned, lost, unreachable, passed)
        order = sorted(chosen.items())
        spares = tuple(s for _, s in order)
        probe = contact(
            section, spares, known, echo=lambda _: None, lost_ok=range(len(spares)),
            unfit_ok=range(len(spares)),
            labels={k: _spare_label(section, s) for k, s in enumerate(spares)},
        )  # fmt: skip
        if not probe.unreachable and not probe.unfit:
            return chosen
        found = [(k, "does not answer", why) for k, why in probe.unreachable.items()]
        found += [(k, "cannot be enrolled", why) for k, why in probe.unfit.items()]
        for k, what, why in sorted(found):
            i, spare = order[k]
            passed[spare] = f"{'did not answer' if what == 'does not answer' else what}: {why}"
            echo(
                f"[skyinfra] spare {spare} ({_spare_label(section, spare)}) {what} ({why}): "
                f"passed over; the next spare is tried for node-{i}"
            )


def _only_up_replaces(
    assigned: Sequence[str], replaced: Mapping[int, str], why: Mapping[int, str]
) -> str:
    nodes = "; ".join(
        f"host {assigned[i]} (node-{i}) lost: it stopped answering ({why[i]}); spare {s} would "
        f"stand in as node-{i}"
        for i, s in sorted(replaced.items())
    )
    return (
        f"{nodes}. A plan cannot show that replacement: node-{min(replaced)}'s resource must "
        "first leave Terraform's state (its destroy would have to reach the lost host), which "
        "only `skyinfra up` does (also through `skyinfra jobs recover JOB`). Run `skyinfra up` "
        "to enrol the spare, then plan again; nothing was changed"
    )


def forget_lost_nodes(
    ws: Workspace, reached: Reached, engine_factory: EngineFactory, echo: Echo
) -> None:
    """Each replaced node's resource out of Terraform's state (the plan then creates it on
    the spare): destroying it would run its destroy provisioner on the lost host."""
    if not reached.replaced:
        return
    engine = engine_factory(ws.path)
    in_state = engine.state_list()
    for i in sorted(reached.replaced):
        host = next(x.host for x in reversed(reached.lost) if x.index == i)
        for address in [a for a in in_state if a.endswith(f'terraform_data.node["node-{i}"]')]:
            code, out, err = engine.command(["state", "rm", address])
            if code != 0:
                raise TerraformError(
                    f"could not take lost host {host}'s node out of Terraform's state",
                    argv=["terraform", "state", "rm", address],
                    returncode=code,
                    stderr=err or out,
                )
            echo(
                f"[skyinfra] {address} (host {host}) taken out of Terraform's state: its "
                f"destroy would need the host; {HOSTS_FILE} keeps it for `down` to tidy"
            )


def seed_checkpoints(
    ws: Workspace, spec: ClusterSpec, reached: Reached, echo: Echo, rebuilt: Sequence[int] = ()
) -> None:
    """Each spare, and each node enrolled again on its host (``rebuilt``: it went after a
    drill's notice), gets the checkpoint sets of the lowest node that was neither (through
    this machine), so that the job's next attempt resumes there from them."""
    records = enrolled(ws)
    fresh = sorted({*reached.replaced, *rebuilt})
    sources = [i for i in sorted(records) if i not in fresh]
    if not fresh or not sources:
        return
    src = sources[0]
    src_dir = records[src]["node_dir"]
    nodes = node_transport(ws, spec, rooted=False)
    try:
        listed = nodes.check_call(src, f"cd {shlex.quote(src_dir)} && ls -A {CHECKPOINTS} || :")
        if not listed.strip():
            return
        client = nodes.ssh_client(src).get_transport()
        if client is None:
            raise TransportError(f"host {records[src]['host']}: SSH connection is closed")
        channel = client.open_session()
        channel.exec_command(f"cd {shlex.quote(src_dir)} && tar -cf - {CHECKPOINTS}")
        archive = channel.makefile("rb").read()
        if channel.recv_exit_status() != 0:
            raise TransportError(f"host {records[src]['host']}: tar of {src_dir}/checkpoints")
        for i in fresh:
            into = shlex.quote(records[i]["node_dir"])
            nodes.check_call(i, f"tar -C {into} -xf -", stdin=archive)
            echo(
                f"[skyinfra] node-{i} ({records[i]['host']}): checkpoint sets copied from "
                f"node-{src}'s {src_dir}/{CHECKPOINTS} ({len(archive)} bytes)"
            )
    finally:
        nodes.close()


def _unreachable_words(x: LostHost, err: SkyinfraError) -> str:
    return (
        f"host {x.host} (lost; node-{x.index} until spare {x.replaced_by} replaced it): not "
        f"reachable ({err}); left to clean there: the node folder {x.node_dir}, and the node's "
        "processes may still run there (`skyinfra down` again once the host answers removes "
        "both)"
    )


def tidy_lost(ws: Workspace, spec: ClusterSpec) -> None:
    """`down`: each lost host that answers again gets its node removed (as the destroy
    provisioner removes one); one that does not is left to `lost_left` to name."""
    lost = lost_hosts(ws)
    if not lost:
        return
    hosts = lost_transport(ws, spec, lost)
    try:
        for k, x in enumerate(lost):
            try:
                hosts.check_call(k, tidy(x.node_dir))
            except SkyinfraError:
                continue
    finally:
        hosts.close()


def lost_left(ws: Workspace, spec: ClusterSpec, echo: Echo) -> list[str]:
    """What is left of a node on each lost host that answers (one line each); a host with
    nothing left leaves hosts.json. One that does not answer is named with what is left to
    clean there, and kept for a later `down`: the cluster's own nodes are gone, so it does
    not fail `down`."""
    lost = lost_hosts(ws)
    if not lost:
        return []
    hosts = lost_transport(ws, spec, lost)
    kept, left = [], []
    try:
        for k, x in enumerate(lost):
            try:
                found = hosts.check_call(k, left_on_host(x.node_dir))
            except SkyinfraError as err:
                echo(f"[skyinfra] warning: {_unreachable_words(x, err)}")
                kept.append(x)
                continue
            lines = [f"host {x.host}: {line}" for line in found.splitlines() if line.strip()]
            left += lines
            if lines:
                kept.append(x)
            else:
                echo(f"[skyinfra] host {x.host} (lost node-{x.index}): nothing left")
    finally:
        hosts.close()
    write_hosts(ws, list(enrolled(ws).values()), kept)
    return left
