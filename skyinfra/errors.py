"""One exception tree for the operator side.

Every error a user can cause or meet derives from :class:`SkyinfraError`. The CLI catches
that one base class, prints ``str(err)`` (which names the offending field or command and what
would be valid) and exits with ``err.exit_code``; anything else is a bug and keeps its
traceback. Errors that come from running something carry their evidence (argv, return code,
stderr) as attributes so that tests and logs can show exactly what failed.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from skyinfra import exitcodes

if TYPE_CHECKING:
    from skyinfra.lock_holders import LockHolder


class SkyinfraError(Exception):
    """Base class; ``exit_code`` is what the CLI exits with (:mod:`skyinfra.exitcodes`)."""

    exit_code = exitcodes.ERROR


class SpecError(SkyinfraError):
    """The cluster spec (file or flags) is invalid. Raised before anything is written.

    Only for what the user wrote; an invariant of skyinfra's own is an InternalError.
    """

    exit_code = exitcodes.USAGE

    def __init__(self, field: str, value: object, expected: str) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        # A flag ("--env", "--plugin keras:backend") is named as the flag the user typed.
        flag = field.startswith("--")
        # TOML has no null: a None is a field the spec does not have.
        missing = "nothing" if flag else "nothing (the field is missing)"
        got = missing if value is None else repr(value)
        what = f"value for {field}" if flag else f"spec field {field!r}"
        super().__init__(f"invalid {what}: got {got}; expected {expected}")


class SpecProblems(SpecError):
    """Several problems in one spec, all found before anything is written: each a SpecError
    (``problems``). Its own field, value and expected are the first problem's, so a caller
    that reads one problem still gets one; the message lists them all."""

    def __init__(self, problems: Sequence[SpecError]) -> None:
        self.problems = tuple(problems)
        first = self.problems[0]
        self.field, self.value, self.expected = first.field, first.value, first.expected
        lines = "".join(f"\n  - {problem}" for problem in self.problems)
        Exception.__init__(self, f"{len(self.problems)} problems in the spec:{lines}")


def spec_problems(problems: Sequence[SpecError]) -> SpecError | None:
    """One error for ``problems``: None without any, the problem itself when alone."""
    flat = [p for problem in problems for p in getattr(problem, "problems", (problem,))]
    if not flat:
        return None
    return flat[0] if len(flat) == 1 else SpecProblems(flat)


class UsageError(SkyinfraError):
    """A command-line argument is wrong (such as `run`'s ENTRY); the message names it and
    what would be valid. Raised before anything is copied, started or written."""

    exit_code = exitcodes.USAGE


class UnsupportedByTarget(UsageError):
    """A verb the cluster's target does not do (skyinfra.targets.base: say, `ssh --config` on
    local nodes, which have no SSH). ``target`` and ``verb`` name them; the message says why
    and what to do instead."""

    def __init__(self, target: str, verb: str, message: str) -> None:
        self.target = target
        self.verb = verb
        super().__init__(message)


class ClusterBusyError(UsageError):
    """A job holds the cluster's nodes: a second one would join its coordinator and end it.
    Raised before anything is started; ``job`` is the head's word on the running job."""

    def __init__(self, cluster: str, job: Mapping[str, Any]) -> None:
        self.job = dict(job)
        job_id = job.get("id", "?")
        what = ", ".join(
            part
            for part in (
                f"entry {job['entry']}" if job.get("entry") else "",
                f"started by {job['started_by']}" if job.get("started_by") else "",
            )
            if part
        )
        super().__init__(
            f"cluster {cluster!r} is busy: job {job_id} is {job.get('state') or 'running'} on "
            f"it{f' ({what})' if what else ''}. A second job would join its coordinator and "
            "end it, so nothing was started. Wait for it: "
            f"`skyinfra logs --cluster {cluster} {job_id} --follow`; or end it: "
            f"`skyinfra cancel --cluster {cluster} {job_id}`"
        )


class ProviderUnavailableError(SkyinfraError):
    """The spec names a provider whose target is not installed in this build."""

    exit_code = exitcodes.USAGE


class ConfigError(SkyinfraError):
    """A setting outside the spec (an environment variable) is invalid; names the variable."""

    exit_code = exitcodes.USAGE

    def __init__(self, variable: str, value: object, expected: str) -> None:
        self.variable = variable
        self.value = value
        self.expected = expected
        super().__init__(f"invalid setting {variable}: got {value!r}; expected {expected}")


class InternalError(SkyinfraError):
    """An invariant of skyinfra's own does not hold (a bug, not the user's spec)."""


class RenderError(InternalError):
    """A renderer got a value it must never get (wheel digest, user data, topology...).

    ``field`` names the parameter, ``value`` what it was and ``expected`` what would be valid.
    """

    def __init__(self, field: str, value: object, expected: str) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        super().__init__(
            f"internal error: cannot render {field!r} = {value!r}; expected {expected}"
        )


class WorkspaceError(SkyinfraError):
    """A cluster workspace is missing, locked or inconsistent."""


class NoSuchClusterError(WorkspaceError):
    """The command names no cluster, or one that has no workspace: bad input, nothing done."""

    exit_code = exitcodes.USAGE


class ClusterDownError(WorkspaceError):
    """The named cluster is down (no topology): bad input for `run` and `topology`."""

    exit_code = exitcodes.USAGE

    def __init__(self, cluster: str, *, unfinished: str | None = None) -> None:
        self.unfinished = unfinished  # the command that left the cluster part-made, if one did
        if unfinished is None:
            said = f"cluster {cluster!r} is down (no topology.json); bring it up with `skyinfra up`"
        else:
            said = f"cluster {cluster!r} is not up: {part_made(cluster, unfinished)}"
        super().__init__(said)


def part_made(cluster: str, command: str) -> str:
    """What ``command`` left when it did not finish, and the two ways on: `status` says it,
    and every command that needs the nodes (ClusterDownError)."""
    return (
        f"an `{command}` did not finish (interrupted, or it failed) and left the cluster "
        f"part-made: run `skyinfra up --name {cluster}` again to finish it, or "
        f"`skyinfra down --cluster {cluster}` to destroy what it made"
    )


class WorkspaceBusyError(WorkspaceError):
    """Another skyinfra command holds the cluster's workspace."""

    def __init__(self, cluster: str, lock_file: object, holders: Sequence[LockHolder] = ()) -> None:
        # No holder file yet: one that took the lock an instant ago has not written it.
        who = " and ".join(h.describe() for h in holders) or "another skyinfra command"
        verb = "hold" if len(holders) > 1 else "holds"
        self.holders = tuple(holders)
        super().__init__(
            f"cluster {cluster!r} is busy: {who} {verb} it ({lock_file}); wait for "
            f"{'them' if len(holders) > 1 else 'it'} to end. One operation at a time per "
            "cluster (submissions may share it)."
        )


class WorkspaceConflictError(WorkspaceError):
    """The workspace belongs to a cluster made from another spec file; nothing done."""

    exit_code = exitcodes.USAGE


class ConfirmationRequired(SkyinfraError):
    """A destructive step needs the user's yes (a terminal prompt, or --yes); nothing done."""

    exit_code = exitcodes.USAGE


class Declined(SkyinfraError):
    """The user answered no at a confirmation prompt; nothing was done. Said as it is (the CLI
    prints no "error:" before it), and exit 1 so that a command after `&&` does not run."""

    exit_code = exitcodes.DECLINED


class GuardrailError(SkyinfraError):
    """A guardrail of the spec (or a fixed check) failed on the plan; nothing was applied."""

    exit_code = exitcodes.GUARDRAIL


class StalePlanError(SkyinfraError):
    """A planfile given to `apply` / `up --plan` is not what was reviewed any more: the state,
    the spec or the file itself changed since `skyinfra plan`; nothing was applied."""

    exit_code = exitcodes.STALE_PLAN


class TopologyError(SkyinfraError):
    """Terraform's outputs (or a topology.json) do not make a valid topology, or disagree
    with the spec they were made from."""


class CommandError(SkyinfraError):
    """An external step failed; carries argv, return code and stderr as evidence."""

    def __init__(
        self,
        message: str,
        *,
        argv: Sequence[str] = (),
        returncode: int | None = None,
        stderr: str = "",
    ) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        detail = f"\n  command: {' '.join(self.argv)}" if self.argv else ""
        if returncode is not None:
            detail += f"\n  exit code: {returncode}"
        if stderr.strip():
            detail += "\n  stderr:\n    " + "\n    ".join(stderr.strip().splitlines()[-20:])
        super().__init__(message + detail)


class TerraformError(CommandError):
    """A Terraform operation (init, plan, apply, output, destroy, ...) failed."""


class BootstrapError(CommandError):
    """A node's bootstrap (venv, runtime wheel install) failed."""


class ResourceError(SkyinfraError):
    """A file that ships inside skyinfra (module, template, script) is missing: the
    installation is incomplete."""


class RuntimeWheelError(SkyinfraError):
    """The skyinfra-runtime wheel for the nodes cannot be built (the runtime is not installed,
    or SKYINFRA_RUNTIME_DIR does not hold a runtime source tree)."""


class PreflightError(SkyinfraError):
    """A cloud check before Terraform failed (credentials, instance type, quota, AMI)."""

    exit_code = exitcodes.PREFLIGHT


class CapacityError(SkyinfraError):
    """`up` found no capacity for the nodes: every zone tried refused them (a new cluster:
    nothing of it is left running), or a running cluster's zone has no room to grow.
    ``attempts`` holds what was tried (skyinfra.targets.aws.capacity.Attempt)."""

    exit_code = exitcodes.NO_CAPACITY

    def __init__(self, message: str, *, attempts: Sequence[object] = ()) -> None:
        self.attempts = list(attempts)
        super().__init__(message)


class LaunchRefusedError(SkyinfraError):
    """The cloud refused the nodes for a reason no other zone can change (quota, image,
    rights); ``code`` is its error code."""

    def __init__(self, message: str, *, code: str) -> None:
        self.code = code
        super().__init__(message)


class TransportError(CommandError):
    """Reaching a node (SSH, local process) failed."""


class HeadLostError(TransportError):
    """Node 0 is gone (on the local target: its folder), and with it a job's supervisor and
    record: nothing on it can be asked any more."""


class SupervisorGoneError(HeadLostError):
    """Node 0 is there but the job's supervisor on it is not (killed: its record still says
    the job runs and nothing will write it again); ``record`` is the record's last copy."""

    def __init__(self, message: str, *, record: dict[str, Any]) -> None:
        self.record = record
        super().__init__(message)


class HostKeyChangedError(TransportError):
    """The node's host key differs from the one pinned in known_hosts: waiting cannot help."""


class NoSpareLeft(TransportError):
    """The ssh target: a host stopped answering and ``ssh.spare_hosts`` has no spare left to
    stand in for it; names the lost host."""


class RunError(SkyinfraError):
    """User code failed on one or more nodes; names the first failing node.

    Always exits NODE_FAILED; ``exit_codes`` holds every node's own code (the runtime's).
    """

    exit_code = exitcodes.NODE_FAILED

    def __init__(
        self,
        message: str,
        *,
        node: int | None = None,
        exit_codes: Mapping[int, int | None] | None = None,
    ) -> None:
        self.node = node
        self.exit_codes = dict(exit_codes or {})
        super().__init__(message)


class RunTimeoutError(RunError):
    """`run --timeout` passed while nodes still ran; every node was ended. ``node`` is the
    first node still running then, ``still_running`` all of them."""

    exit_code = exitcodes.RUN_TIMEOUT

    def __init__(
        self,
        message: str,
        *,
        still_running: Sequence[int],
        exit_codes: Mapping[int, int | None] | None = None,
    ) -> None:
        self.still_running = list(still_running)
        super().__init__(
            message,
            node=self.still_running[0] if self.still_running else None,
            exit_codes=exit_codes,
        )


class NodesNotReadyError(SkyinfraError):
    """`run` found nodes whose bootstrap failed, or that were not ready in time.

    ``nodes`` maps each such node's name to its readiness state (pending, failed, unreachable).
    """

    exit_code = exitcodes.NODES_NOT_READY

    def __init__(self, message: str, *, nodes: dict[str, str]) -> None:
        self.nodes = dict(nodes)
        super().__init__(message)


class VerifyFailedError(SkyinfraError):
    """`skyinfra verify` (or `run --verify`): a check failed; names each node and check."""

    exit_code = exitcodes.VERIFY_FAILED

    def __init__(self, failures: Sequence[tuple[str, str, str]]) -> None:
        """``failures``: (node name, check, reason) for each failure."""
        self.failures = list(failures)
        lines = [
            f"{check} on {node}: " + (reason if len(reason) <= 200 else reason[:199] + "…")
            for node, check, reason in self.failures
        ]
        super().__init__(
            f"verify failed: {len(lines)} check(s) failed on the nodes:\n  " + "\n  ".join(lines)
        )


class StateLockedError(TerraformError):
    """Terraform found the cluster's state locked by another operation (a shared backend's
    lock, another operator's `up`); ``lock`` names the lock and its holder."""

    def __init__(
        self,
        cluster: str,
        lock: object,
        *,
        argv: Sequence[str] = (),
        returncode: int | None = None,
        stderr: str = "",
    ) -> None:
        self.lock = lock
        lock_id = getattr(lock, "id", "") or "LOCK_ID"
        describe = getattr(lock, "describe", None)
        what = describe() if callable(describe) else str(lock)
        super().__init__(
            f"cluster {cluster!r}: the state is locked: {what}. Another operation on this "
            "cluster is running; wait for it to end and try again. If its process was killed "
            f"and nothing runs any more, release the lock with `skyinfra unlock --cluster "
            f"{cluster} {lock_id}`",
            argv=argv,
            returncode=returncode,
            stderr=stderr,
        )


class JobNoLongerWaits(SkyinfraError):
    """An unattended recovery found its job recovered by someone else, or cancelled, while
    it waited for the workspace: nothing to do."""

    exit_code = exitcodes.OK


class Detached(BaseException):
    """Raised in `run` on SIGHUP or SIGTERM: stop following, leave the job running.
    ``job_id``: the job that goes on ("" when none was started yet); ``signum``: the signal
    that said so (`run` exits 130 on SIGHUP, 143 on SIGTERM)."""

    def __init__(self, job_id: str = "", signum: int = signal.SIGHUP) -> None:
        super().__init__(job_id)
        self.job_id = job_id
        self.signum = signum


class MissingFrameworkError(SpecError):
    """A plugin's framework does not import with the interpreter local nodes are made from
    (their environments see its site-packages and install nothing else): the spec is fine,
    this machine lacks a package. Exits USAGE, like the spec errors it is listed with."""

    def __init__(
        self, field: str, value: str, *, what: str, needs: str, python: str, install: str
    ) -> None:
        self.field = field
        self.value = value
        self.expected = f"{needs} importable by {python}"
        Exception.__init__(
            self,
            f"{what} ({field}) needs {needs}, which does not import with {python} (local "
            f"nodes use that interpreter's site-packages): install it with `{python} -m pip "
            f"install {install}`, or list it in python_packages to install it on the nodes "
            "alone; nothing was changed",
        )


class CancelledInQueue(SkyinfraError):
    """The job an attached `run` waited for was cancelled (`skyinfra cancel`) while it was
    queued on the head: nothing of it ever ran. Exits as a cancelled job does (130)."""

    exit_code = exitcodes.INTERRUPTED

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(
            f"job {job_id} was cancelled while queued: it never started (nothing of it ran)"
        )


class CancelledByCtrlC(KeyboardInterrupt):
    """Raised in an attached `run` on Ctrl-C once it has ended the job's nodes (Ctrl-C cancels
    the job it follows). ``job_id``: the job; ``started``: False when Ctrl-C came while its
    agents were being started (some may have started before it); ``queued``: the job was
    waiting in the head's queue and was left there (Ctrl-C leaves a queued job queued by
    default); ``cancelled``: that queued job was cancelled instead (`run
    --ctrl-c-while-queued cancel`)."""

    def __init__(
        self, job_id: str, *, started: bool, queued: bool = False, cancelled: bool = False
    ) -> None:
        super().__init__(job_id)
        self.job_id = job_id
        self.started = started
        self.queued = queued
        self.cancelled = cancelled
