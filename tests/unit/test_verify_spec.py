"""`verify = true` in the spec (the --verify flag's twin), the error a failed check raises,
and a -k that is bad or selects nothing (usage errors, before any check runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyinfra.errors import SpecError, UsageError, VerifyFailedError
from skyinfra.spec import ClusterSpec, validate_spec
from skyinfra.targets.local.transport import LocalTransport
from skyinfra.verify import raise_for_failures
from skyinfra.verify.context import Expectations
from skyinfra.verify.report import CheckResult, VerifyReport
from skyinfra.verify.runner import run_verify
from tests.support.topologies import local_topology


def test_verify_is_a_boolean_that_round_trips() -> None:
    spec = validate_spec({"name": "c", "verify": True})
    assert spec.verify is True
    assert ClusterSpec.from_dict(spec.to_dict()).verify is True
    # Off by default, and then not written to spec.json (older workspaces read the same).
    assert "verify" not in validate_spec({"name": "c"}).to_dict()


def test_a_verify_that_is_not_a_boolean_is_refused_naming_the_field() -> None:
    with pytest.raises(SpecError, match="'verify': got 'yes'; expected true or false"):
        validate_spec({"name": "c", "verify": "yes"})


def test_a_failed_check_exits_7_naming_node_and_check() -> None:
    report = VerifyReport("c", ("node-0", "node-1"))
    report.results = [
        CheckResult("runtime", 0, "pass"),
        CheckResult("runtime", 1, "fail", "skyinfra-runtime 0.0.9 on the node, 0.1.0 here"),
    ]
    with pytest.raises(VerifyFailedError) as caught:
        raise_for_failures(report)
    assert caught.value.exit_code == 7
    assert "runtime on node-1: skyinfra-runtime 0.0.9 on the node" in str(caught.value)
    report.results.pop()
    raise_for_failures(report)  # all passed: no error


@pytest.mark.parametrize(
    ("select", "message"),
    [
        ("runtime and (", "Wrong expression passed to '-k': runtime and ("),
        ("no_such_check", "-k selects no check"),
    ],
)
def test_a_bad_or_empty_selection_is_a_usage_error(
    tmp_path: Path, select: str, message: str
) -> None:
    topology = local_topology(2)
    dirs = {n.index: tmp_path / n.name for n in topology.nodes}
    for folder in dirs.values():
        folder.mkdir()
        (folder / ".skyinfra-node").touch()
    topology_file = tmp_path / "topology.json"
    topology_file.write_text(json.dumps(topology.to_dict()))
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        report = run_verify(
            LocalTransport(dirs),
            topology,
            Expectations(runtime_version="0.1.0"),
            topology_file=topology_file,
            select=select,
        )
        raise_for_failures(report)
