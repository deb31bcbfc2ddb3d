"""The options several commands share, defined once (their help text is part of the CLI).

Every command's module builds on this one at start-up, `skyinfra --help` included: it
imports click and the target registry, nothing heavier.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from skyinfra.target_registry import declarations

DEFAULT_SPEC = Path("skyinfra.toml")

dir_option = click.option(
    "--dir",
    "clusters_root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder holding cluster workspaces (default .skyinfra/clusters, or $SKYINFRA_DIR).",
)
cluster_option = click.option(
    "--cluster",
    "cluster_name",
    default=None,
    help="Cluster name (default: the only cluster, or skyinfra.toml's name).",
)
terraform_bin_option = click.option(
    "--terraform-bin",
    "terraform_bin",
    default=None,
    metavar="PATH",
    help="Drive this terraform or tofu binary (or 'embedded'); default $SKYINFRA_TERRAFORM_BIN, "
    "else the spec's engine, else the embedded Terraform.",
)
backend_option = click.option(
    "--backend",
    default=None,
    metavar="S3_URL",
    help="Keep the state in S3 with Terraform's lock: s3://bucket/prefix[?region=R] "
    "(the spec's backend).",
)
yes_option = click.option(
    "--yes",
    is_flag=True,
    help="Destroy or replace resources without asking (needed off a terminal).",
)
# The spec's name and node count, overridden on the command line (up, render, plan).
name_option = click.option("--name", default=None, help="Cluster name.")
nodes_option = click.option("--nodes", default=None, help="Number of nodes.")
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
spec_option = click.option(
    "--spec",
    "spec_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Cluster spec TOML (default ./skyinfra.toml when present).",
)


def target_options(command: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Every target's own flags for ``command``, each help text naming its target; the
    values reach the cluster's target as TargetOptions (another target's flag is an error).
    The flags are the targets' declarations': no target's SDK loads for them."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        for target in reversed(declarations()):
            for option in reversed(target.options):
                if command in option.commands:
                    func = click.option(
                        option.flag,
                        option.name,
                        is_flag=option.metavar is None,
                        metavar=option.metavar,
                        default=None,
                        help=f"[{target.name}] {option.help}",
                    )(func)
        return func

    return decorate
