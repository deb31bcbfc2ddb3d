"""Where the ssh target's agents get the credentials for ssh.checkpoints_url (the hosts have no
role): the operator's environment first, else the AWS profile of the shared files, as the AWS
CLI finds them (static keys, a credential process), never this machine's own role: a local
metadata endpoint, standing in for the instance's and a container's, is never asked."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from skyinfra.errors import SpecError
from skyinfra.targets.ssh.checkpoint_store import SshCheckpointStore, operator_credentials

STORE = SshCheckpointStore("s3://lab-ck/ck")
CREDENTIALS_FILE = """\
[default]
aws_access_key_id = AKIDDEFAULT
aws_secret_access_key = default-secret
[team]
aws_access_key_id = AKIDTEAM
aws_secret_access_key = team-secret
aws_session_token = team-token
"""
# A credential process that prints keys, and one that fails (an expired login, say).
PRINTS_KEYS = (
    "import json\n"
    "keys = {'Version': 1, 'AccessKeyId': 'AKIDTOOL', 'SecretAccessKey': 'tool-secret'}\n"
    "print(json.dumps(keys))\n"
)
FAILS = "raise SystemExit('the login expired')\n"


@pytest.fixture
def aws_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An operator whose environment names no key, with the shared files in a home of its own."""
    import sys

    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(CREDENTIALS_FILE)
    (home / "tool.py").write_text(PRINTS_KEYS)
    (home / "expired.py").write_text(FAILS)
    (home / ".aws" / "config").write_text(
        f"[profile tool]\ncredential_process = {sys.executable} {home / 'tool.py'}\n"
        f"[profile expired]\ncredential_process = {sys.executable} {home / 'expired.py'}\n"
    )
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    return {"HOME": str(home)}


@pytest.fixture
def metadata_asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The paths asked of a loopback server set as the instance metadata service and as the
    container credentials endpoint (each would answer with this machine's role)."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(404)
            self.end_headers()

        do_PUT = do_GET  # IMDSv2's token request

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", url + "/")
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url + "/container-credentials")
    try:
        yield asked
    finally:
        server.shutdown()


def test_the_environment_s_keys_come_first(aws_files: dict[str, str]) -> None:
    env = {**aws_files, "AWS_PROFILE": "team", "AWS_ACCESS_KEY_ID": "AKIDENV"}
    found = operator_credentials(STORE, {**env, "AWS_SECRET_ACCESS_KEY": "env-secret"})
    assert not isinstance(found, SpecError)
    assert (found.key, found.secret, found.token) == ("AKIDENV", "env-secret", None)


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        (None, ("AKIDDEFAULT", "default-secret", None)),
        ("team", ("AKIDTEAM", "team-secret", "team-token")),
        ("tool", ("AKIDTOOL", "tool-secret", None)),
    ],
)
def test_without_keys_the_aws_profile_gives_them(
    aws_files: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    profile: str | None,
    expected: tuple[str, str, str | None],
) -> None:
    env = dict(aws_files)
    if profile:
        monkeypatch.setenv("AWS_PROFILE", profile)
        env["AWS_PROFILE"] = profile
    found = operator_credentials(STORE, env)
    assert not isinstance(found, SpecError), found
    assert (found.key, found.secret, found.token) == expected


@pytest.mark.parametrize(
    ("profile", "said"),
    [
        # Not there: named with the profiles that are.
        ("nope", "AWS_PROFILE='nope', which is no profile of ~/.aws/config or ~/.aws/credentials "
         "(those there: default, expired, team, tool)"),
        # There, but its credential process fails (an expired login).
        ("expired", "the AWS profile 'expired', which gave none"),
    ],
)  # fmt: skip
def test_a_profile_that_gives_no_credentials_is_named_with_why(
    aws_files: dict[str, str], monkeypatch: pytest.MonkeyPatch, profile: str, said: str
) -> None:
    monkeypatch.setenv("AWS_PROFILE", profile)
    found = operator_credentials(STORE, {**aws_files, "AWS_PROFILE": profile})
    assert isinstance(found, SpecError) and found.field == "ssh.checkpoints_url"
    assert said in str(found)


def test_this_machine_s_own_role_is_never_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, metadata_asked: list[str]
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no shared files at all
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    found = operator_credentials(STORE, {"HOME": str(tmp_path)})
    assert isinstance(found, SpecError)
    assert "or those of its AWS profile" in str(found)
    assert metadata_asked == []
