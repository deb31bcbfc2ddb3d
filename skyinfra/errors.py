"""One exception tree for the operator side.

Every error a user can cause or meet derives from :class:`SkyinfraError`. The CLI catches
that one base class, prints ``str(err)`` (which names the offending field or command and what
would be valid) and exits with ``err.exit_code``; anything else is a bug and keeps its
traceback. Errors that come from running something carry their evidence (argv, return code,
stderr) as attributes so that tests and logs can show exactly what failed.
"""

from __future__ import annotations

from collections.abc import Sequence


class SkyinfraError(Exception):
    """Base class; ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class SpecError(SkyinfraError):
    """The cluster spec (file or flags) is invalid. Raised before anything is written."""

    exit_code = 2

    def __init__(self, field: str, value: object, expected: str) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        super().__init__(f"invalid spec field {field!r}: got {value!r}; expected {expected}")


class WorkspaceError(SkyinfraError):
    """A cluster workspace is missing, locked or inconsistent."""


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

    exit_code = 3


class TransportError(CommandError):
    """Reaching a node (SSH, local process) failed."""


class RunError(SkyinfraError):
    """User code failed on one or more nodes; names the first failing node."""

    def __init__(
        self, message: str, *, node: int | None = None, exit_codes: dict[int, int] | None = None
    ) -> None:
        self.node = node
        self.exit_codes = dict(exit_codes or {})
        super().__init__(message)


class NodesNotReadyError(SkyinfraError):
    """`run` found nodes whose bootstrap failed, or that were not ready in time.

    ``nodes`` maps each such node's name to its readiness state (pending, failed, unreachable).
    """

    def __init__(self, message: str, *, nodes: dict[str, str]) -> None:
        self.nodes = dict(nodes)
        super().__init__(message)
