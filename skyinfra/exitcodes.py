"""Exit codes of the `skyinfra` command: one table, documented in docs/commands.md ("Exit codes").

Each error class in :mod:`skyinfra.errors` carries one of these as ``exit_code``. A node's
own exit code (the runtime's table, :mod:`skyinfra_runtime.exitcodes`) is never passed
through: `skyinfra run` exits with NODE_FAILED and reports each node's code and its meaning.
"""

from __future__ import annotations

OK = 0
ERROR = 1  # anything else: Terraform, a transport, a workspace, an internal invariant
# A "no" at a confirmation prompt: nothing was done. Not an error (no "error:"), but not
# success either, so that `skyinfra down && rm -r ...` stops there (Terraform's "Destroy
# cancelled." exits 1 too, since its 0.11 returned 0 and scripts went on).
DECLINED = ERROR
USAGE = 2  # the spec, a flag or a setting (such as an environment variable) is wrong
PREFLIGHT = 3  # a cloud check before Terraform failed (credentials, quota, AMI, ...)
NODE_FAILED = 4  # `skyinfra run`: the entry failed on a node (its own code is in the report)
NODES_NOT_READY = 5  # `skyinfra run`: a node's bootstrap failed or did not finish in time
RUN_TIMEOUT = 6  # `skyinfra run --timeout`: nodes still ran when it passed; all were ended
VERIFY_FAILED = 7  # `skyinfra verify` (or `run --verify`): a node check failed
# `skyinfra plan` follows `terraform plan -detailed-exitcode`: 0 no changes, 1 any error,
# 2 changes planned (its 2 is not USAGE: a bad spec makes `plan` exit 1).
PLAN_CHANGES = 2
GUARDRAIL = 8  # plan/up/apply: a guardrail failed (plan.md says which); nothing was changed
STALE_PLAN = 9  # apply/up --plan: the planfile no longer matches (state, spec or sha256)
NO_CAPACITY = 10  # `skyinfra up`: no zone tried had capacity for the nodes (aws)
# `skyinfra status`: the cluster is incomplete (an `up` did not finish) or a node failed.
CLUSTER_UNHEALTHY = 11
INTERRUPTED = 130  # Ctrl-C (SIGINT)

MEANINGS: dict[int, str] = {
    OK: "success",
    ERROR: "error (Terraform, transport, workspace or internal), or a declined confirmation",
    USAGE: "bad spec, flag or setting; nothing was changed",
    PREFLIGHT: "cloud preflight failed; nothing was changed",
    NODE_FAILED: "skyinfra run: a node failed",
    NODES_NOT_READY: "skyinfra run: nodes not ready; nothing was started",
    RUN_TIMEOUT: "skyinfra run: --timeout passed; every node was ended",
    VERIFY_FAILED: "skyinfra verify: a check failed on a node; nothing was started",
    GUARDRAIL: "a guardrail failed; nothing was changed",
    STALE_PLAN: "the planfile is stale or not the reviewed one; nothing was changed",
    NO_CAPACITY: "skyinfra up: no zone had capacity for the nodes; none was left running",
    CLUSTER_UNHEALTHY: "skyinfra status: an up did not finish, or a node failed",
    INTERRUPTED: "interrupted",
}
