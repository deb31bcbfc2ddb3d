"""A job's environment: the spec's ``env`` and ``secrets``, ``run --env`` and ``--secret``.

Merged here, on the operator's side, before anything is copied or started: the command line
wins over the spec; every name follows the runtime's rules (skyinfra_runtime.jobenv: shell
names, none of skyinfra's own nor of the variables the runtime and its plugins set); an
``--env NAME`` or a secret that this process's environment lacks is a SpecError (exit 2)
naming it.

Where the values go: ``env`` is part of the job's record (``skyinfra jobs JOB`` shows it);
a secret's value only ever travels on the stdin of each node's ``skyinfra-runtime
supervise`` (skyinfra.run.job), lives in that agent's memory and its launcher's environment,
and is masked as ``***`` in the node's log. The record, summary.json and every message hold
the secrets' names only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from skyinfra_runtime import jobenv

from skyinfra.errors import SpecError, spec_problems

MASK = jobenv.MASK


@dataclass(frozen=True)
class JobEnv:
    env: dict[str, str] = field(default_factory=dict)
    # name -> value, read from the operator's environment; never written anywhere here.
    secrets: dict[str, str] = field(default_factory=dict)

    def record(self) -> dict[str, object]:
        """What the job's record keeps: env with values, secrets by name."""
        return {"env": dict(self.env), "secrets": sorted(self.secrets)}

    def private(self) -> dict[str, dict[str, str]]:
        """What each node's agent reads on its stdin (with the job's token)."""
        return {"env": dict(self.env), "secrets": dict(self.secrets)}

    def mask(self, text: str) -> str:
        return jobenv.mask_text(text, self.secrets.values()) if self.secrets else text

    def __repr__(self) -> str:  # never a secret's value, whoever prints this object
        return f"JobEnv(env={self.env!r}, secrets={sorted(self.secrets)!r})"


def shown(record: Mapping[str, object]) -> list[str]:
    """``NAME=value`` for env, ``NAME=***`` for secrets, sorted by name (a job's record)."""
    env = record.get("env")
    names = record.get("secrets")
    lines = [f"{k}={v}" for k, v in env.items()] if isinstance(env, dict) else []
    lines += [f"{n}={MASK}" for n in names] if isinstance(names, list) else []
    return sorted(lines)


def resolve(
    *,
    spec_env: Sequence[tuple[str, str]],
    spec_secrets: Sequence[str],
    cli_env: Sequence[str],
    cli_secrets: Sequence[str],
    environ: Mapping[str, str],
) -> JobEnv:
    """The job's env and secrets; SpecError (exit 2) naming every bad name or missing value."""
    problems: list[SpecError] = []
    env = dict(spec_env)
    from_cli: set[str] = set()
    for item in cli_env:
        name, eq, value = item.partition("=")
        why = jobenv.name_problem(name)
        if why:
            problems.append(SpecError("--env", name, f"NAME=VALUE or NAME with {why}"))
            continue
        if not eq:
            if name not in environ:
                problems.append(
                    SpecError(
                        "--env",
                        name,
                        f"a variable set in this environment (export {name}=...), "
                        f"or --env {name}=VALUE",
                    )
                )
                continue
            value = environ[name]
        why = jobenv.value_problem(value)
        if why:
            problems.append(SpecError("--env", name, why))
            continue
        env[name] = value
        from_cli.add(name)
    secrets: dict[str, str] = {}
    for where, names in (("secrets", spec_secrets), ("--secret", cli_secrets)):
        for name in names:
            # A value on the command line would be in shell history and the process list.
            bare = name.partition("=")[0]
            why = jobenv.name_problem(bare)
            if why is None and "=" in name:
                why = "a NAME only: the value comes from this environment (export it first)"
            if why is None and bare not in environ:
                why = f"a variable set in this environment (export {bare}=...)"
            if why is None and jobenv.value_problem(environ[bare]):
                why = "a value without NUL characters"
            if why:
                problems.append(SpecError(where, bare, why))
                continue
            secrets[bare] = environ[bare]
    for name in sorted(set(env) & set(secrets)):
        if name not in from_cli:  # the spec's env, made a secret by --secret: it wins
            del env[name]
            continue
        problems.append(
            SpecError(
                "--env",
                name,
                "a name that is not a secret too (a variable is either env or a secret)",
            )
        )
    error = spec_problems(problems)
    if error is not None:
        raise error
    return JobEnv(env, secrets)
