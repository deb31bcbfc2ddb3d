"""cloud-init user data: schema-valid (cloud-init's own validator), small, secret-free."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import hashlib
import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from skyinfra import resources
from skyinfra.errors import RenderError, SpecError
from skyinfra.targets.aws.cloudinit import (
    CHECK_SCRIPT,
    EFA_ENV_SCRIPT,
    FETCH_SCRIPT,
    IDLE_CHECK_SCRIPT,
    PROVISION_SCRIPT,
    SCRIPT_DIR,
    NodeUserData,
    default_bootstrap_script,
    render_user_data,
    shell_without_comments,
)
from skyinfra.targets.aws.render import USER_DATA_LIMIT_BYTES, encode_user_data
from skyinfra.targets.aws.spec import DEFAULT_IDLE_SHUTDOWN_MINUTES
from skyinfra.transport.bootstrap import NODE_ENV_FILE
from tests.conftest import content_of, require_system_tool

TOPOLOGY = {
    "schema": 1,
    "cluster": "demo",
    "provider": "aws",
    "head_addr": "10.42.0.10",
    "head_port": 29500,
    "nodes": [
        {
            "index": i,
            "name": f"node-{i}",
            "private_ip": f"10.42.0.{10 + i}",
            "public_ip": None,
            "instance_id": None,
            "accelerator": {"type": "A100", "count": 8},
        }
        for i in range(3)
    ],
}


HEAD_KEY_LINE = (
    'from="10.42.0.0/24",no-agent-forwarding,no-port-forwarding,no-X11-forwarding '
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHt0ZXN0LWtleS1mb3ItdGhlLWhlYWQtcmVjb3Zlcnk "
    "skyinfra-head@c"
)


def params(**overrides: object) -> NodeUserData:
    base: dict[str, object] = {
        "cluster_name": "demo",
        "node_index": 1,
        "topology_json": json.dumps(TOPOLOGY),
        "wheel_url": "https://bucket.s3.us-east-1.amazonaws.com/w/"
        "skyinfra_runtime-0.1.0-py3-none-any.whl",
        "wheel_sha256": "ab" * 32,
        "wheel_filename": "skyinfra_runtime-0.1.0-py3-none-any.whl",
        "bootstrap_script": default_bootstrap_script(),
    }
    base.update(overrides)
    return NodeUserData(**base)  # type: ignore[arg-type]


VARIANTS = {
    "defaults": params(),
    "no-idle-timer-plugins-pinned": params(
        idle_shutdown_minutes=0, python_packages=["keras==3.6.0", "torch==2.13.0"]
    ),
    "cuda13-head-node": params(node_index=0, jax_extra="cuda13", idle_shutdown_minutes=15),
    "no-jax": params(jax_extra=None, python_packages=["numpy==2.1.0"]),
    "efa": params(efa=True, python_packages=["keras==3.6.0", "torch==2.13.0"]),
    "checkpoints": params(
        checkpoints={
            "url": "s3://team-ckpts/train",
            "region": "us-east-1",
            "bucket_url": "https://team-ckpts.s3.amazonaws.com",
        }
    ),
    "spot": params(spot=True),
    # A private network (issue 46): installs from the S3 wheelhouse, offline, and no apt.
    "private-wheelhouse": params(
        wheelhouse=("https://b.s3.us-east-1.amazonaws.com/_wheelhouse/k/index.json", "c" * 64),
        python_packages=["keras==3.6.0"],
    ),
    # aws.recover: node 0 installs skyinfra; every node authorizes the cluster's key.
    "recover-head": params(
        node_index=0,
        authorized_keys=[HEAD_KEY_LINE],
        head_wheel=(
            "https://bucket.s3.us-east-1.amazonaws.com/c/w/skyinfra-0.1.0-py3-none-any.whl",
            "b" * 64,
            "skyinfra-0.1.0-py3-none-any.whl",
        ),
    ),
}


# What `cloud-init schema --config-file FILE` does (cloudinit.config.schema's
# handle_schema_args), for many files in one process: its imports and schema load are 0.45 s
# of CPU, paid once instead of once a variant.
SCHEMA_CHECK = """
import sys
from cloudinit.config.schema import SchemaValidationError, get_schema, validate_cloudconfig_file
schema = get_schema()
for path in sys.argv[1:]:
    try:
        validate_cloudconfig_file(path, schema)
    except (SchemaValidationError, RuntimeError) as e:
        print(path, "invalid:", " ".join(str(e).split()))
    else:
        print(path, "Valid cloud-config")
"""
# A document the schema refuses (runcmd must be a list): proves the validation ran, since
# cloud-init skips it, with only a warning, where jsonschema is missing.
REFUSED_CLOUD_CONFIG = "#cloud-config\nruncmd: 5\n"


def cloud_init_python() -> list[str]:
    """The interpreter the `cloud-init` command runs on: its script's #! line."""
    script = Path(require_system_tool(shutil.which("cloud-init"), "cloud-init"))
    first = script.read_text(errors="replace").split("\n", 1)[0]
    assert first.startswith("#!"), f"{script} is not a script: {first!r}"
    return shlex.split(first[2:])


@pytest.fixture(scope="module")
def schema_verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """cloud-init's verdict on every variant, and on the refused control document."""
    folder = tmp_path_factory.mktemp("user-data")
    documents = {name: render_user_data(v) for name, v in VARIANTS.items()}
    documents["control"] = REFUSED_CLOUD_CONFIG
    paths = {name: folder / name for name in documents}
    for name, path in paths.items():
        path.write_text(documents[name])
    argv = [*cloud_init_python(), "-c", SCHEMA_CHECK, *map(str, paths.values())]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    said = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    return {
        name: said.get(str(path), f"no verdict: {result.stderr}") for name, path in paths.items()
    }


def test_cloud_init_schema_refuses_a_bad_document(schema_verdicts: dict[str, str]) -> None:
    assert schema_verdicts["control"].startswith("invalid:"), schema_verdicts["control"]
    assert "runcmd" in schema_verdicts["control"]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_cloud_init_schema_accepts_variant(name: str, schema_verdicts: dict[str, str]) -> None:
    assert schema_verdicts[name] == "Valid cloud-config"


def ec2_bytes(document: str) -> bytes:
    """What EC2 receives for the document: the text, or the gzip the module sends as base64."""
    encoded = encode_user_data(document)
    if "text" in encoded:
        assert encoded == {"text": document}
        return document.encode()
    packed = base64.b64decode(encoded["base64"])
    assert gzip.decompress(packed) == document.encode()  # cloud-init unpacks gzip itself
    return packed


# What every variant leaves of EC2's 16 KB (gzipped) for the users' own python_packages.
USERS_ROOM_BYTES = 4 * 1024


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_user_data_fits_ec2_limit_with_room_for_the_users_packages(name: str) -> None:
    """The whole document goes gzipped (encode_user_data): its scripts alone are past 16 KB as
    text. At least 4 KB of EC2's 16 are left in every variant, and 4 KB of package
    requirements that gzip cannot shrink (sha256 hex in their names) do fit."""
    document = render_user_data(VARIANTS[name])
    assert document.startswith("#cloud-config\n")
    assert len(ec2_bytes(document)) <= USER_DATA_LIMIT_BYTES - USERS_ROOM_BYTES
    packages, size = [], 0
    while size < USERS_ROOM_BYTES:
        packages.append(f"p{hashlib.sha256(str(len(packages)).encode()).hexdigest()}==1.0")
        size += len(packages[-1]) + len(" --package \n")
    users = dataclasses.replace(
        VARIANTS[name], python_packages=[*VARIANTS[name].python_packages, *packages]
    )
    assert len(ec2_bytes(render_user_data(users))) < USER_DATA_LIMIT_BYTES


def test_shell_scripts_ship_as_the_same_program_without_their_comments() -> None:
    """The node's copy of each shell script lacks its comment lines and nothing else: bash
    reads both into the same program (each as a function body, printed by declare -f, which
    keeps no comment). A here-document, whose # lines are data, is refused."""
    for name in (PROVISION_SCRIPT, IDLE_CHECK_SCRIPT, EFA_ENV_SCRIPT, "scripts/bootstrap-node.sh"):
        script = resources.read_text(name)
        stripped = shell_without_comments(script)
        assert len(stripped) < len(script) * 0.8, name  # the comments were worth stripping
        programs = [
            subprocess.run(
                ["bash", "-c", f"f() {{\n{text}\n}}\ndeclare -f f"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            for text in (script, stripped)
        ]
        assert programs[0] == programs[1], name
    with pytest.raises(RenderError, match="without here-documents"):
        shell_without_comments("#!/bin/sh\ncat <<EOF\n# data, not a comment\nEOF\n")
    assert shell_without_comments('#!/bin/sh\nread -r a <<< "$b"\n# c\n') == (
        '#!/bin/sh\nread -r a <<< "$b"\n'
    )


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_nodes_print_their_host_keys_on_the_console(name: str) -> None:
    """skyinfra pins each node's host key from its console: the user data asks cloud-init for
    it (every key type) rather than relying on its defaults."""
    document = yaml.safe_load(render_user_data(VARIANTS[name]))
    assert document["ssh"] == {"emit_keys_to_console": True}
    assert document["ssh_key_console_blacklist"] == []


def files_of(document: str) -> dict[str, str]:
    return {f["path"]: content_of(f) for f in yaml.safe_load(document)["write_files"]}


def test_content_topology_identity_bootstrap_and_install() -> None:
    document = render_user_data(params(python_packages=["keras==3.6.0"]))
    files = files_of(document)
    # The head and this node only: the user data must not grow with the cluster.
    assert json.loads(files["/etc/skyinfra/topology.json"]) == {
        **TOPOLOGY,
        "nodes": [TOPOLOGY["nodes"][0], TOPOLOGY["nodes"][1]],
    }
    assert "SKYINFRA_NODE=1\n" in files["/etc/skyinfra/node.env"]
    # The very script the local target runs, without its comment lines (the same program:
    # test_shell_scripts_ship_as_the_same_program_without_their_comments).
    assert files["/opt/skyinfra/bootstrap-node.sh"] == shell_without_comments(
        default_bootstrap_script()
    )
    # provision.sh and idle-check.sh are infra/scripts/ files too; their values are written
    # beside them.
    provision = files["/opt/skyinfra/provision.sh"]
    assert provision == shell_without_comments(resources.read_text(PROVISION_SCRIPT))
    assert "sha256sum --check --strict" in provision
    settings = files["/opt/skyinfra/provision-settings.sh"]
    assert "'jax[cuda12]'" in settings
    assert "--find-links" not in settings  # JAX's CUDA wheels are on PyPI
    assert "--package keras==3.6.0" in settings
    # The idle timer is armed before provision.sh runs: a node whose bootstrap fails still
    # shuts itself down (idle-check.sh counts a failed bootstrap as idle).
    runcmd = yaml.safe_load(document)["runcmd"]
    assert runcmd == [
        ["systemctl", "daemon-reload"],
        ["systemctl", "enable", "--now", "skyinfra-idle.timer"],
        ["/opt/skyinfra/provision.sh"],
    ]
    assert "/etc/systemd/system/skyinfra-idle.timer" in files
    assert files["/opt/skyinfra/idle-check.sh"] == shell_without_comments(
        resources.read_text(IDLE_CHECK_SCRIPT)
    )
    service = files["/etc/systemd/system/skyinfra-idle.service"]
    assert f"Environment=IDLE_MINUTES={DEFAULT_IDLE_SHUTDOWN_MINUTES} PROVISION_MINUTES=" in service


def test_idle_timer_off_by_explicit_setting() -> None:
    document = render_user_data(params(idle_shutdown_minutes=0))
    assert "skyinfra-idle" not in document
    assert "shutdown" not in document


def test_secret_in_spec_never_reaches_user_data() -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    # A spec carrying a secret where the nodes would see it: as a pip requirement URL.
    leaky = params(
        python_packages=[f"https://user:{secret}@pypi.example/pkg.whl"], forbidden_values=[secret]
    )
    with pytest.raises(SpecError) as err:
        render_user_data(leaky)
    assert secret not in str(err.value)
    # Secret-looking settings the nodes do not need never enter the document at all.
    document = render_user_data(params(forbidden_values=[secret]))
    assert secret not in document
    with pytest.raises(SpecError, match="PRIVATE KEY"):
        render_user_data(
            params(bootstrap_script="#!/bin/sh\n# -----BEGIN OPENSSH PRIVATE KEY-----\n")
        )


def test_oversized_user_data_is_gzipped_for_user_data_base64_or_refused() -> None:
    """Past 16 KB as text the document goes gzipped, as base64 (the module's user_data_base64);
    past 16 KB gzipped, it is refused naming user_data. A bootstrap of text gzip cannot
    shrink (sha256 hex) makes it so."""
    lines = (f"echo {hashlib.sha256(str(i).encode()).hexdigest()}\n" for i in range(150))
    big_script = "#!/bin/sh\n" + "".join(lines)
    document = render_user_data(params(bootstrap_script=big_script))
    assert len(document.encode()) > USER_DATA_LIMIT_BYTES
    encoded = encode_user_data(document)
    assert set(encoded) == {"base64"}
    assert gzip.decompress(base64.b64decode(encoded["base64"])).decode() == document
    lines = (f"echo {hashlib.sha256(str(i).encode()).hexdigest()}\n" for i in range(400))
    too_big = render_user_data(params(bootstrap_script="#!/bin/sh\n" + "".join(lines)))
    with pytest.raises(RenderError, match="user_data") as refused:
        encode_user_data(too_big)
    assert "EC2's user-data limit" in str(refused.value)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("wheel_sha256", "xyz", "64 lower-case hex"),
        ("wheel_filename", "runtime.tar.gz", "ending in .whl"),
        ("topology_json", '{"schema": 2}', "schema 1"),
        ("jax_extra", "cuda12; rm -rf /", "extra name"),
    ],
)
def test_bad_input_names_the_field(field: str, value: str, message: str) -> None:
    # Values skyinfra computes itself: a bad one is an internal error, not the user's spec.
    with pytest.raises(RenderError, match=message) as err:
        render_user_data(params(**{field: value}))
    assert not isinstance(err.value, SpecError)


def test_provision_settings_are_the_values_as_bash_reads_them(tmp_path: Path) -> None:
    """provision.sh sources its settings: every value comes back as it went in, quoting and
    all (an extra's brackets, a requirement's spaces)."""
    packages = ["keras==3.6.0", "torch >=2.13"]
    document = render_user_data(params(python_packages=packages))
    settings = tmp_path / "provision-settings.sh"
    settings.write_text(files_of(document)["/opt/skyinfra/provision-settings.sh"])
    shown = subprocess.run(
        ["bash", "-c", f'. {settings}; printf "%s\\n" "$WHEEL_URL" "${{BOOTSTRAP_ARGS[@]}}"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert shown == [
        params().wheel_url,
        "--package",
        "jax[cuda12]",
        "--package",
        "keras==3.6.0",
        "--package",
        "torch >=2.13",
        "--check-topology",
        "/etc/skyinfra/topology.json",
        "--node-index",
        "1",
    ]


def test_node_scripts_pass_shellcheck() -> None:
    """The scripts the nodes run, as they ship (infra/scripts/), pass shellcheck."""
    shellcheck = require_system_tool(shutil.which("shellcheck"), "shellcheck")
    scripts = [
        resources.bootstrap_script(),
        resources.read_text(PROVISION_SCRIPT),
        resources.read_text(IDLE_CHECK_SCRIPT),
    ]
    for text in scripts:
        result = subprocess.run(
            [shellcheck, "--shell=bash", "-"], input=text, capture_output=True, text=True
        )
        assert result.returncode == 0, text.splitlines()[1] + "\n" + result.stdout


def test_a_presigned_url_is_refused_and_the_node_signs_its_own_request() -> None:
    """No credential in user data: a URL with a query string (where a presigned URL keeps
    X-Amz-Credential and X-Amz-Security-Token) is refused; the node's fetch-s3-object.py
    signs its GET as botocore does (SigV4, checked against botocore's own signer)."""
    presigned = params().wheel_url + "?X-Amz-Credential=AKIAEXAMPLE%2F20261123"
    with pytest.raises(RenderError, match="without a query string"):
        render_user_data(params(wheel_url=presigned))
    files = files_of(render_user_data(params()))
    assert files["/opt/skyinfra/fetch-s3-object.py"] == resources.read_text(FETCH_SCRIPT)

    import datetime
    import types
    from unittest import mock

    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    fetcher = types.ModuleType("fetch_s3_object")
    exec(compile(resources.read_text(FETCH_SCRIPT), FETCH_SCRIPT, "exec"), fetcher.__dict__)
    now = datetime.datetime(2026, 11, 23, 10, 0, 0, tzinfo=datetime.UTC)
    url = "https://b.s3.eu-west-1.amazonaws.com/c/ws-1/ab/skyinfra_runtime-0.1%2Bx-py3-none-any.whl"
    for creds in [("AKIAEXAMPLE", "secret/key+1", "token=="), ("AKIAEXAMPLE", "s", None)]:
        mine = fetcher.signed_headers(url, "eu-west-1", creds, now)
        request = AWSRequest(method="GET", url=url)
        auth = S3SigV4Auth(Credentials(*creds), "s3", "eu-west-1")
        with mock.patch(
            "botocore.auth.get_current_datetime", return_value=now.replace(tzinfo=None)
        ):
            auth.add_auth(request)
        assert mine["authorization"] == request.headers["Authorization"]


def test_node_check_ships_and_efa_env_only_with_efa() -> None:
    """check-node.py goes to every node beside the bootstrap; the EFA environment (NCCL over
    aws-ofi-nccl) goes into the node folder only with aws.efa, where `run` sources it."""
    plain = files_of(render_user_data(params()))
    assert plain["/opt/skyinfra/check-node.py"] == resources.read_text(CHECK_SCRIPT)
    assert f"/opt/skyinfra/node/{NODE_ENV_FILE}" not in plain
    efa = files_of(render_user_data(params(efa=True)))
    env = efa[f"/opt/skyinfra/node/{NODE_ENV_FILE}"]
    assert env == shell_without_comments(resources.read_text(EFA_ENV_SCRIPT))
    assert "export FI_PROVIDER=efa" in env


def test_efa_env_sets_only_what_exists(tmp_path: Path) -> None:
    """Sourced on a machine without the EFA software (this one): FI_PROVIDER is set, and no
    LD_LIBRARY_PATH or NCCL_NET_PLUGIN pointing at directories that are not there."""
    script = tmp_path / "node-env.sh"
    script.write_text(resources.read_text(EFA_ENV_SCRIPT))
    shellcheck = require_system_tool(shutil.which("shellcheck"), "shellcheck")
    checked = subprocess.run([shellcheck, str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout
    shown = subprocess.run(
        ["sh", "-c", f'. {script}; env | grep -E "^(FI_PROVIDER|LD_LIBRARY_PATH|NCCL_)" | sort'],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=True,
    ).stdout
    present = [d for d in ("/opt/amazon/ofi-nccl/lib", "/opt/amazon/efa/lib") if Path(d).is_dir()]
    if not present:
        assert shown == "FI_PROVIDER=efa\n"


def test_user_data_does_not_grow_with_the_cluster() -> None:
    """2000 nodes (the nodes limit is the subnet's now, not 64): what EC2 receives stays under
    16 KB, with this node's entry for the node check."""
    many = {**TOPOLOGY, "nodes": [{**TOPOLOGY["nodes"][0], "index": i} for i in range(2000)]}
    document = render_user_data(params(node_index=1234, topology_json=json.dumps(many), efa=True))
    assert len(ec2_bytes(document)) < USER_DATA_LIMIT_BYTES
    written = json.loads(files_of(document)["/etc/skyinfra/topology.json"])
    assert [n["index"] for n in written["nodes"]] == [0, 1234]


def test_nodes_install_the_pinned_jax_and_uv_first() -> None:
    """The jax pin and the uv version reach provision-settings.sh as shell words; a version
    skyinfra computed wrongly is refused before anything is rendered."""
    document = render_user_data(params(jax_version="0.10.2", uv_version="0.13.9"))
    settings = files_of(document)["/opt/skyinfra/provision-settings.sh"]
    assert "--package 'jax[cuda12]==0.10.2'" in settings
    assert "UV_VERSION=0.13.9" in settings
    # The first bootstrap phase is written before the apt packages, on the first boot only.
    bootcmd = yaml.safe_load(document)["bootcmd"]
    assert bootcmd[0][:3] == ["cloud-init-per", "once", "skyinfra-phase"]
    with pytest.raises(RenderError, match="jax_version"):
        render_user_data(params(jax_version="0.10; rm -rf /"))


def test_only_a_spot_node_watches_for_an_interruption_notice() -> None:
    spot = files_of(render_user_data(params(spot=True)))
    notice = json.loads(spot["/opt/skyinfra/node/notice.json"])
    assert notice == {"imds": "http://169.254.169.254", "poll_s": 2.0}
    assert "/opt/skyinfra/node/notice.json" not in files_of(render_user_data(params()))


def test_with_recover_node_0_installs_skyinfra_and_every_node_trusts_the_clusters_key() -> None:
    head = render_user_data(VARIANTS["recover-head"])
    settings = files_of(head)[f"{SCRIPT_DIR}/provision-settings.sh"]
    assert "HEAD_WHEEL_FILENAME=skyinfra-0.1.0-py3-none-any.whl" in settings
    assert "HEAD_VENV=/opt/skyinfra/node/head/venv" in settings
    assert yaml.safe_load(head)["ssh_authorized_keys"] == [HEAD_KEY_LINE]
    worker = render_user_data(params(node_index=1, authorized_keys=[HEAD_KEY_LINE]))
    assert "HEAD_WHEEL" not in files_of(worker)[f"{SCRIPT_DIR}/provision-settings.sh"]
    assert yaml.safe_load(worker)["ssh_authorized_keys"] == [HEAD_KEY_LINE]
    plain = yaml.safe_load(render_user_data(params()))
    assert "ssh_authorized_keys" not in plain
    assert (
        "HEAD_WHEEL"
        not in files_of(render_user_data(params()))[f"{SCRIPT_DIR}/provision-settings.sh"]
    )
    with pytest.raises(RenderError, match="authorized_keys"):
        render_user_data(params(authorized_keys=["-----BEGIN OPENSSH PRIVATE KEY-----"]))
    with pytest.raises(RenderError, match="64 lower-case hex"):
        render_user_data(params(head_wheel=("https://b.s3.amazonaws.com/w.whl", "x", "w.whl")))
