"""One exit-code table for the operator, every exception class in the one tree, and
`skyinfra run` failing with one fixed code while reporting each node's own."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from skyinfra import errors, exitcodes
from skyinfra.run.report import NodeOutcome, RunReport, describe_exit, raise_for_failure
from tests.conftest import REPO_ROOT


def test_every_exception_class_lives_in_errors_py() -> None:
    outside = []
    for path in sorted((REPO_ROOT / "skyinfra").rglob("*.py")):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                re.search(r"(Error|Exception)$", ast.unparse(base)) for base in node.bases
            ):
                outside.append(f"{path.relative_to(REPO_ROOT)}:{node.name}")
    assert outside == []


def test_every_error_exits_with_a_code_from_the_table() -> None:
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass)]
    codes = {c.exit_code for c in classes if issubclass(c, errors.SkyinfraError)}
    assert codes <= set(exitcodes.MEANINGS)
    assert errors.SpecError.exit_code == errors.ConfigError.exit_code == exitcodes.USAGE
    assert errors.RenderError.exit_code == exitcodes.ERROR  # a bug, not the user's spec
    assert errors.RunError.exit_code == exitcodes.NODE_FAILED
    assert errors.NodesNotReadyError.exit_code == exitcodes.NODES_NOT_READY


def test_the_manual_documents_every_exit_code() -> None:
    """docs/reference/exit-codes.md is generated from exitcodes.EXPLANATIONS (make
    docs-reference; test_docs_reference.py checks it is current): every code is explained."""
    assert set(exitcodes.EXPLANATIONS) == set(exitcodes.MEANINGS)
    page = (REPO_ROOT / "docs" / "reference" / "exit-codes.md").read_text()
    table = page.split("# Exit codes", 1)[1].split("\n#", 1)[0]
    documented = {int(m) for m in re.findall(r"^\| (\d+) +\|", table, re.MULTILINE)}
    assert documented == set(exitcodes.MEANINGS)


def test_a_failed_node_gives_one_fixed_code_and_reports_its_own(tmp_path: Path) -> None:
    report = RunReport(
        "r1",
        tmp_path,
        {
            0: NodeOutcome(0, exit_code=-15, ended_by_us=True),
            1: NodeOutcome(1, exit_code=3),
        },
        first_failure=1,
    )
    assert report.exit_code == exitcodes.NODE_FAILED
    assert describe_exit(report.outcomes[1]) == "failed (exit 3, topology or plugin set-up failed)"
    with pytest.raises(errors.RunError) as err:
        raise_for_failure(report)
    assert err.value.exit_code == exitcodes.NODE_FAILED  # not the node's 3 (preflight's code)
    assert err.value.exit_codes == {0: -15, 1: 3}
    assert "failed on node 1 (node-1, exit 3: topology or plugin set-up failed)" in str(err.value)
    assert (
        "node-0: ended by skyinfra after another node failed (exit -15: killed by signal SIGTERM)"
        in str(err.value)
    )


def test_a_run_without_failure_raises_nothing(tmp_path: Path) -> None:
    report = RunReport("r2", tmp_path, {0: NodeOutcome(0, exit_code=0)})
    assert report.exit_code == exitcodes.OK
    raise_for_failure(report)
