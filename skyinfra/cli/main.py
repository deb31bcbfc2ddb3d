"""The `skyinfra` group, assembled from the command modules, and `main`, the console script.

Every user-caused error is a SkyinfraError: printed as one message, exit with its exit_code
(the table in skyinfra.exitcodes, documented in docs/commands.md). Anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import sys

import click

from skyinfra import __version__, exitcodes
from skyinfra.cli import (
    checkpoints,
    cluster,
    drill,
    jobs,
    review,
    running,
    ssh,
    state,
    validate,
    verify,
)
from skyinfra.errors import Declined, SkyinfraError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="skyinfra")
def cli() -> None:
    """Multi-node clusters from reviewable Terraform; run JAX, Keras and PyTorch code on them."""


for command in (
    cluster.up,
    cluster.down,
    cluster.status,
    cluster.topology,
    running.run,
    jobs.jobs,
    jobs.logs,
    jobs.cancel,
    checkpoints.checkpoints,
    drill.drill,
    ssh.ssh,
    review.render,
    review.plan,
    review.apply,
    review.prices,
    state.attach,
    state.unlock,
    state.state,
    state.tf,
    state.gc,
    verify.verify_command,
    validate.validate,
):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    try:
        result = cli.main(args=argv, prog_name="skyinfra", standalone_mode=False)
    except click.exceptions.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("interrupted", err=True)
        sys.exit(exitcodes.INTERRUPTED)
    except Declined as err:
        click.echo(f"[skyinfra] {err}", err=True)
        sys.exit(err.exit_code)
    except SkyinfraError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(err.exit_code)
    sys.exit(result if isinstance(result, int) else exitcodes.OK)
