"""The ssh target's drill (issue 45): which resources are its nodes, and the command that sends
a node's stand-in the notice on its host. The drill itself runs in tests/e2e/ssh."""

from __future__ import annotations

import shlex

from skyinfra.targets.ssh.drill import node_indexes, notice_command


def test_the_nodes_in_terraforms_state_are_found_by_their_index() -> None:
    state = [
        'module.nodes.terraform_data.node["node-0"]',
        'module.nodes.terraform_data.node["node-12"]',
        "module.nodes.terraform_data.other",
        'terraform_data.node["node-1"]',  # not the module's
    ]
    assert node_indexes(state) == {0: state[0], 12: state[1]}


def test_the_notice_is_sent_by_the_nodes_own_runtime_from_its_folder() -> None:
    command = notice_command("/home/o'neil/.skyinfra/lab/node-1", 120)
    assert shlex.split(command) == [
        "/home/o'neil/.skyinfra/lab/node-1/venv/bin/python", "-m", "skyinfra_runtime",
        "imds-standin", "--node-dir", "/home/o'neil/.skyinfra/lab/node-1", "--send", "120",
    ]  # fmt: skip
