"""The S3 wheelhouse against moto's S3 server (issue 46), with real parts: pip downloads the
wheels (from the suite's dependency wheelhouse: this worker's namespace has no route to any
index), skyinfra stages them, a second staging uploads nothing (counted at the S3 client)
and refreshes every object in S3 (its lifecycle clock restarts), and an emulated private
node (the user data's provision.sh under a folder of its own) fetches them with
fetch-s3-object.py and installs offline, uv included, with nothing else to install from. A
requirement without a wheel for the nodes is refused naming it, before any bucket.

The nodes' platform here is this machine's (its python3 and glibc), not the DLAMI's: the node
is this machine. The content address, the download command and the user data are
tests/unit/aws/test_wheelhouse.py's.
"""

from __future__ import annotations

import base64
import dataclasses
import getpass
import hashlib
import json
import os
import platform
import sys
import zipfile
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

from skyinfra.errors import SpecError
from skyinfra.spec import validate_spec
from skyinfra.targets.aws.cloudinit import NodeUserData, default_bootstrap_script, render_user_data
from skyinfra.targets.aws.cluster_files import render_files
from skyinfra.targets.aws.endpoints import ENDPOINT_ENV_VAR, Emulator, boto3_client_kwargs
from skyinfra.targets.aws.reach import TARGET_FILE
from skyinfra.targets.aws.staging import default_bucket_name, stage_wheel, staging_prefix
from skyinfra.targets.aws.wheelhouse import (
    NodePlatform,
    WheelFile,
    requirement_set,
    wheelhouse_key,
)
from skyinfra.targets.aws.wheelhouse_stage import (
    WheelhouseRequest,
    _refreshed,
    requirement_fields,
    stage_wheelhouse,
)
from skyinfra.wheel import RUNTIME_DIR_ENV
from skyinfra.workspace import Workspace
from tests.conftest import offline_pip_env, require_wheelhouse
from tests.support.aws import DUMMY_AWS_ENV, REGION, user_data_text
from tests.support.aws_e2e import UBUNTU_DLAMI, provision_in_root

pytestmark = pytest.mark.slow

OWNER = "123456789012"  # moto's account
UV = __import__("importlib.metadata").metadata.version("uv")


def this_machine() -> NodePlatform:
    glibc = platform.libc_ver()[1].split(".")
    python = ".".join(
        os.popen("python3 -c 'import sys; print(*sys.version_info[:2])'").read().split()
    )
    return NodePlatform(python=python, machine=platform.machine(), glibc=(2, int(glibc[1])))


def runtime_wheel(folder: Path) -> Path:
    """A minimal but valid skyinfra-runtime wheel (the bootstrap checks that it imports)."""
    path = folder / "skyinfra_runtime-0.1.0-py3-none-any.whl"
    files = {
        "skyinfra_runtime/__init__.py": b"VERSION = '0.1.0'\n",
        "skyinfra_runtime-0.1.0.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: skyinfra-runtime\nVersion: 0.1.0\n"
        ),
        "skyinfra_runtime-0.1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, body in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(body)}")
    record.append("skyinfra_runtime-0.1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w") as wheel:
        for name, body in files.items():
            wheel.writestr(name, body)
        wheel.writestr("skyinfra_runtime-0.1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def puts_counted(s3: object) -> list[str]:
    """Every object-writing call the client makes from now on (put, multipart upload)."""
    calls: list[str] = []
    for operation in ("PutObject", "CreateMultipartUpload", "UploadPart", "CopyObject"):
        s3.meta.events.register(  # type: ignore[attr-defined]
            f"provide-client-params.s3.{operation}",
            lambda model, params, **_: calls.append(f"{model.name} {params.get('Key')}"),
        )
    return calls


def test_staged_once_shared_then_a_private_node_installs_offline_from_it(
    aws_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in offline_pip_env(dict(os.environ)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PIP_FIND_LINKS", str(require_wheelhouse()))
    s3 = boto3.client("s3", **boto3_client_kwargs(REGION, Emulator(url=aws_env)))
    bucket = default_bucket_name(OWNER, REGION)
    node = this_machine()
    requirements = requirement_set(None, ["click"], UV)
    request = WheelhouseRequest(
        bucket=bucket,
        region=REGION,
        owner=OWNER,
        requirements=requirements,
        platform=node,
        fields=requirement_fields(None, ["click"], f"uv=={UV}"),
        python=sys.executable,
    )
    calls = puts_counted(s3)
    first = stage_wheelhouse(s3, request)
    names = sorted(f.name for f in first.index.files)
    assert [n.split("-")[0] for n in names] == ["click", "uv"], names
    assert sorted(first.uploaded) == sorted([*names, "index.json"])
    assert calls and calls[-1] == f"PutObject {first.prefix}index.json"  # the index last

    # A second cluster with the same requirements (in another order): nothing uploaded, but
    # every object copied onto itself in S3 (the index last), which restarts the bucket's
    # 7-day lifecycle clock for the nodes this cluster launches on it.
    calls.clear()
    second = stage_wheelhouse(
        s3, WheelhouseRequest(**{**request.__dict__, "requirements": tuple(reversed(requirements))})
    )
    assert second.uploaded == ()
    assert calls == [f"CopyObject {first.prefix}{n}" for n in [*names, "index.json"]]
    assert (second.prefix, second.index_sha256) == (first.prefix, first.index_sha256)
    head = s3.head_object(Bucket=bucket, Key=first.prefix + names[0])
    assert head["ContentType"] == "application/zip"
    # A wheel gone between the listing and its copy (expired right then): not refreshed,
    # so the caller stages the wheelhouse anew.
    gone = dataclasses.replace(
        first.index, files=(*first.index.files, WheelFile("gone-1.0-py3-none-any.whl", "0", 1))
    )
    assert not _refreshed(s3, request, first.prefix, gone)

    # The emulated node: its runtime wheel staged as `up` stages it, its user data rendered
    # with the wheelhouse, provision.sh run with no wheels, no index and no uv of its own.
    wheel = stage_wheel(
        s3,
        runtime_wheel(tmp_path),
        bucket=bucket,
        region=REGION,
        owner=OWNER,
        prefix=staging_prefix("priv", "ws-0123456789abcdef"),
    )
    topology = {
        "schema": 1,
        "cluster": "priv",
        "provider": "aws",
        "head_addr": "10.42.0.10",
        "head_port": 29500,
        "nodes": [{"index": 0, "name": "node-0", "private_ip": "10.42.0.10"}],
    }
    user_data = render_user_data(
        NodeUserData(
            cluster_name="priv",
            node_index=0,
            topology_json=json.dumps(topology),
            wheel_url=wheel.url,
            wheel_sha256=wheel.sha256,
            wheel_filename=wheel.filename,
            bootstrap_script=default_bootstrap_script(),
            jax_extra=None,
            uv_version=UV,
            python_packages=["click"],
            idle_shutdown_minutes=0,
            ssh_user=getpass.getuser(),
            wheelhouse=(first.index_url, first.index_sha256),
        )
    )
    root = tmp_path / "node"
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(DUMMY_AWS_ENV)
    env.update({"HOME": str(tmp_path / "home"), "UV_CACHE_DIR": str(tmp_path / "uv-cache")})
    done = provision_in_root(user_data, root, env=env)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "2 wheels in" in out and f"installing with uv {UV}" in out, out
    assert "could not install uv" not in out and "falling back to pip" not in out, out
    venv_python = root / "opt/skyinfra/node/venv/bin/python"
    assert (root / "var/lib/skyinfra/ready").is_file()
    shown = os.popen(f"{venv_python} -c 'import click, skyinfra_runtime; print(\"ok\")'").read()
    assert shown == "ok\n"


def test_a_requirement_without_a_wheel_is_refused_naming_it_before_any_bucket(
    aws_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in offline_pip_env(dict(os.environ)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PIP_FIND_LINKS", str(require_wheelhouse()))
    s3 = boto3.client("s3", **boto3_client_kwargs(REGION, Emulator(url=aws_env)))
    bucket = "skyinfra-staging-nothing-made"
    packages = ["click", "no-such-dist-for-nodes==1.0"]
    request = WheelhouseRequest(
        bucket=bucket,
        region=REGION,
        owner=OWNER,
        requirements=requirement_set(None, packages, UV),
        platform=this_machine(),
        fields=requirement_fields(None, packages, f"uv=={UV}"),
    )
    with pytest.raises(SpecError) as caught:
        stage_wheelhouse(s3, request)
    assert (caught.value.field, caught.value.value) == (
        "python_packages",
        "no-such-dist-for-nodes==1.0",
    )
    assert "no wheel for the nodes' platform" in str(caught.value)
    with pytest.raises(ClientError):
        s3.head_bucket(Bucket=bucket)


def test_render_files_of_a_private_cluster_stage_the_wheelhouse_and_hand_it_to_the_nodes(
    aws_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, minimal_runtime_dir: Path
) -> None:
    """`plan` and `up`'s render of a private network, no NAT (preflight lookups only, no
    Terraform): the wheelhouse for the DLAMI's platform is staged, the nodes' role may read
    it (tfvars), every node's user data installs from it, and the workspace records it."""
    for name, value in offline_pip_env(dict(os.environ)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PIP_FIND_LINKS", str(require_wheelhouse()))
    monkeypatch.setenv(ENDPOINT_ENV_VAR, aws_env)
    monkeypatch.setenv(RUNTIME_DIR_ENV, str(minimal_runtime_dir))
    monkeypatch.setenv("SKYINFRA_CACHE", str(tmp_path / "cache"))
    key = tmp_path / "id_ed25519"
    key.write_text("private\n")
    key.with_suffix(".pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOXdhYvR9XJ8 k\n")
    spec = validate_spec(
        {
            "name": "priv",
            "provider": "aws",
            "nodes": 2,
            "python_packages": ["click"],
            "aws": {
                "region": REGION,
                "instance_type": "g5.xlarge",
                "ssh_cidrs": ["203.0.113.7/32"],
                "ssh_key": str(key),
                "network": "private",
                "jax_extra": "none",
                "ami": UBUNTU_DLAMI,  # one of moto's images
            },
        }
    )
    ws = Workspace(tmp_path / "clusters" / "priv")
    files = render_files(spec, ws, skip_preflight=True)
    settings = json.loads(files[TARGET_FILE])
    expected = requirement_set(None, ["click"], UV)
    prefix = f"_wheelhouse/{wheelhouse_key(expected, NodePlatform())}/"
    assert settings["wheelhouse"] == f"s3://{settings['staging_bucket']}/{prefix}"
    tfvars = json.loads(files["terraform.tfvars.json"])
    assert tfvars["staging"]["wheelhouse"] == prefix
    for name in ("node-0", "node-1"):
        document = user_data_text(tfvars["user_data"][name])
        assert (
            f"WHEELHOUSE_URL={aws_env}/{settings['staging_bucket']}/{prefix}index.json" in document
        )
        assert "package_update" not in document
