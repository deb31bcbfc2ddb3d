"""The cluster spec itself: the fields every cluster has (:class:`ClusterSpec`, with
``to_dict``/``from_dict``) and :func:`validate_spec`, which checks every one of them and
hands the target's own table to the target that owns it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from skyinfra_runtime import checkpoints as runtime_checkpoints
from skyinfra_runtime import jobenv
from skyinfra_runtime.errors import PluginFlagError
from skyinfra_runtime.plugin_table import parse_plugin_flag as runtime_parse_plugin_flag
from skyinfra_runtime.plugin_table import plugin_problems
from skyinfra_runtime.restarts import RETRY_ON as RUNTIME_RETRY_ON
from skyinfra_runtime.topology import PluginRef

from skyinfra.errors import InternalError, SpecError
from skyinfra.guardrail_table import Guardrails, parse_guardrails
from skyinfra.spec.fields import Problems, read_bool, read_int, reject_unknown
from skyinfra.target_registry import declaration, target_names

# One rule for cluster names, everywhere: 1-32 characters, lowercase letters, digits and '-',
# starting with a letter and not ending with '-' (the modules' own checks agree; a target may
# add nothing to it). The workspace folder is named after it, so it also keeps names from
# reaching outside the clusters folder.
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$|^[a-z]$")
NAME_EXPECTED = (
    "1-32 characters: lower-case letters, digits and '-', starting with a letter, "
    "not ending with '-'"
)
DEFAULT_PROVIDER = "local"
# A pip requirement without spaces or leading dash: keeps pip options and shell words out.
_PACKAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-\[\],<>=!~*+]*$")

COMMON_KEYS = (
    "name",
    "provider",
    "nodes",
    "procs_per_node",
    "head_port",
    "plugins",
    "python_packages",
    "run_timeout",
    "verify",
    "guardrails",
    "backend",
    "engine",
    "env",
    "secrets",
    "checkpoints",
    "max_restarts",
    "retry_on",
    "warm_workers",
)
# Fields only jobs read (`run` takes them when a job starts): changing one changes no
# infrastructure, so a reviewed plan stays the plan to apply (planning.check_not_stale).
JOB_ONLY_KEYS = ("env", "secrets", "max_restarts", "retry_on")
# The most restarts a job may ask for (`max_restarts`, `run --max-restarts`).
MAX_RESTARTS = 1000
# What `retry_on` / `run --retry-on` may say (the runtime's supervisor decides by it).
RETRY_ON = RUNTIME_RETRY_ON
# The longest `run_timeout` (seconds): a week.
MAX_RUN_TIMEOUT_S = 7 * 24 * 3600

# A plugin as the spec names it: the runtime's own type, so the topology carries it as is.
# Its options are JSON values (strings, numbers, booleans, lists, tables), checked against
# the runtime's plugin table (skyinfra_runtime.plugin_table).
PluginSpec = PluginRef

Section = TypeVar("Section")


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    provider: str
    nodes: int
    # The target's own table, parsed by the target (skyinfra.target_registry.TargetSection).
    section: Any
    procs_per_node: int | str = 1
    head_port: int = 29500
    plugins: tuple[PluginSpec, ...] = ()
    python_packages: tuple[str, ...] = ()
    # `skyinfra run`'s default --timeout in seconds (None: no limit).
    run_timeout: int | None = None
    # `skyinfra run` runs `skyinfra verify`'s checks first (as with --verify).
    verify: bool = False
    # `[guardrails]`: what `plan` checks and `up`/`apply` refuse to go past (skyinfra/review).
    guardrails: Guardrails = field(default_factory=Guardrails)
    # Where the state lives: "s3://bucket/prefix" (None: in the workspace). See
    # skyinfra/terraform/backend.py.
    backend: str | None = None
    # The Terraform that drives the cluster: a terraform/tofu binary's path or name on PATH
    # (None or "embedded": the embedded one). See skyinfra/terraform/external.py.
    engine: str | None = None
    # `env = { NAME = "value" }`: variables every job's workers get (skyinfra.run.jobenv).
    env: tuple[tuple[str, str], ...] = ()
    # `secrets = ["NAME"]`: names only; each job takes the values from the operator's
    # environment and never writes them to a file (skyinfra.run.jobenv).
    secrets: tuple[str, ...] = ()
    # `checkpoints = "NAME"`: every job's checkpoint set ($SKYINFRA_CHECKPOINT_DIR), shared
    # across jobs (None: each job its own, named by its id). See skyinfra_runtime.checkpoints.
    checkpoints: str | None = None
    # `max_restarts = N`: `run --max-restarts`'s default (restarts of a failed job on the same
    # nodes); `retry_on = "error"`: `run --retry-on`'s (see skyinfra_runtime.jobs.supervisor).
    max_restarts: int = 0
    retry_on: str = "signal"
    # `warm_workers = false`: no standby workers on the nodes (skyinfra_runtime.standbys).
    warm_workers: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The spec in the file's shape (what ``from_dict`` and ``validate_spec`` read)."""
        return {
            "name": self.name,
            "provider": self.provider,
            "nodes": self.nodes,
            "procs_per_node": self.procs_per_node,
            "head_port": self.head_port,
            "plugins": [{"name": p.name, "options": dict(p.options)} for p in self.plugins],
            "python_packages": list(self.python_packages),
            **({"run_timeout": self.run_timeout} if self.run_timeout is not None else {}),
            **({"verify": True} if self.verify else {}),
            **({"guardrails": self.guardrails.to_dict()} if self.guardrails.to_dict() else {}),
            **({"backend": self.backend} if self.backend is not None else {}),
            **({"engine": self.engine} if self.engine is not None else {}),
            **({"env": dict(self.env)} if self.env else {}),
            **({"secrets": list(self.secrets)} if self.secrets else {}),
            **({"checkpoints": self.checkpoints} if self.checkpoints is not None else {}),
            **({"max_restarts": self.max_restarts} if self.max_restarts else {}),
            **({"retry_on": self.retry_on} if self.retry_on != "signal" else {}),
            **({} if self.warm_workers else {"warm_workers": False}),
            self.provider: self.section.to_dict(),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ClusterSpec:
        """Read ``to_dict``'s output (spec.json) back, validating it again."""
        # spec.json of skyinfra 0.1.0 held every target's table, null for the unused ones.
        return validate_spec({k: v for k, v in raw.items() if v is not None})

    def section_as(self, kind: type[Section]) -> Section:
        """The target's table as the type its target parses it into."""
        if not isinstance(self.section, kind):
            raise InternalError(
                f"cluster {self.name!r}: its [{self.provider}] table is a "
                f"{type(self.section).__name__}, not a {kind.__name__}"
            )
        return self.section


# ---------------------------------------------------------------- parsing helpers


def parse_plugin_flag(text: str, field_name: str = "plugins") -> dict[str, Any]:
    """``keras:backend=jax,x=y`` -> ``{"name": "keras", "options": {...}}`` (checked later).

    The runtime's reading of ``NAME[:key=value,...]`` (values that are JSON are read as JSON);
    a malformed flag is a SpecError naming ``field_name``.
    """
    try:
        ref = runtime_parse_plugin_flag(text)
    except PluginFlagError as err:
        raise SpecError(field_name, text, err.expected) from None
    return {"name": ref.name, "options": dict(ref.options)}


def _plugins(value: Any) -> tuple[PluginSpec, ...]:
    """The spec's plugin list, checked by the runtime's plugin table (one set of rules)."""
    if not isinstance(value, list):
        raise SpecError("plugins", value, 'a list like ["jax", "keras:backend=jax"]')
    # Every plugin's problems together: an unknown name must not hide another's bad option.
    problems = Problems()
    refs: list[PluginRef] = []
    indexes: list[int] = []  # each ref's place in the spec's list (a malformed entry has none)
    for i, item in enumerate(value):
        path = f"plugins[{i}]"
        try:
            entry = parse_plugin_flag(item, path) if isinstance(item, str) else item
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise SpecError(path, item, 'a plugin name or a table {name = "...", options = {}}')
            reject_unknown(entry, ("name", "options"), f"{path}.")
        except SpecError as err:
            problems.found.append(err)
            continue
        refs.append(PluginRef(entry["name"], entry.get("options", {})))
        indexes.append(i)
    valid, wrong = plugin_problems(refs)
    for problem in wrong:
        where = f"plugins[{indexes[problem.index or 0]}]"
        where += f".{problem.field}" if problem.field else ""
        problems.found.append(SpecError(where, problem.value, problem.expected))
    problems.raise_any()
    return valid


def _packages(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise SpecError("python_packages", value, 'a list of pip requirements like ["numpy>=1.26"]')
    for i, item in enumerate(value):
        if not isinstance(item, str) or not _PACKAGE_RE.match(item):
            raise SpecError(
                f"python_packages[{i}]",
                item,
                "a pip requirement without spaces or leading '-', "
                "e.g. 'numpy>=1.26' or 'jax[cuda12]'",
            )
    return tuple(value)


def _env(value: Any) -> tuple[tuple[str, str], ...]:
    """`env`: a table of variable names (jobenv's rules) and string values."""
    if not isinstance(value, dict):
        raise SpecError("env", value, 'a table like env = { NCCL_DEBUG = "INFO" }')
    problems = Problems()
    for name, item in value.items():
        why = jobenv.name_problem(name)
        if why:
            problems.found.append(SpecError(f"env.{name}", name, why))
            continue
        why = jobenv.value_problem(item)
        if why:
            problems.found.append(SpecError(f"env.{name}", item, why))
    problems.raise_any()
    return tuple(value.items())


def _secrets(value: Any, env: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """`secrets`: a list of names only (the values come from the environment of `run`)."""
    if not isinstance(value, list):
        # Never the value itself: a table here may hold secrets' values.
        shown = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise SpecError(
            "secrets",
            shown,
            'a list of names like secrets = ["WANDB_API_KEY"]; never values: `run` takes '
            "each value from its own environment",
        )
    problems = Problems()
    in_env = {name for name, _ in env}
    for i, name in enumerate(value):
        why = jobenv.name_problem(name)
        if why is None and name in in_env:
            why = "a name that is not in env too (a variable is either env or a secret)"
        if why is None and name in value[:i]:
            why = "each name once"
        if why:
            shown = name if isinstance(name, str) else type(name).__name__
            problems.found.append(SpecError(f"secrets[{i}]", shown, why))
    problems.raise_any()
    return tuple(value)


def _check_plugin_order(
    plugins: Sequence[PluginSpec], *, nodes: int, procs_per_node: int | str
) -> None:
    """Keras on JAX across processes needs JAX's distributed runtime first: without the jax
    plugin before it, each process trains alone (or Keras fails at its first collective).
    Refused here, at `up`, not at the first run."""
    if nodes == 1 and procs_per_node == 1:
        return
    names = [p.name for p in plugins]
    for i, plugin in enumerate(plugins):
        backend = plugin.options.get("backend", "jax")
        if plugin.name == "keras" and backend == "jax" and "jax" not in names[:i]:
            raise SpecError(
                f"plugins[{i}]",
                plugin.name,
                "the jax plugin before keras on JAX with several processes, e.g. plugins = "
                '["jax", "keras:backend=jax"]',
            )


def check_name(name: Any, field: str = "name") -> str:
    """A cluster name by the one rule (:data:`NAME_RE`); SpecError naming ``field``."""
    if name is None:
        raise SpecError(field, None, f"{NAME_EXPECTED}, in the spec file or as --name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise SpecError(field, name, NAME_EXPECTED)
    return name


def validate_spec(raw: Mapping[str, Any]) -> ClusterSpec:
    """Check every field; SpecError (exit 2) naming the problem, or SpecProblems naming
    every one when there are several (independent fields are all checked)."""
    targets = target_names()
    problems = Problems()
    problems.check(lambda: reject_unknown(raw, (*COMMON_KEYS, *targets), ""), None)
    name = problems.check(lambda: check_name(raw.get("name")), "")
    provider = raw.get("provider", DEFAULT_PROVIDER)
    if provider not in targets:
        problems.found.append(SpecError("provider", provider, f"one of {list(targets)}"))
    max_nodes = declaration(provider).max_nodes if provider in targets else 1
    nodes = problems.check(lambda: read_int(raw, "nodes", "nodes", 1, 1, max_nodes), 1)
    ppn = raw.get("procs_per_node", 1)
    if ppn != "auto" and (isinstance(ppn, bool) or not isinstance(ppn, int) or not 1 <= ppn <= 64):
        problems.found.append(
            SpecError("procs_per_node", ppn, "an integer from 1 to 64, or 'auto'")
        )
        ppn = 1
    head_port = problems.check(
        lambda: read_int(raw, "head_port", "head_port", 29500, 1024, 65534), 29500
    )
    no_plugins: tuple[PluginSpec, ...] = ()
    no_packages: tuple[str, ...] = ()
    plugins = problems.check(lambda: _plugins(raw.get("plugins", [])), no_plugins)
    packages = problems.check(lambda: _packages(raw.get("python_packages", [])), no_packages)
    run_timeout = (
        problems.check(
            lambda: read_int(raw, "run_timeout", "run_timeout", 0, 1, MAX_RUN_TIMEOUT_S), None
        )
        if "run_timeout" in raw
        else None
    )
    verify = problems.check(lambda: read_bool(raw, "verify", "verify", False), False)
    warm_workers = problems.check(
        lambda: read_bool(raw, "warm_workers", "warm_workers", True), True
    )
    guardrails = problems.check(lambda: parse_guardrails(raw.get("guardrails")), Guardrails())
    problems.check(lambda: _check_plugin_order(plugins, nodes=nodes, procs_per_node=ppn), None)
    section = None
    if provider in targets:
        section = problems.check(
            lambda: declaration(provider).parse_section(raw.get(provider), nodes=nodes), None
        )
    # A backend's region may come from the target's table: judged once that table is valid.
    backend = (
        problems.check(lambda: _backend(raw.get("backend"), section), None)
        if section is not None
        else None
    )
    needs_backend = getattr(section, "needs_backend", None)
    if needs_backend and backend is None and raw.get("backend") is None:
        problems.found.append(
            SpecError(
                needs_backend,
                True,
                'false, or the state in S3 (`backend = "s3://bucket/prefix"`, or '
                "--backend): node 0 applies the cluster's Terraform itself, under the same "
                "lock as the operators",
            )
        )
    engine = problems.check(lambda: _engine(raw.get("engine")), None)
    no_env: tuple[tuple[str, str], ...] = ()
    env = problems.check(lambda: _env(raw.get("env", {})), no_env)
    no_secrets: tuple[str, ...] = ()
    secrets = problems.check(lambda: _secrets(raw.get("secrets", []), env), no_secrets)
    ckpts = problems.check(lambda: checkpoints_name(raw.get("checkpoints"), "checkpoints"), None)
    max_restarts = problems.check(
        lambda: read_int(raw, "max_restarts", "max_restarts", 0, 0, MAX_RESTARTS), 0
    )
    retry_on = raw.get("retry_on", "signal")
    if retry_on not in RETRY_ON:
        problems.found.append(SpecError("retry_on", retry_on, f"one of {list(RETRY_ON)}"))
        retry_on = "signal"
    # Another target's table is allowed (`--provider` picks), and checked all the same.
    for other in targets:
        if other != provider and other in raw:
            try:
                declaration(other).parse_section(raw[other], nodes=nodes)
            except SpecError as err:
                problems.found.append(err)
    problems.raise_any()
    return ClusterSpec(
        name=name,
        provider=provider,
        nodes=nodes,
        section=section,
        procs_per_node=ppn,
        head_port=head_port,
        plugins=plugins,
        python_packages=packages,
        run_timeout=run_timeout,
        verify=verify,
        guardrails=guardrails,
        backend=backend,
        engine=engine,
        env=env,
        secrets=secrets,
        checkpoints=ckpts,
        max_restarts=max_restarts,
        retry_on=retry_on,
        warm_workers=warm_workers,
    )


def checkpoints_name(value: Any, field_name: str) -> str | None:
    """A checkpoint set's name (`checkpoints` in the spec, `run --checkpoints`), checked by
    the runtime's rule: one safe folder name."""
    if value is None:
        return None
    problem = runtime_checkpoints.name_problem(value)
    if problem:
        raise SpecError(field_name, value, problem)
    return str(value)


def _backend(value: Any, section: Any) -> str | None:
    """The state backend URL, checked; its region comes from the URL or the target's own."""
    if value is None:
        return None
    # Imported here: the terraform package loads its engine, which a spec without a backend
    # (and `skyinfra --help`, which reads the targets' declarations) does not need.
    from skyinfra.terraform.backend import parse_backend

    backend = parse_backend(value)
    if backend.region is None and not isinstance(getattr(section, "region", None), str):
        raise SpecError(
            "backend",
            value,
            "a URL naming the bucket's region for this target, e.g. "
            f"'{backend.url}?region=us-east-1'",
        )
    return backend.url


def _engine(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or any(c in value for c in "\n\r\0"):
        raise SpecError(
            "engine",
            value,
            '"embedded", or a terraform or tofu binary: a path or a name on PATH',
        )
    return value.strip()
