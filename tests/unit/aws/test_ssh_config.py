"""`skyinfra ssh --config` on AWS (targets/aws/shell.py's config_text, pure): each node's
block, through the way in's ProxyJump on a private network, or with ``aws.ssm`` a
ProxyCommand through Session Manager to the node's instance id, its host key still checked
against the one pinned under the address skyinfra dials. Golden files hold the text
(SKYINFRA_UPDATE_GOLDEN=1 rewrites them); the system's OpenSSH reads each back (ssh -G)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from skyinfra.targets.aws.shell import ConfigSettings, HostEntry, config_text
from skyinfra.transport.ssh import JumpHost, SshTarget

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "ssh-config"
BASTION = JumpHost("bastion", "198.51.100.7")
SETTINGS = ConfigSettings(
    cluster="priv",
    provider="aws",
    config_file=Path("/ws/priv/ssh_config"),
    key=Path("/keys/id_ed25519"),
    known_hosts=Path("/ws/priv/known_hosts"),
)
ENTRIES = (
    HostEntry("priv-node-0", SshTarget("10.42.0.10", jump=BASTION), "i-0aaaaaaaaaaaaaaa0"),
    HostEntry("priv-node-1", SshTarget("10.42.0.11", jump=BASTION), "i-0aaaaaaaaaaaaaaa1"),
    HostEntry("priv-node-2", None, "i-0aaaaaaaaaaaaaaa2", "node 2: not reachable"),
)


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("SKYINFRA_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from its golden file"


def _resolved(text: str, alias: str, tmp_path: Path) -> dict[str, str]:
    """What the system's OpenSSH makes of the alias's block (ssh -G: parsed, nothing dialled)."""
    config = tmp_path / "ssh_config"
    config.write_text(text)
    out = subprocess.run(
        ["ssh", "-G", "-F", str(config), alias], capture_output=True, text=True, check=True
    ).stdout
    return dict(line.partition(" ")[::2] for line in out.splitlines())


needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")


@needs_ssh
def test_ssm_writes_a_session_manager_proxy_command_per_node(tmp_path: Path) -> None:
    settings = ConfigSettings(**{**SETTINGS.__dict__, "ssm_region": "us-west-2"})
    text = config_text(settings, ENTRIES)
    _golden("ssm", text)
    assert "ProxyJump" not in text and "Host priv-bastion" not in text
    node = _resolved(text, "priv-node-1", tmp_path)
    assert node["hostname"] == "i-0aaaaaaaaaaaaaaa1"
    assert node["proxycommand"] == (
        "aws ssm start-session --target %h --document-name AWS-StartSSHSession "
        "--parameters portNumber=%p --region us-west-2"
    )
    # The key pinned under the node's address, and nothing else, is accepted.
    assert node["hostkeyalias"] == "10.42.0.11"
    assert node["stricthostkeychecking"] == "true"
    assert node["userknownhostsfile"] == "/ws/priv/known_hosts"


@needs_ssh
def test_without_ssm_the_nodes_jump_through_the_bastion(tmp_path: Path) -> None:
    text = config_text(SETTINGS, ENTRIES)
    _golden("bastion", text)
    assert text.count("    ProxyJump priv-bastion\n") == 2
    node = _resolved(text, "priv-node-0", tmp_path)
    assert (node["hostname"], node["proxyjump"]) == ("10.42.0.10", "priv-bastion")
    assert _resolved(text, "priv-bastion", tmp_path)["hostname"] == "198.51.100.7"


def test_ssm_without_an_instance_id_says_so_instead_of_a_block() -> None:
    settings = ConfigSettings(**{**SETTINGS.__dict__, "ssm_region": "us-west-2"})
    text = config_text(settings, [HostEntry("priv-node-0", SshTarget("10.42.0.10"), None)])
    assert "Host priv-node-0" not in text
    assert "# priv-node-0: no instance id, which Session Manager dials" in text
