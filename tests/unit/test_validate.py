"""`skyinfra validate` and the same checks at the start of every command: a spec's mistakes
are found with no credentials and no network, all of them at once, and nothing is written.

Each command runs as a user runs it (the console script, a subprocess) with every AWS
credential source removed from its environment; `make test` runs the suite in a network
namespace that holds only loopback, so nothing here can reach a cloud either way.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from skyinfra import exitcodes
from tests.conftest import skyinfra_argv

AWS_SPEC = """name = "gpu"
provider = "aws"
nodes = 2

[aws]
region = "us-east-1"
instance_type = "g5.xlarge"
ssh_cidrs = ["203.0.113.4/32"]
ssh_key = "keys/missing"

[local]
base_address = "127.0.0.2"
"""


@pytest.fixture
def no_credentials(clean_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """No AWS credential from anywhere: variables, files, or the instance metadata."""
    env = {k: v for k, v in clean_env.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
        AWS_EC2_METADATA_DISABLED="true",
        HOME=str(tmp_path / "home"),
    )
    return env


def skyinfra(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*skyinfra_argv(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def project(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "skyinfra.toml").write_text(text)
    return root


def test_validate_names_the_missing_ssh_key_without_credentials(
    tmp_path: Path, no_credentials: dict[str, str]
) -> None:
    root = project(tmp_path, AWS_SPEC)
    before = listing(root)
    proc = skyinfra(["validate"], root, no_credentials)
    assert proc.returncode == exitcodes.USAGE, proc.stdout + proc.stderr
    assert "'aws.ssh_key'" in proc.stderr and "keys/missing" in proc.stderr
    assert "skyinfra.toml:9:" in proc.stderr  # the line that sets it
    assert "credentials" not in proc.stderr and "Traceback" not in proc.stderr
    assert listing(root) == before  # nothing written: no workspace, no cache


def test_validate_accepts_another_targets_table_and_exits_0(
    tmp_path: Path, no_credentials: dict[str, str]
) -> None:
    """The README: any other target's table in the file is checked too, so one file can hold
    both ([local] under provider = "aws" is allowed) and --provider picks."""
    root = project(tmp_path, AWS_SPEC)
    (root / "keys").mkdir()
    (root / "keys/missing").write_text("private\n")
    proc = skyinfra(["validate"], root, no_credentials)
    assert proc.returncode == exitcodes.OK, proc.stdout + proc.stderr
    assert "is valid" in proc.stdout
    bad_local = AWS_SPEC.replace('"127.0.0.2"', '"10.0.0.1"')
    (root / "skyinfra.toml").write_text(bad_local)
    proc = skyinfra(["validate"], root, no_credentials)
    assert proc.returncode == exitcodes.USAGE, proc.stdout + proc.stderr
    assert "'local.base_address'" in proc.stderr and "skyinfra.toml:12:" in proc.stderr


def test_validate_json_lists_every_problem_for_annotations(
    tmp_path: Path, no_credentials: dict[str, str]
) -> None:
    text = AWS_SPEC.replace("nodes = 2", 'nodes = 2\nplugins = ["jax", "torch:backend=mpi"]')
    text = text.replace('region = "us-east-1"', 'region = "mars-1"')
    spec = tmp_path / "elsewhere.toml"
    spec.write_text(text)
    proc = skyinfra(["validate", "--spec", str(spec), "--json"], tmp_path, no_credentials)
    assert proc.returncode == exitcodes.USAGE, proc.stdout + proc.stderr
    problems = json.loads(proc.stdout)
    by_field = {p["field"]: p for p in problems}
    assert set(by_field) == {"plugins[1].options.backend", "aws.region"}
    mpi = by_field["plugins[1].options.backend"]
    assert mpi["value"] == "mpi" and "nccl, gloo" in mpi["expected"]
    assert mpi["file"] == str(spec) and mpi["line"] == 4
    assert by_field["aws.region"]["line"] == 7
    assert all(
        set(p) == {"file", "line", "field", "value", "expected", "message"} for p in problems
    )


def test_validate_finds_the_key_once_the_fields_are_fixed_and_a_broken_guardrail(
    tmp_path: Path, no_credentials: dict[str, str]
) -> None:
    text = AWS_SPEC + "\n[guardrails]\nrequire_idle_shutdown = true\n"
    text = text.replace(
        'ssh_key = "keys/missing"', 'ssh_key = "keys/missing"\nidle_shutdown_minutes = 0'
    )
    root = project(tmp_path, text)
    proc = skyinfra(["validate", "--json"], root, no_credentials)
    assert proc.returncode == exitcodes.USAGE, proc.stdout + proc.stderr
    fields = [p["field"] for p in json.loads(proc.stdout)]
    assert fields == ["aws.ssh_key", "guardrails.require_idle_shutdown"]


def test_validate_without_a_spec_says_so(tmp_path: Path, no_credentials: dict[str, str]) -> None:
    proc = skyinfra(["validate"], tmp_path, no_credentials)
    assert proc.returncode == exitcodes.USAGE
    assert "--spec" in proc.stderr and "Traceback" not in proc.stderr
    assert listing(tmp_path) == []


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (["up"], exitcodes.USAGE),
        (["up", "--yes", "--skip-preflight"], exitcodes.USAGE),
        (["render"], exitcodes.USAGE),
        # `plan` exits as `terraform plan -detailed-exitcode`: any error, a bad spec too, is 1.
        (["plan"], exitcodes.ERROR),
    ],
)
def test_commands_check_the_spec_before_credentials(
    tmp_path: Path, no_credentials: dict[str, str], command: list[str], code: int
) -> None:
    """A missing aws.ssh_key is the answer, with or without credentials: not "no AWS
    credentials found" (exit 3), which named nothing of the spec."""
    root = project(tmp_path, AWS_SPEC)
    before = listing(root)
    proc = skyinfra(command, root, no_credentials)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "'aws.ssh_key'" in proc.stderr, proc.stderr
    assert "credentials" not in proc.stdout + proc.stderr
    assert listing(root) == before


def test_up_refuses_a_guardrail_the_spec_breaks_before_credentials(
    tmp_path: Path, no_credentials: dict[str, str]
) -> None:
    text = AWS_SPEC.replace(
        'ssh_key = "keys/missing"', 'ssh_key = "keys/k"\nidle_shutdown_minutes = 0'
    )
    root = project(tmp_path, text + "\n[guardrails]\nrequire_idle_shutdown = true\n")
    (root / "keys").mkdir()
    (root / "keys/k").write_text("private\n")
    before = listing(root)
    proc = skyinfra(["up"], root, no_credentials)
    assert proc.returncode == exitcodes.GUARDRAIL, proc.stdout + proc.stderr
    assert "guardrails.require_idle_shutdown" in proc.stderr
    assert listing(root) == before


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://team-ckpts/train", "does not start with s3://"),
        ("s3://Team_Ckpts/train", "naming rules"),
        ("s3://team-ckpts", "no prefix"),
        ("s3://team-ckpts/train/", "segment"),
        ("s3://team-ckpts/*", "segment"),
    ],
)
def test_a_bad_checkpoints_url_exits_2_naming_it_in_validate_and_up(
    tmp_path: Path, no_credentials: dict[str, str], url: str, why: str
) -> None:
    text = AWS_SPEC.replace('ssh_key = "keys/missing"', f'checkpoints_url = "{url}"')
    root = project(tmp_path, text)
    before = listing(root)
    for args in (["validate"], ["up", "--yes"]):
        proc = skyinfra(args, root, no_credentials)
        assert proc.returncode == exitcodes.USAGE, proc.stdout + proc.stderr
        assert "'aws.checkpoints_url'" in proc.stderr and repr(url) in proc.stderr, proc.stderr
        assert why in proc.stderr and "s3://BUCKET/PREFIX" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert listing(root) == before


@pytest.mark.parametrize(
    ("line", "field", "value"),
    [
        ('market = "spto"', "'aws.market'", "'spto'"),
        ('market = "spot"\nspot_max_price = -0.3', "'aws.spot_max_price'", "-0.3"),
        (
            'market = "spot"\ncapacity_reservation_id = "cr-0123456789abcdef0"',
            "'aws.market'",
            "'spot'",
        ),
    ],
)
def test_bad_spot_settings_exit_2_naming_the_field_in_validate_and_up(
    tmp_path: Path, no_credentials: dict[str, str], line: str, field: str, value: str
) -> None:
    """Offline: `validate` and `up` refuse them before any AWS call, and write nothing."""
    text = AWS_SPEC.replace('ssh_key = "keys/missing"', line)
    root = project(tmp_path, text)
    before = listing(root)
    for args in (["validate"], ["up", "--yes"]):
        proc = skyinfra(args, root, no_credentials)
        assert proc.returncode == exitcodes.USAGE, proc.stdout + proc.stderr
        assert field in proc.stderr and value in proc.stderr, proc.stderr
        assert "expected" in proc.stderr and "Traceback" not in proc.stderr
    assert listing(root) == before


def test_a_plugin_framework_the_nodes_interpreter_lacks_exits_2_in_validate_and_up(
    tmp_path: Path, no_credentials: dict[str, str]
) -> None:
    """Local nodes reuse this interpreter's site-packages, which has jax and keras but not
    tensorflow: keras on the tensorflow backend is refused before anything is made, naming the
    package; listed in python_packages, the nodes install it and validate passes."""
    text = 'name = "tf"\nnodes = 2\nplugins = ["jax", "keras:backend=tensorflow"]\n'
    root = project(tmp_path, text)
    before = listing(root)
    proc = skyinfra(["validate", "--json"], root, no_credentials)
    assert proc.returncode == exitcodes.USAGE, proc.stdout + proc.stderr
    [problem] = json.loads(proc.stdout)
    assert (problem["field"], problem["value"], problem["line"]) == (
        "plugins[1].options.backend",
        "tensorflow",
        3,
    )
    assert "keras backend 'tensorflow'" in problem["message"]
    assert "-m pip install tensorflow`" in problem["message"]
    up = skyinfra(["up", "--yes"], root, no_credentials)
    assert up.returncode == exitcodes.USAGE, up.stdout + up.stderr
    assert "needs tensorflow" in up.stderr and "Traceback" not in up.stderr
    assert listing(root) == before  # no workspace, no lock, no registry entry
    (root / "skyinfra.toml").write_text(text + 'python_packages = ["tensorflow_cpu>=2"]\n')
    proc = skyinfra(["validate"], root, no_credentials)
    assert proc.returncode == exitcodes.OK, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("old", "new", "field", "expected"),
    [
        ('instance_type = "g5.xlarge"', 'accelerators = "H100:3"', "aws.accelerators", '"H100:8"'),
        (
            'instance_type = "g5.xlarge"',
            'accelerators = "Q9000:8"',
            "aws.accelerators",
            "H100, H200",
        ),
        (
            'region = "us-east-1"',
            'regions = ["us-east-1", "us-west-9"]',
            "aws.regions[1]",
            "us-west-2",
        ),
        (
            'instance_type = "g5.xlarge"',
            "instance_types = []",
            "aws.instance_types",
            "non-empty list",
        ),
        (
            'instance_type = "g5.xlarge"',
            'instance_type = "g5.xlarge"\ninstance_types = ["g5.xlarge"]',
            "aws.instance_types",
            "not both",
        ),
    ],
)
def test_validate_refuses_a_bad_ladder_naming_the_field(
    tmp_path: Path, no_credentials: dict[str, str], old: str, new: str, field: str, expected: str
) -> None:
    """Issue 44's bad input: exit 2 naming the field and what would be valid, offline, with
    nothing written."""
    root = project(tmp_path, AWS_SPEC.replace(old, new))
    (root / "keys").mkdir()
    (root / "keys/missing").write_text("private\n")
    before = listing(root)
    proc = skyinfra(["validate", "--json"], root, no_credentials)
    assert proc.returncode == exitcodes.USAGE, proc.stdout + proc.stderr
    problems = {p["field"]: p for p in json.loads(proc.stdout)}
    assert set(problems) == {field}
    assert expected in problems[field]["expected"]
    assert problems[field]["line"] is not None
    assert listing(root) == before


def test_a_bad_network_exits_2_offline_writing_nothing(
    tmp_path: Path, no_credentials: dict[str, str]
) -> None:
    """Issue 46: an unknown aws.network exits 2 naming it, offline. (A valid private network
    goes on to `up` since its nodes install from the S3 wheelhouse: a requirement without a
    wheel for them is tests/integration/aws/test_wheelhouse.py's exit 2.)"""
    root = project(tmp_path, AWS_SPEC.replace('ssh_key = "keys/missing"', 'network = "dmz"'))
    before = listing(root)
    proc = skyinfra(["validate", "--json"], root, no_credentials)
    assert proc.returncode == exitcodes.USAGE, proc.stdout + proc.stderr
    problems = {p["field"]: p for p in json.loads(proc.stdout)}
    assert set(problems) == {"aws.network"}
    assert "one of ['public', 'private']" in problems["aws.network"]["expected"]
    assert listing(root) == before
