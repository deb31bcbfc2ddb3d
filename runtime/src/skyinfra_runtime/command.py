"""``skyinfra-runtime COMMAND``: the node's command line. Each command's module is imported only
when it is the one run: the operator runs ``jobs``, ``logs`` and ``supervise`` on a node for
every `skyinfra jobs`, `logs` and `run`, and none of them needs the launcher's plugins."""

from __future__ import annotations

import importlib
import sys

# The job commands (skyinfra_runtime.jobs): a node's part of a job that outlives the operator.
JOB_COMMANDS = ("supervise", "logs", "cancel", "jobs")
# command -> the module whose main(argv after the command) runs it; anything else is `launch`.
OTHER_COMMANDS = {
    "notice": "skyinfra_runtime.spot",
    "node-facts": "skyinfra_runtime.nodefacts",
    "imds-standin": "skyinfra_runtime.imds_standin",
    "warm-up": "skyinfra_runtime.nodewarm",
    "checkpoint-sync": "skyinfra_runtime.ckptsync",
}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in JOB_COMMANDS:
        from skyinfra_runtime import jobs

        raise SystemExit(jobs.main(argv))
    if argv[:1] and argv[0] in OTHER_COMMANDS:
        raise SystemExit(importlib.import_module(OTHER_COMMANDS[argv[0]]).main(argv[1:]))
    from skyinfra_runtime.launcher import launch

    raise SystemExit(launch(argv))
