"""The manual's generated reference pages, written from the code so they cannot drift from it:
docs/reference/cli.md from the click command tree (every command, its one-line summary, its
usage and options with their help, as `--help` shows them) and docs/reference/exit-codes.md
from skyinfra.exitcodes (and the runtime's table of a node's own codes).

`make docs-reference` (``python -m skyinfra.cli.reference``) rewrites them;
tests/unit/test_docs_reference.py fails when the committed pages differ from what this writes.
The click objects are imported when a page is rendered, not with this module.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click

REPO_ROOT = Path(__file__).resolve().parents[2]
GENERATED = "Generated from the code by `make docs-reference` ({source}); do not edit by hand."


def _cell(text: str) -> str:
    """``text`` fit for one cell of a Markdown table."""
    return " ".join(text.split()).replace("|", "\\|")


def _walk(command: click.Command, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            yield from _walk(command.commands[name], [*path, name])


def _description(command: click.Command) -> str:
    """The command's help as `--help` prints it under the usage line (click's ``\\b`` and
    ``\\f`` markers honoured: what follows ``\\f`` is not shown)."""
    text = inspect.cleandoc(command.help or "").split("\f", 1)[0]
    return "\n".join(line for line in text.splitlines() if line.strip() != "\b").strip()


def render_cli() -> str:
    """docs/reference/cli.md: every command and subcommand of `skyinfra`."""
    from skyinfra.cli.main import SUMMARIES, cli

    lines = [
        "# Command-line reference",
        "",
        GENERATED.format(source="`skyinfra/cli/reference.py`, from the click commands"),
        "",
        "What each command does, in more words: [Commands](commands.md); what it exits with:",
        "[Exit codes](exit-codes.md).",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    commands = [(path, c) for path, c in _walk(cli, []) if path]
    for path, _ in commands:
        name = " ".join(path)
        anchor = "skyinfra-" + "-".join(path)
        lines.append(f"| [`skyinfra {name}`](#{anchor}) | {_cell(SUMMARIES[name])} |")
    for path, command in commands:
        name = " ".join(path)
        ctx = click.Context(command, info_name=f"skyinfra {name}")
        lines += ["", f"## skyinfra {name}", "", _cell(SUMMARIES[name]), ""]
        usage = " ".join(command.collect_usage_pieces(ctx))
        lines += ["```text", f"Usage: skyinfra {name} {usage}".rstrip()]
        description = _description(command)
        if description:
            lines += ["", description]
        lines += ["```"]
        # Options only (the arguments are in the usage line), and not --help, which every
        # command has.
        records = [
            r
            for p in command.get_params(ctx)
            if isinstance(p, click.Option)
            and "--help" not in p.opts
            and (r := p.get_help_record(ctx))
        ]
        if records:
            lines += ["", "| option | help |", "|---|---|"]
            lines += [f"| `{_cell(opts)}` | {_cell(help_)} |" for opts, help_ in records]
        if isinstance(command, click.Group):
            subs = ", ".join(
                f"[`{sub}`](#skyinfra-{'-'.join(path)}-{sub})" for sub in sorted(command.commands)
            )
            lines += ["", f"Commands: {subs}."]
    return "\n".join(lines) + "\n"


def render_exit_codes() -> str:
    """docs/reference/exit-codes.md: skyinfra's codes, each with every name the code gives it
    and its explanation, then a node's own codes (skyinfra_runtime.exitcodes)."""
    from skyinfra_runtime import exitcodes as node_codes

    from skyinfra import exitcodes

    names: dict[int, list[str]] = {}
    for name, value in vars(exitcodes).items():
        if name.isupper() and isinstance(value, int):
            names.setdefault(value, []).append(f"`{name}`")
    lines = [
        "# Exit codes",
        "",
        GENERATED.format(source="`skyinfra/cli/reference.py`, from `skyinfra/exitcodes.py`"),
        "",
        "One table for every `skyinfra` command:",
        "",
        "| exit | name in `skyinfra.exitcodes` | meaning |",
        "|------|------|---------|",
    ]
    for code in sorted(exitcodes.EXPLANATIONS):
        lines.append(
            f"| {code} | {', '.join(names[code])} | {_cell(exitcodes.EXPLANATIONS[code])} |"
        )
    signalled = node_codes.SIGNALLED
    lines += [
        "",
        "## A node's own exit codes",
        "",
        "`skyinfra run` never passes a node's code through (it exits 4); it reports each",
        "node's code with its meaning (`skyinfra_runtime.exitcodes`, from",
        "`skyinfra-runtime launch`):",
        "",
        "| node's exit | meaning |",
        "|------|---------|",
    ]
    for code in sorted(node_codes.MEANINGS):
        lines.append(f"| {code} | {_cell(node_codes.describe(code))} |")
    lines += [
        f"| {signalled}+N (e.g. {signalled + 9}) | {_cell(node_codes.describe(signalled + 9))}"
        " (N: the signal's number) |",
        f"| -N (e.g. -15) | {_cell(node_codes.describe(-15))}: the node's launcher itself |",
    ]
    return "\n".join(lines) + "\n"


PAGES: dict[str, Callable[[], str]] = {
    "docs/reference/cli.md": render_cli,
    "docs/reference/exit-codes.md": render_exit_codes,
}


def stale(root: Path = REPO_ROOT) -> list[str]:
    """The generated pages whose committed text differs from what the code renders now."""
    return [
        page
        for page, render in PAGES.items()
        if not (root / page).exists() or (root / page).read_text() != render()
    ]


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else REPO_ROOT
    for page, render in PAGES.items():
        (root / page).write_text(render())
        print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
