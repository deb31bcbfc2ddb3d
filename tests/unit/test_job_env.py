"""A job's env and secrets, the pure parts: which names a user may set (the runtime's rules,
kept in step with what the runtime and its plugins really set), the spec's `env`/`secrets`,
merging the spec with `run --env`/`--secret`, masking, what `jobs JOB` shows, and the
supervise agent's reading of its stdin."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from skyinfra_runtime import jobenv
from skyinfra_runtime.ckptsync import OPERATOR_CREDENTIALS, SETTINGS_FILE, from_settings
from skyinfra_runtime.info import InstanceInfo
from skyinfra_runtime.jobs.supervise import read_private
from skyinfra_runtime.plugins.jax import jax_env
from skyinfra_runtime.s3 import PRIVATE_KEY, Credentials
from skyinfra_runtime.topology import Accelerator, Node, Topology
from skyinfra_runtime.torchrun import torchrun_env

from skyinfra.errors import SpecError
from skyinfra.run.jobenv import JobEnv, resolve, shown
from skyinfra.spec import validate_spec
from skyinfra.validation import validate_file

SECRET = "s3cr3t-value-for-the-unit-tests"


def test_every_variable_the_runtime_sets_is_refused() -> None:
    torch = torchrun_env(
        node=1,
        nodes=2,
        local_rank=0,
        procs_per_node=2,
        master_addr="10.0.0.1",
        master_port=29501,
        run_id="r",
        inherited={},
    )
    # The three a user's value wins for under torchrun stay the user's to set.
    users = {"OMP_NUM_THREADS", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_SIGNALS_TO_HANDLE"}
    for name in set(torch) - users:
        assert jobenv.name_problem(name), name
    for name in users:
        assert jobenv.name_problem(name) is None, name
    topo = Topology(
        cluster="c",
        provider="aws",
        head_addr="10.0.0.1",
        head_port=29500,
        nodes=(Node(0, "node-0", "10.0.0.1", None, None, Accelerator("A100", 8)),),
    )
    info = InstanceInfo.build(topo, node=0, worker=1, workers_per_node=2)
    for name in jax_env(info, topo):
        assert "jax plugin" in (jobenv.name_problem(name) or ""), name
    for name in ("SKYINFRA_NODE", "skyinfra_x", "SKYINFRA_JOB_TOKEN", "PATH", "VIRTUAL_ENV"):
        assert jobenv.name_problem(name), name


@pytest.mark.parametrize("name", ["1X", "A-B", "A B", "", "X=Y", "É", "$X", 3])
def test_names_that_are_not_shell_names_are_refused(name: object) -> None:
    assert "shell variable name" in (jobenv.name_problem(name) or "")


@pytest.mark.parametrize("name", ["XLA_FLAGS", "NCCL_DEBUG", "_x", "WANDB_API_KEY", "HF_TOKEN"])
def test_ordinary_names_are_accepted(name: str) -> None:
    assert jobenv.name_problem(name) is None


def test_masking_hides_each_secret_and_each_line_of_a_multiline_one() -> None:
    text = f"token={SECRET}; key line two; short=ab"
    masked = jobenv.mask_text(text, [SECRET, "key line one\nkey line two", "ab"])
    assert masked == "token=***; ***; short=ab"  # "ab": too short to mask
    # A secret containing another is masked whole, not in pieces.
    assert jobenv.mask_text("abcdefgh", ["abcd", "abcdefgh"]) == "***"
    assert JobEnv(secrets={"K": SECRET}).mask(f"x {SECRET} y") == "x *** y"
    assert SECRET not in repr(JobEnv(env={"A": "1"}, secrets={"K": SECRET}))


def test_a_returned_value_is_masked_by_the_secrets_it_names() -> None:
    environ = {
        **jobenv.secret_names_env(["TOKEN", "KEY"]),
        "TOKEN": "tok-12345",
        "KEY": "line one\nline two",
        "OTHER": "not-secret",
    }
    value = {
        "tok-12345": ["x tok-12345 y", 7, None, True, {"deep": "line two"}],
        "kept": "not-secret",
    }
    assert jobenv.mask_value(value, environ) == {
        "***": ["x *** y", 7, None, True, {"deep": "***"}],
        "kept": "not-secret",
    }
    assert jobenv.mask_value(value, {"TOKEN": "tok-12345"}) == value  # no secrets named
    assert jobenv.secret_names_env([]) == {}


def test_spec_env_and_secrets_round_trip_and_are_checked() -> None:
    spec = validate_spec({"name": "c", "env": {"NCCL_DEBUG": "INFO"}, "secrets": ["WANDB_API_KEY"]})
    assert spec.env == (("NCCL_DEBUG", "INFO"),) and spec.secrets == ("WANDB_API_KEY",)
    assert validate_spec(spec.to_dict()) == spec
    with pytest.raises(SpecError) as err:
        validate_spec(
            {
                "name": "c",
                "env": {"RANK": "0", "GOOD": 4, "bad-name": "x"},
                "secrets": ["SKYINFRA_TOKEN", "GOOD2", "GOOD2"],
            }
        )
    problems = {(p.field, str(p.value)) for p in err.value.problems}  # type: ignore[attr-defined]
    assert problems == {
        ("env.RANK", "RANK"),
        ("env.GOOD", "4"),
        ("env.bad-name", "bad-name"),
        ("secrets[0]", "SKYINFRA_TOKEN"),
        ("secrets[2]", "GOOD2"),
    }
    assert "rank variables" in str(err.value) and 'quote numbers: "4"' in str(err.value)


def test_a_secrets_table_is_refused_without_showing_its_values() -> None:
    with pytest.raises(SpecError) as err:
        validate_spec({"name": "c", "secrets": {"HF_TOKEN": SECRET}})
    assert err.value.field == "secrets" and "HF_TOKEN" in str(err.value)
    assert SECRET not in str(err.value)
    with pytest.raises(SpecError, match="either env or a secret"):
        validate_spec({"name": "c", "env": {"A": "1"}, "secrets": ["A"]})


def test_validate_names_the_env_problems_and_their_lines(tmp_path: Path) -> None:
    spec = tmp_path / "skyinfra.toml"
    spec.write_text('name = "c"\n\n[env]\nNCCL_DEBUG = "INFO"\nWORLD_SIZE = "2"\n')
    found, problems = validate_file(spec)
    assert found is None
    assert [(p.field, p.line) for p in problems] == [("env.WORLD_SIZE", 5)]
    spec.write_text('name = "c"\nsecrets = ["OK", "MASTER_PORT"]\n')
    _, problems = validate_file(spec)
    assert [(p.field, p.value, p.line) for p in problems] == [("secrets[1]", "MASTER_PORT", 2)]


def test_the_command_line_wins_and_values_come_from_the_environment() -> None:
    job = resolve(
        spec_env=[("A", "spec"), ("B", "spec"), ("MADE_SECRET", "plain")],
        spec_secrets=["S1"],
        cli_env=["B=cli", "C=x=y", "FROM_HERE", "EMPTY="],
        cli_secrets=["S2", "MADE_SECRET"],
        environ={"FROM_HERE": "here", "S1": SECRET, "S2": "two", "MADE_SECRET": "m"},
    )
    assert job.env == {"A": "spec", "B": "cli", "C": "x=y", "FROM_HERE": "here", "EMPTY": ""}
    assert job.secrets == {"S1": SECRET, "S2": "two", "MADE_SECRET": "m"}
    record = job.record()
    assert record["secrets"] == ["MADE_SECRET", "S1", "S2"] and SECRET not in json.dumps(record)
    assert shown(record) == [
        "A=spec",
        "B=cli",
        "C=x=y",
        "EMPTY=",
        "FROM_HERE=here",
        "MADE_SECRET=***",
        "S1=***",
        "S2=***",
    ]


def test_bad_names_and_missing_values_are_all_named() -> None:
    with pytest.raises(SpecError) as err:
        resolve(
            spec_env=[],
            spec_secrets=["IN_SPEC_UNSET"],
            cli_env=["1BAD=x", "MASTER_ADDR=h", "UNSET_HERE", "BOTH=1"],
            cli_secrets=["NOT_SET", f"INLINE={SECRET}", "BOTH"],
            environ={"BOTH": "b"},
        )
    text = str(err.value)
    for name in ("1BAD", "MASTER_ADDR", "UNSET_HERE", "IN_SPEC_UNSET", "NOT_SET", "INLINE", "BOTH"):
        assert repr(name) in text, name
    assert "export UNSET_HERE=" in text and "a NAME only" in text
    assert SECRET not in text


def test_the_agent_reads_token_env_and_secrets_from_stdin_and_checks_them() -> None:
    sent = {"token": "t", "env": {"A": "1"}, "secrets": {"K": SECRET}}
    assert read_private(io.StringIO(json.dumps(sent))) == sent
    assert read_private(io.StringIO("")) == {"env": {}, "secrets": {}}
    for bad in ({"env": {"RANK": "0"}}, {"secrets": {"K": 1}}, {"env": []}, ["x"]):
        with pytest.raises(ValueError) as err:
            read_private(io.StringIO(json.dumps(bad)))
        assert SECRET not in str(err.value)


def test_the_checkpoint_stores_credentials_come_on_stdin_and_only_there(tmp_path: Path) -> None:
    """The ssh target's hosts have no role: the operator's credentials reach each agent on its
    stdin (s3.Credentials, never printed whole); a node whose checkpoints.json asks for them
    and got none is refused, naming the store, never a value."""
    creds = Credentials("AKIDEXAMPLE", SECRET)
    sent = {"token": "t", PRIVATE_KEY: creds.to_private()}
    assert read_private(io.StringIO(json.dumps(sent)))[PRIVATE_KEY] == creds
    assert SECRET not in repr(creds)
    for bad in ({"access_key_id": "A"}, {"access_key_id": "A", "secret_access_key": 1}, "x"):
        with pytest.raises(ValueError, match=PRIVATE_KEY):
            read_private(io.StringIO(json.dumps({PRIVATE_KEY: bad})))
    settings = {
        "url": "s3://lab-ck/ck", "region": "us-east-1",
        "bucket_url": "http://10.0.0.9:9000/lab-ck", "credentials": OPERATOR_CREDENTIALS,
    }  # fmt: skip
    (tmp_path / SETTINGS_FILE).write_text(json.dumps(settings))
    with pytest.raises(ValueError, match=r"s3://lab-ck/ck is reached with the operator's"):
        from_settings(tmp_path, str(tmp_path / "checkpoints" / "set"), 1)
    sync = from_settings(tmp_path, str(tmp_path / "checkpoints" / "set"), 1, creds)
    assert sync is not None and sync.bucket.creds.get() == creds
