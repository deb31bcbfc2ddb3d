"""examples/ci/skyinfra.yml cannot run against GitHub here; what it relies on can be checked:
the YAML parses into the jobs it describes, every `skyinfra` command and flag it calls exists,
and the exit codes, output folder and comment marker it assumes are skyinfra's."""

from __future__ import annotations

import re
import shlex
from typing import Any

import click
import yaml

from skyinfra import exitcodes
from skyinfra.cli import cli
from skyinfra.planning import PLAN_MD, PLANFILE
from skyinfra.review.markdown import MARKER
from tests.conftest import REPO_ROOT

WORKFLOW = REPO_ROOT / "examples" / "ci" / "skyinfra.yml"


def workflow() -> dict[Any, Any]:
    data = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(data, dict)
    return data


def scripts() -> list[str]:
    return [
        str(step.get("run") or step.get("with", {}).get("script") or "")
        for job in workflow()["jobs"].values()
        for step in job["steps"]
    ]


def skyinfra_calls() -> list[list[str]]:
    calls = []
    for script in scripts():
        for line in script.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("skyinfra "):
                words = shlex.split(line)
                calls.append(words[: words.index(">")] if ">" in words else words)
    return calls


def test_the_workflow_parses_into_a_plan_and_an_apply_job() -> None:
    data = workflow()
    on = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` as true
    assert on["pull_request"]["types"] == ["opened", "synchronize", "reopened", "closed"]
    assert set(data["jobs"]) == {"plan", "apply"}
    assert "merged" in data["jobs"]["apply"]["if"]
    assert data["permissions"]["pull-requests"] == "write"


def test_every_skyinfra_command_and_flag_it_calls_exists() -> None:
    calls = skyinfra_calls()
    assert [call[1] for call in calls] == ["validate", "plan", "apply"]
    for call in calls:
        command = cli.get_command(click.Context(cli), call[1])
        assert command is not None, call
        flags = {opt for param in command.params for opt in param.opts}
        for word in call[2:]:
            if word.startswith("--"):
                assert word in flags, f"{call[1]} has no {word}"
        # click parses the line as the workflow writes it (variables stand for values).
        command.make_context(call[1], [w.replace("$PLAN_DIR", "dir") for w in call[2:]])


def test_validate_runs_before_any_credential_and_annotates_the_spec() -> None:
    """`validate` needs no cloud: it comes before the plan job takes its AWS role, and its
    --json problems (file, line, field, message) become GitHub annotations."""
    steps = workflow()["jobs"]["plan"]["steps"]
    names = [str(s.get("uses") or s.get("run") or "") for s in steps]
    validate = next(i for i, s in enumerate(steps) if "skyinfra validate" in str(s.get("run")))
    credentials = next(i for i, n in enumerate(names) if "configure-aws-credentials" in n)
    assert validate < credentials
    script = str(steps[validate]["run"])
    assert "--json" in script and "::error file=" in script
    for key in ("file", "line", "field", "message"):
        assert f"(.{key}" in script  # jq reads validate's JSON keys
    assert 'exit "$code"' in script


def test_it_relies_on_skyinfras_exit_codes_files_and_marker() -> None:
    text = WORKFLOW.read_text()
    plan_step = next(s for s in scripts() if "skyinfra plan" in s)
    codes = {int(c) for c in re.findall(r"-ne (\d+)", plan_step)}
    assert codes == {exitcodes.OK, exitcodes.PLAN_CHANGES, exitcodes.GUARDRAIL}
    assert f"exit {exitcodes.GUARDRAIL}" in text
    assert f"/{PLAN_MD}`" in text and f"$PLAN_DIR/{PLANFILE}" in text
    assert MARKER in text
    assert "PLAN_DIR: skyinfra-plan" in text
