"""The `skyinfra` command line (click): one module per group of commands, the group and the
console script's `main` assembled in main.py.

- cluster.py: up, down, status, topology (a cluster's life)
- running.py: run
- review.py: render, plan, apply, prices (review before apply)
- state.py: attach, unlock, state push, tf, gc (shared and raw Terraform state)
- verify.py: verify
- drill.py: drill interrupt (a Spot interruption notice, rehearsed)
- options.py: the options several commands share; resolve.py: what a command resolves
  before it acts (workspace, engine, confirmation)

A command imports the library it drives when it runs, so `skyinfra --help` loads little more
than click.
"""

from skyinfra.cli.main import cli, main

__all__ = ["cli", "main"]
