"""`verify = true` in the spec: `run` runs the checks first (the flag's spec twin)."""

from __future__ import annotations

import pytest

from skyinfra.errors import SpecError, VerifyFailedError
from skyinfra.spec import ClusterSpec, validate_spec
from skyinfra.verify import raise_for_failures
from skyinfra.verify.report import CheckResult, VerifyReport


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
