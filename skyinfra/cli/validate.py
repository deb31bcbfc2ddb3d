"""Checking a spec offline: `validate` (no credentials, no network, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from skyinfra import exitcodes
from skyinfra.cli.options import DEFAULT_SPEC, json_option, spec_option


@click.command()
@spec_option
@json_option
@click.pass_context
def validate(ctx: click.Context, /, spec_path: Path | None, as_json: bool) -> None:
    """Check the spec with no cloud and no workspace: every field and target table, plugin
    options, the files it names (aws.ssh_key) and the guardrails it breaks by itself; on the
    local target, that each plugin's framework imports where the nodes will find it.

    Needs no credentials and no network, and writes nothing. Every problem is listed, not
    only the first; --json prints them as a list (file, line, field, value, expected) for a
    CI job's annotations. Exit 0 when the spec is valid, 2 otherwise."""
    from skyinfra.validation import Problem, validate_file

    path = spec_path if spec_path is not None else DEFAULT_SPEC
    if spec_path is None and not DEFAULT_SPEC.is_file():
        problems = [
            Problem(
                None,
                None,
                "--spec",
                str(DEFAULT_SPEC),
                "a spec file: ./skyinfra.toml, or --spec FILE",
                f"no spec: {DEFAULT_SPEC} is not here; pass --spec FILE",
            )
        ]
    else:
        _, problems = validate_file(path)
    if as_json:
        # A value TOML can hold but JSON cannot (a date) is shown as text.
        click.echo(json.dumps([p.to_dict() for p in problems], indent=2, default=str))
    else:
        for problem in problems:
            where = f"{problem.file}:{problem.line}" if problem.line else problem.file or "spec"
            click.echo(f"{where}: {problem.message}", err=True)
        if problems:
            click.echo(f"[skyinfra] {len(problems)} problem(s) in {path}", err=True)
        else:
            click.echo(f"[skyinfra] {path} is valid")
    ctx.exit(exitcodes.USAGE if problems else exitcodes.OK)
