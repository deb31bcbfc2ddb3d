"""The command a failed node's readiness names for reading its bootstrap log
(transport/ssh.py): one the operator can paste, with the login key and the pinned host keys
on every hop. Through a private network's way in `ssh -J` would dial the jump host without
the key; the ProxyCommand carries it."""

from __future__ import annotations

import shlex
from pathlib import Path

from skyinfra.transport.ssh import JumpHost, SshKeys, SshTarget, SshTransport

KEY = Path("/keys/id_ed25519")
KNOWN = Path("/ws/known_hosts")
LOG = "/var/log/cloud-init-output.log"
HELD = ["-i", str(KEY), "-o", "IdentitiesOnly=yes", "-o", f"UserKnownHostsFile={KNOWN}"]


def hint(target: SshTarget) -> list[str]:
    ssh = SshTransport({0: target}, keys=SshKeys(KEY, KNOWN))
    return shlex.split(ssh._tail_hint(target, LOG))


def test_behind_the_bastion_both_hops_carry_the_key_and_the_pinned_host_keys() -> None:
    argv = hint(SshTarget("10.42.0.11", jump=JumpHost("bastion", "198.51.100.7", port=2222)))
    assert "-J" not in argv
    assert argv[1 : len(HELD) + 1] == HELD
    assert "StrictHostKeyChecking=yes" in argv
    proxy = next(o for o in argv if o.startswith("ProxyCommand="))
    through = shlex.split(proxy.removeprefix("ProxyCommand="))
    assert through[1 : len(HELD) + 1] == HELD
    assert "StrictHostKeyChecking=yes" in through
    assert through[-5:] == ["-p", "2222", "-W", "%h:%p", "ubuntu@198.51.100.7"]
    assert argv[-6:] == ["ubuntu@10.42.0.11", "sudo", "tail", "-n", "50", LOG]


def test_a_public_node_is_dialled_directly_with_the_same_options() -> None:
    argv = hint(SshTarget("198.51.100.9", port=2200))
    assert argv[1 : len(HELD) + 1] == HELD
    assert not any(o.startswith("ProxyCommand=") for o in argv)
    assert argv[-8:] == ["-p", "2200", "ubuntu@198.51.100.9", "sudo", "tail", "-n", "50", LOG]
