"""One engine contract, two engines: the embedded Terraform and an external binary through
python-terraform pass the same tests (init, validate, plan with summary and JSON, apply a
saved plan, outputs, state list, raw passthrough, progress events, errors carrying argv, return
code and stderr, destroy) on a local root module of terraform_data resources; a SIGINT while
either applies into an S3 backend (moto's server) stops Terraform cleanly: state written, lock
released, the next apply converges. The AWS root module against moto runs with each engine in
tests/e2e/aws/test_cli.py (the external one in test_up_twice_status_down_through_the_cli):
one apply there costs about 100 s here, too much to repeat in this file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from skyinfra.errors import StateLockedError, TerraformError
from skyinfra.terraform.backend import parse_backend, render_backend
from skyinfra.terraform.engine import plan_words
from tests.conftest import REPO_ROOT
from tests.support.aws import REGION
from tests.support.engines import ENGINES, make_engine, terraform_binary

ROOT = """
terraform {
  required_version = ">= 1.5"
}

variable "greeting" {
  type    = string
  default = "hello"
}

resource "terraform_data" "node" {
  for_each = toset(["a", "b"])
  input    = "${var.greeting}-${each.key}"

  provisioner "local-exec" {
    command = "echo ${self.input} > made-${each.key}.txt"
  }
}

output "inputs" {
  value = { for k, n in terraform_data.node : k => n.output }
}
"""


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> str:
    return terraform_binary(tmp_path_factory.mktemp("engines"))


@pytest.fixture(params=ENGINES)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_engine_contract_on_the_local_root(
    kind: str, binary: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "main.tf").write_text(ROOT)
    engine = make_engine(kind, tmp_path, binary)
    assert engine.version().count(".") == 2
    assert engine.version() in engine.describe()

    engine.init()
    assert engine.validate()["valid"] is True

    events: list[dict[str, Any]] = []
    summary = engine.plan(out="contract.tfplan", on_event=events.append)
    assert (summary.add, summary.change, summary.remove) == (2, 0, 0)
    assert any(e.get("type") == "planned_change" for e in events)
    plan = engine.show_plan("contract.tfplan")
    assert sorted(c["address"] for c in plan["resource_changes"]) == [
        'terraform_data.node["a"]',
        'terraform_data.node["b"]',
    ]
    # `skyinfra plan`'s one command: the plan in words is what `show` prints of its file.
    words = engine.plan_for_review(out="review.tfplan")
    _, shown, _ = engine.command(["show", "-no-color", "review.tfplan"])
    assert words == shown
    assert 'terraform_data.node["a"] will be created' in words

    events.clear()
    engine.apply("contract.tfplan", on_event=events.append)
    kinds = {e.get("type") for e in events}
    assert {"apply_start", "apply_complete", "provision_output"} <= kinds or {
        "apply_start",
        "apply_complete",
    } <= kinds
    assert (tmp_path / "made-a.txt").read_text().strip() == "hello-a"
    assert engine.output() == {"inputs": {"a": "hello-a", "b": "hello-b"}}
    assert engine.state_list() == ['terraform_data.node["a"]', 'terraform_data.node["b"]']
    assert engine.plan().no_changes

    capfd.readouterr()
    assert engine.raw(["state", "list"]) == 0
    assert 'terraform_data.node["b"]' in capfd.readouterr().out
    code, _, stderr = engine.command(["no-such-command"])
    assert code != 0 and "no-such-command" in stderr

    # A broken module: the error carries the command, its return code and Terraform's words.
    (tmp_path / "broken.tf").write_text('output "x" {\n  value = var.nope\n}\n')
    with pytest.raises(TerraformError) as failed:
        engine.plan()
    assert failed.value.argv[:2] == ["terraform", "plan"]
    assert failed.value.returncode == 1
    assert "Reference to undeclared input variable" in str(failed.value)
    with pytest.raises(TerraformError) as failed:
        engine.plan_for_review(out="broken.tfplan")
    assert failed.value.argv[:2] == ["terraform", "plan"]
    assert "Reference to undeclared input variable" in str(failed.value)
    (tmp_path / "broken.tf").unlink()

    engine.destroy(on_event=events.append)
    assert engine.state_list() == []


def test_plan_words_drop_the_reading_lines_that_show_does_not_print() -> None:
    printed = "\n".join(
        [
            "data.aws_ami.node: Reading...",
            "data.aws_ami.node: Still reading... [10s elapsed]",
            "data.aws_ami.node: Read complete after 0s [id=ami-1]",
            'aws_instance.node["0"]: Refreshing state... [id=i-1]',
            "",
            "Terraform used the selected providers to generate the following execution",
            "plan. Resource actions are indicated with the following symbols:",
            "  + create",
            "",
            "Plan: 1 to add, 0 to change, 0 to destroy.",
        ]
    )
    assert plan_words(printed).split("\n")[:2] == ["", printed.split("\n")[5]]
    assert plan_words(printed).endswith("Plan: 1 to add, 0 to change, 0 to destroy.")
    # A plan with nothing read first is left as it is.
    assert plan_words("No changes. Your infrastructure matches the configuration.") == (
        "No changes. Your infrastructure matches the configuration."
    )


# --------------------------------------------------------------------- S3 backend, SIGINT

SLOW_ROOT = """
resource "terraform_data" "slow" {
  input = "x"

  provisioner "local-exec" {
    command = "sleep 30"
  }
}

output "done" {
  value = terraform_data.slow.output
}
"""

# The child that applies, as `skyinfra up` does: progress on stdout, Ctrl-C to the operator.
APPLY_CHILD = """
import sys
from pathlib import Path
from tests.support.engines import make_engine
engine = make_engine(sys.argv[1], Path(sys.argv[2]), sys.argv[3])
engine.init()
engine.apply(on_event=lambda e: print(e.get("@message"), flush=True))
"""


@pytest.fixture
def bucket(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=aws_env)
    name = f"contract-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    s3.create_bucket(Bucket=name)
    yield name


def objects(aws_env: str, bucket: str) -> list[str]:
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=aws_env)
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


def test_sigint_during_apply_saves_state_and_releases_the_s3_lock(
    kind: str, binary: str, tmp_path: Path, aws_env: str, bucket: str
) -> None:
    backend = parse_backend(f"s3://{bucket}/team")
    (tmp_path / "backend.tf").write_text(
        render_backend(backend, "ctrl-c", region=REGION, endpoint=aws_env)
    )
    (tmp_path / "main.tf").write_text(SLOW_ROOT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *sys.path])}
    child = subprocess.Popen(
        [sys.executable, "-c", APPLY_CHILD, kind, str(tmp_path), binary],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    seen = []
    try:
        for line in child.stdout:
            seen.append(line)
            if "Creating..." in line:
                assert "team/ctrl-c/terraform.tfstate.tflock" in objects(aws_env, bucket)
                # Meanwhile another plan meets the lock: the error names it and its holder.
                with pytest.raises(StateLockedError) as locked:
                    make_engine(kind, tmp_path, binary).plan()
                assert f"on {bucket}/team/ctrl-c/terraform.tfstate" in str(locked.value)
                assert "held by " in str(locked.value) and "OperationTypeApply" in str(locked.value)
                assert locked.value.argv[:2] == ["terraform", "plan"]
                child.send_signal(signal.SIGINT)  # Ctrl-C, once
                break
        seen.append(child.stdout.read())
        err = child.stderr.read()
        child.wait(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    out = "".join(seen)
    assert "Creating..." in out, out + err
    assert child.returncode != 0
    assert "stopping Terraform gracefully" in err and "saved its state" in err, err
    # State written to S3, lock gone: the next apply goes ahead at once and converges.
    assert objects(aws_env, bucket) == ["team/ctrl-c/terraform.tfstate"]
    (tmp_path / "main.tf").write_text(SLOW_ROOT.replace("sleep 30", "true"))
    engine = make_engine(kind, tmp_path, binary)
    engine.apply()
    assert engine.state_list() == ["terraform_data.slow"]
    assert engine.plan().no_changes
    engine.destroy()
    assert engine.state_list() == []


def test_operator_killed_during_apply_terraform_finishes_and_saves(
    kind: str, binary: str, tmp_path: Path, aws_env: str, bucket: str
) -> None:
    """SIGKILL to the operator (nothing of it runs any more): Terraform, in a session of its
    own and writing into a relay, not into the dead operator's pipe, finishes and saves."""
    backend = parse_backend(f"s3://{bucket}/team")
    (tmp_path / "backend.tf").write_text(
        render_backend(backend, "killed", region=REGION, endpoint=aws_env)
    )
    (tmp_path / "main.tf").write_text(SLOW_ROOT.replace("sleep 30", "sleep 2; echo made"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *sys.path])}
    child = subprocess.Popen(
        [sys.executable, "-c", APPLY_CHILD, kind, str(tmp_path), binary],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert child.stdout is not None
    for line in child.stdout:
        if "Creating..." in line:
            child.kill()
            break
    child.wait(timeout=60)
    child.stdout.close()  # the pipe is broken now: the provisioner's output has nowhere to go
    deadline = time.monotonic() + 120
    while "team/killed/terraform.tfstate.tflock" in objects(aws_env, bucket):
        assert time.monotonic() < deadline, "Terraform never released its lock"
        time.sleep(0.3)
    engine = make_engine(kind, tmp_path, binary)
    assert engine.state_list() == ["terraform_data.slow"]
    assert engine.output() == {"done": "x"}
    engine.destroy()


def test_an_empty_s3_backend_lists_no_state(
    kind: str, binary: str, tmp_path: Path, aws_env: str, bucket: str
) -> None:
    """A backend that holds nothing for the cluster yet (a second operator attaching before
    the first `up`): no resources and no outputs, not an error."""
    backend = parse_backend(f"s3://{bucket}/team")
    (tmp_path / "backend.tf").write_text(
        render_backend(backend, "none", region=REGION, endpoint=aws_env)
    )
    engine = make_engine(kind, tmp_path, binary)
    engine.init()
    assert engine.state_list() == []
    assert engine.output() == {}
