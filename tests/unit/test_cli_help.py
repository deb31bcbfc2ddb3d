"""`skyinfra --help` (and each group's) gives every command's whole one-line summary: click
cuts a docstring's first sentence to the terminal's width and ends it with "...", which left
19 of 22 summaries cut short."""

from __future__ import annotations

import click
from click.testing import CliRunner

from skyinfra.cli.main import SUMMARIES, cli


def listed(args: list[str]) -> dict[str, str]:
    """The commands section of a help page at 80 columns: name -> its line."""
    out = CliRunner().invoke(cli, [*args, "--help"], terminal_width=80).output
    section = out.split("Commands:\n", 1)[1]
    return dict(line.strip().split(None, 1) for line in section.splitlines() if line.strip())


def test_every_command_s_summary_is_shown_whole() -> None:
    groups = [[]] + [[name] for name, c in cli.commands.items() if isinstance(c, click.Group)]
    shown = 0
    for group in groups:
        for name, line in listed(group).items():
            assert not line.endswith("..."), (group, name, line)
            assert line == SUMMARIES[" ".join([*group, name])], (group, name)
            shown += 1
    assert shown == len(SUMMARIES)  # every command, every subcommand
