"""Exit codes of the `skyinfra` command: one table, each code explained in EXPLANATIONS below,
from which docs/reference/exit-codes.md is generated (`make docs-reference`).

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

# Each code in full, as docs/reference/exit-codes.md shows it (Markdown; generated from here by
# `make docs-reference`): every command that exits with it, and what was changed or not.
EXPLANATIONS: dict[int, str] = {
    OK: ("success"),
    ERROR: (
        "error: Terraform, reaching a node, a workspace, or an internal error (a bug: please "
        'report it). Also a "no" at a confirmation prompt (`up`, `down`, `apply`, `cancel`, '
        "`checkpoints delete`, `drill`): said without `error:`, nothing was changed, and a "
        "command after `&&` does not run (as Terraform's `Destroy cancelled.`)"
    ),
    USAGE: (
        "bad spec, flag or setting such as `SKYINFRA_AWS_ENDPOINT_URL` (the message names it, "
        "and every other problem of the spec with it), or a spec that conflicts with the "
        "running cluster (another `provider`), or (local target, `validate` and `up`) a plugin "
        "whose framework does not import with the nodes' interpreter; found before any "
        "credential or network call; nothing was changed. `run`: a bad "
        "`--env`/`--secret`/`env`/`secrets` name, or an `--env NAME` or secret that `run`'s "
        "environment lacks (every name listed; nothing copied or started); a "
        "`--checkpoints`/`checkpoints` name that is not one folder name. `checkpoints delete`: "
        "a set that does not exist, or no `--yes` off a terminal (nothing deleted). `jobs`, "
        "`logs`, `cancel`, `ssh`: a job id that does not exist, a node out of range, a cluster "
        "that is down (the value named; `jobs` lists the job records kept in `runs/` instead, "
        "exit 0, when there are any); `ssh --config` on a target without SSH (local). `ssh -- "
        "CMD` exits with CMD's own code (255: ssh itself failed). `logs --follow` of a job "
        "whose node failed exits 4, one that timed out 6. `skyinfra plan` only: changes planned"
        " (as `terraform plan -detailed-exitcode`: `plan` exits 0 with no changes, 2 with "
        "changes, 1 for any error, a bad spec included)"
    ),
    PREFLIGHT: (
        "a cloud preflight check failed (credentials, instance type, quota, AMI); only ever "
        "after the spec passed `skyinfra validate`'s checks; nothing was changed"
    ),
    NODE_FAILED: (
        "`skyinfra run`: the entry failed on a node. The message names the first failing node "
        "and every node's own exit code with its meaning (the runtime's codes: 1 user code "
        "raised, 2 bad usage or entrypoint, 3 topology or plugin set-up failed, 128+N a worker "
        "was killed by signal N, 130 interrupted, negative: the node's launcher was killed by "
        "that signal); `runs/<id>/summary.json` holds the same (`exit_code`, and per node "
        "`exit_code` and `exit_meaning`)"
    ),
    NODES_NOT_READY: (
        "`skyinfra run`: nodes not ready (a bootstrap failed, or did not finish within "
        "`--wait-ready`); nothing was started"
    ),
    RUN_TIMEOUT: (
        "`skyinfra run`: `--timeout` passed while nodes still ran; every node was ended, and "
        "the message names those still running (`summary.json`: `timed_out`)"
    ),
    VERIFY_FAILED: (
        "`skyinfra verify`, or `run --verify`: a check failed on a node; the message names each"
        " node and check with the reason, and nothing was started"
    ),
    GUARDRAIL: (
        "`plan`, `up`, `apply`: a guardrail failed (`[guardrails]` or a fixed check; the "
        "message and plan.md say which; `up` refuses one the spec breaks by itself before any "
        "credential); nothing was changed"
    ),
    STALE_PLAN: (
        "`apply PLANFILE` / `up --plan PLANFILE`: the planfile is stale (the cluster's state or"
        " the spec changed since the plan) or not the reviewed one (another sha256); nothing "
        "was changed"
    ),
    NO_CAPACITY: (
        "`skyinfra up` (aws): no zone had capacity for the nodes. The message holds a table of "
        "every attempt (zone, what was asked, AWS's answer, how long it took) and says whether "
        "anything is left (a new cluster: everything its attempts made was destroyed and the "
        "API checked by tag); growing a running cluster whose zone has no room exits 10 too, "
        "nothing moved or destroyed"
    ),
    CLUSTER_UNHEALTHY: (
        "`skyinfra status`: the cluster is incomplete (an `up` was interrupted or failed before"
        " it finished; the message says what to run) or a node failed; `status --json` prints "
        "the same (`state`, `healthy`, `problems`)"
    ),
    INTERRUPTED: (
        "interrupted (Ctrl-C: an attached `run` cancelled its job, and says so with the "
        "commands that show it; `logs --follow` stopped following, and says whether the job "
        "goes on with the commands to follow or cancel it). `run` on SIGHUP: it stopped "
        "following and the job goes on (the message says how to follow it again); on SIGTERM "
        "the same, with exit 143. `logs --follow`: the job was cancelled"
    ),
}
