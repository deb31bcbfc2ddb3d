"""`skyinfra ssh`: a shell, or one command, on a node; `--config`: an SSH config block per node."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import click

from skyinfra.cli.options import cluster_option, dir_option
from skyinfra.cli.resolve import echo, refresh_shared_topology, workspace


def _node_index(word: str, cluster: str) -> int | None:
    """NODE as given: ``3``, ``node-3`` or ``<cluster>-node-3``; None when ``word`` is not a
    node (it is the first word of the command)."""
    m = re.fullmatch(rf"(?:(?:{re.escape(cluster)}-)?node-)?(\d+)", word)
    return int(m.group(1)) if m else None


@click.command("ssh", context_settings={"ignore_unknown_options": True})
@cluster_option
@dir_option
@click.option(
    "--config",
    "print_config",
    is_flag=True,
    help="Print an OpenSSH config block per node (Host <cluster>-node-<i>) and write it to the "
    "workspace's ssh_config (0600), for ssh, scp, rsync and editors (Include it from "
    "~/.ssh/config).",
)
@click.argument("words", nargs=-1, type=click.UNPROCESSED, metavar="[NODE] [-- CMD...]")
def ssh(
    cluster_name: str | None,
    clusters_root: Path | None,
    print_config: bool,
    words: tuple[str, ...],
) -> None:
    """A shell on node NODE (default 0), or CMD run there by the node's shell; exits with
    CMD's code.

    Local nodes: in the node's folder with the node's environment (its venv first on PATH,
    SKYINFRA_NODE, SKYINFRA_NODE_DIR, SKYINFRA_SHARED_DIR). AWS: the system's ssh, held to the
    host key skyinfra pinned from the node's console (StrictHostKeyChecking=yes); CMD runs in
    the node's folder with the same environment. NODE is 3, node-3 or <cluster>-node-3.
    """
    from skyinfra import lifecycle
    from skyinfra.errors import UsageError
    from skyinfra.topology import read_topology

    ws = workspace(clusters_root, cluster_name, changes_something=False)
    refresh_shared_topology(ws)  # state in S3: another operator may have changed the cluster
    if not ws.topology_file.is_file():
        raise lifecycle.not_up_error(ws)
    topology = read_topology(ws.topology_file)
    spec = ws.spec()
    target = lifecycle.target_of(spec)
    total = len(topology.nodes)
    if print_config:
        if words:
            raise UsageError(f"--config takes no NODE or command (got {' '.join(words)!r})")
        # A target whose nodes have no SSH (local) says so: UnsupportedByTarget, exit 2.
        click.echo(target.ssh_config(ws, spec, topology, echo=echo), nl=False)
        return
    node = 0
    command = list(words)
    if command and (index := _node_index(command[0], ws.name)) is not None:
        node, command = index, command[1:]
    if command[:1] == ["--"]:
        command = command[1:]
    if not 0 <= node < total:
        raise UsageError(f"NODE {node}: the cluster has nodes 0 to {total - 1}")
    shell = target.shell(ws, spec, topology, node, command)
    sys.stdout.flush()
    sys.stderr.flush()
    if shell.cwd is not None:
        os.chdir(shell.cwd)
    try:
        if shell.env is None:
            os.execvp(shell.argv[0], shell.argv)
        os.execvpe(shell.argv[0], shell.argv, shell.env)
    except OSError as err:
        from skyinfra.errors import TransportError

        raise TransportError(f"node {node}: cannot run {shell.argv[0]}: {err}") from err
