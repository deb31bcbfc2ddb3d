"""The `skyinfra` group, assembled from the command modules, and `main`, the console script.

Every user-caused error is a SkyinfraError: printed as one message, exit with its exit_code
(the table in skyinfra.exitcodes, documented in docs/reference/exit-codes.md). Anything else is a
bug and keeps its traceback.
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


# Each command's line in `skyinfra --help` (and a group's subcommands' in the group's): whole,
# where click would cut a docstring's first sentence to the terminal's width.
SUMMARIES = {
    "apply": "Apply a saved, reviewed plan (from `plan`) exactly.",
    "attach": "Join a cluster whose state is in a shared backend.",
    "cancel": "End a job on every node.",
    "checkpoints": "List the cluster's checkpoint sets; delete one.",
    "checkpoints delete": "Delete a checkpoint set and everything in it.",
    "down": "Destroy the cluster (shown and confirmed first).",
    "drill": "Rehearse failures on a running cluster.",
    "drill interrupt": "Send a node a Spot interruption notice.",
    "gc": "List tagged resources that no workspace's state knows.",
    "jobs": "The cluster's jobs, newest first, or one in full.",
    "logs": "A job's output from the nodes.",
    "plan": "Plan a change for review: plan.md and the planfile.",
    "prices": "Refresh On-Demand prices from the AWS Price List.",
    "render": "Write the root module into a folder for review.",
    "run": "Run ENTRY on every node, as a job.",
    "ssh": "A shell, or a command, on a node.",
    "state": "Where a cluster's Terraform state lives.",
    "state push": "Move a cluster's state from its workspace to S3.",
    "status": "Whether a cluster is up, and its nodes' health.",
    "tf": "Run the cluster's Terraform in its workspace.",
    "topology": "Print the cluster's topology.json.",
    "unlock": "Release a state lock that a killed process left.",
    "up": "Create or update a cluster from its spec.",
    "validate": "Check the spec offline: every field and file.",
    "verify": "Check every node before a run.",
}


def _summarize(command: click.Command, path: str) -> None:
    command.short_help = SUMMARIES[path]
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            _summarize(sub, f"{path} {name}")


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
    _summarize(command, str(command.name))


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
