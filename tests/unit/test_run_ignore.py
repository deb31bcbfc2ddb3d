"""What `skyinfra run` copies to nodes: defaults and .skyinfraignore patterns."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from skyinfra.run.ignore import (
    make_ignore,
    read_ignore_patterns,
    secrets_left_out,
    topology_path_inside,
)
from skyinfra.targets.local.transport import LocalTransport
from skyinfra.transport.tree import scan

SECRETS = [
    ".env",
    ".env.production",
    "config/.env",
    ".ssh",
    ".ssh/id_ed25519",
    "id_ed25519",
    "id_ed25519.pub",
    "deploy/id_rsa",
    "keys/id_ecdsa",
    ".aws",
    ".aws/credentials",
    ".gcp",
    ".config/gcloud",
    ".azure",
    ".kube",
    ".docker",
    "tls/server.pem",
    "tls/server.key",
    "signing.p12",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    "credentials.json",
    "credentials-prod.json",
    "client_secret_123.json",
    "infra/terraform.tfstate",
    "infra/terraform.tfstate.backup",
]


def test_defaults_keep_workspaces_and_environments_out(tmp_path: Path) -> None:
    ignored = make_ignore(read_ignore_patterns(tmp_path))
    # .venv-checkov: the repository's second environment, which `make demo` copied to nodes.
    for rel in (".skyinfra", ".git", ".venv", ".venv-checkov", "pkg/__pycache__", "pkg/mod.pyc"):
        assert ignored(rel), rel
    for rel in ("train.py", "data/digits.csv", "pkg/mod.py", "venv_tools.py"):
        assert not ignored(rel), rel


def test_ignore_file_patterns(tmp_path: Path) -> None:
    (tmp_path / ".skyinfraignore").write_text("# comment\n\n*.ckpt\ndata/raw/\n/notes.md\n")
    ignored = make_ignore(read_ignore_patterns(tmp_path), extra_paths=["infra/clusters"])
    assert ignored("model.ckpt")
    assert ignored("sub/model.ckpt")
    assert ignored("raw") is False  # 'data/raw' holds a '/': matched against the full path only
    assert ignored("data/raw")
    assert ignored("notes.md")
    assert ignored("infra/clusters")
    assert not ignored("train.py")


def test_the_workspaces_folder_inside_the_copied_directory_is_left_out(tmp_path: Path) -> None:
    assert topology_path_inside(tmp_path, tmp_path / "infra" / "clusters" / "c1") == [
        "infra/clusters"
    ]
    # Workspaces directly in the copied directory: the directory itself is not left out.
    assert topology_path_inside(tmp_path, tmp_path / "c1") == []
    # Workspaces elsewhere: nothing to leave out.
    assert topology_path_inside(tmp_path / "src", tmp_path / "clusters" / "c1") == []


@pytest.mark.parametrize("rel", SECRETS)
def test_secrets_and_key_material_are_not_copied_by_default(tmp_path: Path, rel: str) -> None:
    assert make_ignore(read_ignore_patterns(tmp_path))(rel)


@pytest.mark.parametrize(
    "rel", ["environment.py", "envs/train.py", "keys.py", "monkey.py", "config/settings.json"]
)
def test_ordinary_files_that_look_alike_still_go(tmp_path: Path, rel: str) -> None:
    assert not make_ignore(read_ignore_patterns(tmp_path))(rel)


def test_a_negation_sends_what_an_earlier_pattern_left_out(tmp_path: Path) -> None:
    (tmp_path / ".skyinfraignore").write_text(
        "!.env.example\n*.ckpt\n!best.ckpt\n!certs/ca.pem\n!.aws\n"
    )
    ignored = make_ignore(read_ignore_patterns(tmp_path))
    assert not ignored(".env.example")
    assert ignored(".env.local")
    assert ignored("last.ckpt") and not ignored("best.ckpt") and not ignored("sub/best.ckpt")
    assert not ignored("certs/ca.pem") and ignored("certs/other.pem")
    assert not ignored(".aws")  # the directory comes back ...
    assert ignored(".aws/key.pem")  # ... minus what another pattern still matches


def test_the_last_matching_line_decides(tmp_path: Path) -> None:
    (tmp_path / ".skyinfraignore").write_text("!*.key\nsecret.key\n")
    ignored = make_ignore(read_ignore_patterns(tmp_path))
    assert not ignored("public.key")
    assert ignored("secret.key")


def test_workspaces_are_left_out_whatever_a_negation_says(tmp_path: Path) -> None:
    (tmp_path / ".skyinfraignore").write_text("!infra/clusters\n")
    assert make_ignore(read_ignore_patterns(tmp_path), extra_paths=["infra/clusters"])(
        "infra/clusters"
    )


def test_a_copy_holds_no_secret_but_what_the_user_sends(tmp_path: Path) -> None:
    """Through the local transport's copy, as `run` copies a project: the first copy (full)
    and a re-run's (incremental), which must not send a secret added since either."""
    src = tmp_path / "project"
    for rel in ["train.py", ".env", ".env.example", ".ssh/id_ed25519", ".ssh/config",
                ".aws/credentials", "certs/ca.pem", "certs/server.key", "data/x.csv"]:  # fmt: skip
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(rel)
    (src / ".skyinfraignore").write_text("!.env.example\n!certs/ca.pem\n")
    patterns = read_ignore_patterns(src)
    node = tmp_path / "node"
    (node / ".skyinfra-node").parent.mkdir()
    (node / ".skyinfra-node").write_text("")
    transport = LocalTransport({0: node})
    first, second = "20261125-100000-000000-aaaa", "20261125-100001-000000-bbbb"
    expected = [".env.example", ".skyinfraignore", "certs/ca.pem", "data/x.csv", "train.py"]

    def copied(run_id: str) -> list[str]:
        work = node / "runs" / run_id / "work"
        return sorted(p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file())

    stats = transport.copy_tree(0, src, scan(src, make_ignore(patterns)), first)
    assert copied(first) == expected
    assert stats.sent_files == 5
    assert secrets_left_out(src, patterns) == [".aws", ".env", ".ssh", "certs/server.key"]
    # New secrets, and a secret whose content equals a file that is sent: none travels.
    (src / ".env.production").write_text("TOKEN=1")
    (src / "certs" / "client.key").write_text("data/x.csv")
    (src / "train.py").write_text("changed")
    stats = transport.copy_tree(0, src, scan(src, make_ignore(read_ignore_patterns(src))), second)
    assert copied(second) == expected
    assert (stats.sent_files, stats.linked_files) == (1, 4)
    shutil.rmtree(node)
