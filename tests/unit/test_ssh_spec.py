"""The ssh target's ``[ssh]`` table (issue 45): every mistake that can be judged offline is
refused by `skyinfra validate` and by `skyinfra up` before anything is dialled or written,
exit 2, naming the field and what would be valid."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from skyinfra import exitcodes
from skyinfra.spec import validate_spec
from skyinfra.targets.ssh.spec import SshSpec
from tests.conftest import skyinfra_argv


def spec_text(ssh: str, nodes: int = 2) -> str:
    return f'name = "lab"\nprovider = "ssh"\nnodes = {nodes}\n\n[ssh]\n{ssh}\n'


GOOD = 'hosts = ["10.0.0.5", "gpu-2.lab.example.com"]\nuser = "ml"\nkey = "id_ed25519"\n'


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*skyinfra_argv(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "id_ed25519").write_text("not read offline\n")
    return root


BAD = [
    pytest.param(
        spec_text(GOOD, nodes=3), "ssh.hosts", "at least 3 hosts (nodes = 3; 2 listed)",
        id="fewer-hosts-than-nodes",
    ),
    pytest.param(
        spec_text(GOOD.replace("gpu-2.lab.example.com", "10.0.0.5")),
        "ssh.hosts[1]", "it is ssh.hosts[0] too", id="same-host-twice",
    ),
    pytest.param(
        spec_text(GOOD.replace("id_ed25519", "keys/missing")),
        "ssh.key", "an existing SSH private key file", id="missing-key-file",
    ),
    pytest.param(
        spec_text(GOOD + 'spare_hosts = ["spare-1", "10.0.0.5"]\n'),
        "ssh.spare_hosts[1]", "a host that is not in ssh.hosts", id="spare-overlaps-hosts",
    ),
    pytest.param(
        spec_text(GOOD.replace('user = "ml"', 'user = "root"')),
        "ssh.user", "a login other than root", id="root",
    ),
    pytest.param(
        spec_text(GOOD.replace('"10.0.0.5"', '"ml@10.0.0.5:2222"')),
        "ssh.hosts[0]", "no user@ or :port", id="host-with-user-and-port",
    ),
    pytest.param(
        spec_text(GOOD + 'private_addresses = ["192.168.0.5"]\n'),
        "ssh.private_addresses", "one address per host of ssh.hosts (2)",
        id="private-addresses-count",
    ),
    pytest.param(
        spec_text(GOOD + 'python = "python3; rm -rf ~"\n'),
        "ssh.python", "Python 3.10 or newer", id="python-not-a-path",
    ),
    pytest.param(
        spec_text(GOOD + "port = 0\n"), "ssh.port", "an integer from 1 to 65535", id="port",
    ),
    pytest.param(
        spec_text(GOOD + 'hostz = ["x"]\n'), "ssh.hostz", "did you mean 'ssh.hosts'",
        id="unknown-key",
    ),
    pytest.param(
        spec_text(GOOD + 'checkpoints_url = "s3://Bad_Bucket/ck"\n'), "ssh.checkpoints_url",
        "s3://BUCKET/PREFIX", id="checkpoints-url-malformed",
    ),
    pytest.param(
        spec_text(GOOD + 'checkpoints_url = "s3://lab-ck/ck"\ns3_endpoint = "minio:9000/x"\n'),
        "ssh.s3_endpoint", "http(s)://HOST[:PORT] with no path", id="s3-endpoint-malformed",
    ),
    pytest.param(
        spec_text(GOOD + 's3_endpoint = "http://10.0.0.9:9000"\n'), "ssh.s3_endpoint",
        "set only with ssh.checkpoints_url", id="s3-endpoint-without-url",
    ),
]  # fmt: skip
# A store the hosts reach with the operator's credentials, and none in the environment.
NO_CREDENTIALS = pytest.param(
    spec_text(GOOD + 'checkpoints_url = "s3://lab-ck/ck"\n'), "ssh.checkpoints_url",
    "the hosts have no instance role, so each job's agents get this shell's AWS_ACCESS_KEY_ID",
    id="checkpoints-url-without-credentials",
)  # fmt: skip
AWS_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def without_credentials(env: dict[str, str]) -> dict[str, str]:
    """No AWS keys, and no shared files that could give a profile's (this machine's own)."""
    kept = {k: v for k, v in env.items() if k not in (*AWS_CREDENTIALS, "AWS_PROFILE")}
    nowhere = str(Path(env.get("SKYINFRA_CACHE", "/nonexistent")) / "no-aws-files")
    return {**kept, "AWS_SHARED_CREDENTIALS_FILE": nowhere, "AWS_CONFIG_FILE": nowhere}


@pytest.mark.parametrize(("text", "field", "expected"), [*BAD, NO_CREDENTIALS])
def test_validate_refuses_a_bad_ssh_table_naming_the_field(
    project: Path, clean_env: dict[str, str], text: str, field: str, expected: str
) -> None:
    (project / "skyinfra.toml").write_text(text)
    before = listing(project)
    done = run(["validate"], project, without_credentials(clean_env))
    assert done.returncode == exitcodes.USAGE, done.stdout + done.stderr
    assert f"'{field}'" in done.stderr and expected in done.stderr, done.stderr
    assert listing(project) == before


@pytest.mark.parametrize(("text", "field", "expected"), [*BAD[:5], NO_CREDENTIALS])
def test_up_refuses_it_before_dialling_anything_and_writes_nothing(
    project: Path, clean_env: dict[str, str], text: str, field: str, expected: str
) -> None:
    (project / "skyinfra.toml").write_text(text)
    before = listing(project)
    env = without_credentials(clean_env)
    done = run(["up", "--yes", "--dir", str(project / "clusters")], project, env)
    assert done.returncode == exitcodes.USAGE, done.stdout + done.stderr
    assert f"'{field}'" in done.stderr and expected in done.stderr, done.stderr
    assert listing(project) == before  # no clusters/ folder, no known_hosts


def test_a_good_table_validates_and_round_trips(project: Path, clean_env: dict[str, str]) -> None:
    text = GOOD + 'private_addresses = ["192.168.0.5", "192.168.0.6"]\nspare_hosts = ["s1"]\n'
    text += 'checkpoints_url = "s3://lab-ck/team/ck"\ns3_endpoint = "http://10.0.0.9:9000"\n'
    (project / "skyinfra.toml").write_text(spec_text(text))
    creds = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "not-a-real-one"}
    done = run(["validate"], project, {**without_credentials(clean_env), **creds})
    assert done.returncode == 0, done.stderr
    spec = validate_spec(
        {
            "name": "lab", "provider": "ssh", "nodes": 2,
            "ssh": {"hosts": ["a", "b", "c"], "user": "ml", "key": "k", "port": 2222,
                    "spare_hosts": ["d"], "checkpoints_url": "s3://lab-ck/ck",
                    "s3_region": "eu-west-1"},
        }
    )  # fmt: skip
    section = spec.section_as(SshSpec)
    assert section.node_hosts(spec.nodes) == ("a", "b")
    assert section.private_address(1) == "b"
    assert validate_spec(spec.to_dict()) == spec
    store = section.checkpoints
    assert store is not None and store.bucket_url() == "https://lab-ck.s3.eu-west-1.amazonaws.com"
    # What each host's checkpoints.json says: where the store is, and no credential.
    assert json.loads(store.node_settings()) == {
        "url": "s3://lab-ck/ck", "region": "eu-west-1",
        "bucket_url": "https://lab-ck.s3.eu-west-1.amazonaws.com", "credentials": "operator",
    }  # fmt: skip


def test_the_ssh_table_is_required_with_the_ssh_provider(
    project: Path, clean_env: dict[str, str]
) -> None:
    (project / "skyinfra.toml").write_text('name = "lab"\nprovider = "ssh"\n')
    done = run(["validate"], project, clean_env)
    assert done.returncode == exitcodes.USAGE
    assert "'ssh'" in done.stderr and "a [ssh] table with hosts, user and key" in done.stderr
