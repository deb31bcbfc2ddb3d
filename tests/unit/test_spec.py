"""Spec validation: good specs load; bad ones exit 2 via the CLI, name the field, write nothing."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from skyinfra_runtime.errors import PluginOptionError
from skyinfra_runtime.plugins import from_name

from skyinfra.cli import main
from skyinfra.errors import SpecError, SpecProblems
from skyinfra.spec import (
    FLAG_KEYS,
    ClusterSpec,
    KeptValue,
    load_spec,
    load_spec_keeping_applied,
    parse_plugin_flag,
    validate_spec,
)
from skyinfra.targets.aws.spec import AwsSpec
from skyinfra.targets.local.spec import LocalSpec
from skyinfra.workspace import Workspace
from tests.conftest import skyinfra_argv
from tests.support.specs import MODEL_PARALLEL_SPEC


def test_minimal_spec_gets_defaults() -> None:
    spec = validate_spec({"name": "demo"})
    assert spec.provider == "local"
    assert spec.nodes == 1
    assert spec.head_port == 29500
    assert isinstance(spec.section, LocalSpec) and spec.section.base_address == "127.0.0.2"


def test_an_existing_cluster_keeps_what_neither_a_flag_nor_the_file_gives(tmp_path: Path) -> None:
    """Issue 42: with no spec file every applied field is kept; with one, the fields `up`'s
    flags set are kept where the file leaves them out, the others follow the file; a flag wins
    over both. Only kept values that differ from the defaults are said."""
    applied = validate_spec(
        {
            "name": "made",
            "nodes": 2,
            "head_port": 47200,
            "plugins": ["jax", "keras:backend=jax"],
            "local": {"base_address": "127.0.9.2"},
        }
    )

    def load(path: Path | None, **flags: object) -> tuple[ClusterSpec, dict[str, KeptValue]]:
        spec, kept = load_spec_keeping_applied(
            path,
            {"name": "made", **flags},
            default_path=None,
            applied=lambda _: applied,
            flags=FLAG_KEYS,
        )
        return spec, {k.key: k for k in kept}

    spec, kept = load(None)
    assert spec == applied
    assert set(kept) == {"nodes", "head_port", "plugins", "local"}
    assert kept["plugins"].line("skyinfra.toml") == (
        '[skyinfra] kept plugins = ["jax", "keras:backend=jax"] from the applied cluster '
        "(change it with --plugin or skyinfra.toml)"
    )
    assert "(change it with skyinfra.toml)" in kept["head_port"].line("skyinfra.toml")
    path = tmp_path / "skyinfra.toml"
    path.write_text('name = "made"\nprocs_per_node = 2\n')
    spec, kept = load(path, nodes=3)
    assert (spec.nodes, spec.procs_per_node, spec.head_port) == (3, 2, 29500)
    assert spec.plugins == applied.plugins and spec.section.base_address == "127.0.0.2"
    assert set(kept) == {"plugins"}


def test_file_then_flags_override(tmp_path: Path) -> None:
    path = tmp_path / "skyinfra.toml"
    path.write_text(
        'name = "fromfile"\nnodes = 3\n'
        'plugins = ["jax", {name = "keras", options = {backend = "jax"}}]\n'
        'python_packages = ["numpy>=1.26"]\n'
    )
    spec = load_spec(path, {"nodes": 2, "name": None})
    assert spec.name == "fromfile"
    assert spec.nodes == 2
    assert [p.name for p in spec.plugins] == ["jax", "keras"]
    assert spec.plugins[1].options == {"backend": "jax"}
    assert spec.python_packages == ("numpy>=1.26",)


def test_aws_section_is_validated_and_kept() -> None:
    spec = validate_spec(
        {
            "name": "gpu",
            "provider": "aws",
            "nodes": 2,
            "aws": {
                "region": "eu-west-1",
                "instance_type": "g5.12xlarge",
                "ssh_cidrs": ["203.0.113.4/32"],
                "efa": True,
                "jax_extra": "cuda12",
            },
        }
    )
    aws = spec.section
    assert isinstance(aws, AwsSpec)
    assert aws.region == "eu-west-1"
    assert aws.ami is None
    assert aws.disk_gb == 200
    assert aws.idle_shutdown_minutes == 60  # on by default
    assert aws.ssh_key == "~/.ssh/id_ed25519"
    assert aws.ssh_user is None  # looked up from the AMI at `up`


def test_idle_shutdown_off_only_when_asked() -> None:
    raw = {"name": "c", "provider": "aws", "aws": {**AWS_OK, "idle_shutdown_minutes": 0}}
    spec = validate_spec(raw)
    assert isinstance(spec.section, AwsSpec) and spec.section.idle_shutdown_minutes == 0


def test_plugin_flag_parsing() -> None:
    assert parse_plugin_flag("keras:backend=jax") == {
        "name": "keras",
        "options": {"backend": "jax"},
    }
    assert parse_plugin_flag("jax") == {"name": "jax", "options": {}}
    with pytest.raises(SpecError, match="plugins"):
        parse_plugin_flag("keras:backend")
    # The runtime's reading: JSON values keep their type; commas inside brackets stay.
    assert parse_plugin_flag(
        'keras:mesh_shape=[1, 2],axis_names=["batch","model"],'
        'layout_map={".*wide/kernel":[null,"model"]}'
    ) == {
        "name": "keras",
        "options": {
            "mesh_shape": [1, 2],
            "axis_names": ["batch", "model"],
            "layout_map": {".*wide/kernel": [None, "model"]},
        },
    }
    assert parse_plugin_flag("torch:init_timeout=30, backend=gloo") == {
        "name": "torch",
        "options": {"init_timeout": 30, "backend": "gloo"},
    }


def test_torch_mpi_is_refused_because_the_nodes_torch_has_no_mpi() -> None:
    """PyPI's torch wheels (what every node installs) are built without MPI: accepted, the
    run failed later on every node; refused here, naming the value and what works."""
    with pytest.raises(SpecError) as err:
        validate_spec({"name": "c", "plugins": ["torch:backend=mpi"]})
    assert err.value.field == "plugins[0].options.backend"
    assert err.value.value == "mpi"
    assert "without MPI" in str(err.value) and "nccl, gloo" in err.value.expected
    with pytest.raises(PluginOptionError):
        from_name("torch", {"backend": "mpi"})  # the runtime refuses it too (one table)
    spec = validate_spec({"name": "c", "plugins": ["torch:backend=gloo"]})
    assert getattr(from_name("torch", spec.plugins[0].options), "backend", None) == "gloo"
    with pytest.raises(SpecError) as err:
        validate_spec({"name": "c", "plugins": ["jax", "torch:backend=ucc"]})
    assert err.value.field == "plugins[1].options.backend"
    assert err.value.value == "ucc"
    assert "nccl, gloo" in str(err.value)


def test_every_problem_is_named_not_only_the_first() -> None:
    with pytest.raises(SpecProblems) as err:
        validate_spec(
            {
                "name": "Bad",
                "nodes": 0,
                "plugins": ["torch:backend=mpi"],
                "colour": "blue",
                "local": {"base_address": "10.0.0.1"},
                "aws": {**AWS_OK, "region": "mars-1", "disk_gb": 2},
            }
        )
    fields = [p.field for p in err.value.problems]
    assert fields == [
        "colour",
        "name",
        "nodes",
        "plugins[0].options.backend",
        "local.base_address",
        "aws.region",
        "aws.disk_gb",
    ]
    assert err.value.field == "colour"  # a reader of one problem still gets one
    assert all(f"{f!r}" in str(err.value) for f in fields)


def test_keras_model_parallel_options_from_toml_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "skyinfra.toml"
    path.write_text(MODEL_PARALLEL_SPEC)
    spec = load_spec(path, {})
    keras = spec.plugins[1]
    assert spec.plugins[0].options == {"init_timeout": 60}  # a number stays a number
    assert keras.options == {
        "backend": "jax",
        "mesh_shape": [1, 2],
        "axis_names": ["batch", "model"],
        "layout_map": {".*wide/kernel": [None, "model"]},
    }
    # spec.json round-trips to the same spec; the runtime builds the plugin from the options.
    ws = Workspace(tmp_path / "clusters" / "mp")
    ws.path.mkdir(parents=True)
    ws.write_json(ws.spec_file, spec.to_dict())
    assert ws.spec() == spec
    plugin = from_name(keras.name, json.loads(json.dumps(keras.options)))
    assert getattr(plugin, "layout_map", None) == {".*wide/kernel": [None, "model"]}


@pytest.mark.parametrize(
    ("options", "field", "hint"),
    [
        ({"mesh_shape": [1, 2], "axis_names": ["b", "m"]}, "options.layout_map", "together"),
        (
            {"mesh_shape": [2], "axis_names": ["b", "m"], "layout_map": {}},
            "options.axis_names",
            "1 axis names",
        ),
        (
            {"mesh_shape": [1, 2], "axis_names": ["b", "m"], "layout_map": {".*k": ["", "t"]}},
            "options.layout_map['.*k']",
            "axis names from ['b', 'm']",
        ),
        ({"mesh_shape": [0]}, "options.mesh_shape", "positive integers"),
        ({"layout_map": {"(": []}}, "options.layout_map['(']", "regular expression"),
        (
            {"backend": "torch", "mesh_shape": [1], "axis_names": ["d"], "layout_map": {}},
            "options.backend",
            "JAX backend",
        ),
        ({"batch_dim_name": "b"}, "options.batch_dim_name", "model parallelism"),
    ],
)
def test_keras_model_parallel_mistakes_name_the_option(
    options: dict[str, object], field: str, hint: str
) -> None:
    raw = {"name": "c", "plugins": ["jax", {"name": "keras", "options": options}]}
    with pytest.raises(SpecError) as err:
        validate_spec(raw)
    assert err.value.field == f"plugins[1].{field}"
    assert hint in err.value.expected


AWS_OK = {"region": "us-east-1", "instance_type": "g5.xlarge", "ssh_cidrs": ["10.0.0.0/8"]}


def _aws(**changes: object) -> str:
    fields = {**AWS_OK, **changes}
    lines = []
    for key, value in fields.items():
        if isinstance(value, str):
            lines.append(f'{key} = "{value}"')
        elif isinstance(value, bool):
            lines.append(f"{key} = {'true' if value else 'false'}")
        elif isinstance(value, list):
            lines.append(f"{key} = [" + ", ".join(f'"{v}"' for v in value) + "]")
        else:
            lines.append(f"{key} = {value}")
    return 'name = "c"\nprovider = "aws"\n[aws]\n' + "\n".join(lines) + "\n"


# (spec file text, extra CLI flags, field the message must name)
BAD_SPECS = [
    ('name = "Bad_Name"\n', [], "'name'"),
    ("nodes = 2\n", [], "'name'"),  # name missing
    ('name = "c"\nprovider = "gcp"\n', [], "'provider'"),
    ('name = "c"\nnodes = 0\n', [], "'nodes'"),
    ('name = "c"\n', ["--nodes", "abc"], "--nodes: got 'abc'"),
    ('name = "c"\nnodes = 33\n', [], "'nodes'"),
    ('name = "c"\nnodes = true\n', [], "'nodes'"),
    ('name = "c"\nplugins = ["tensorflow"]\n', [], "'plugins[0].name'"),
    ('name = "c"\n', ["--plugin", "keras:backend=mxnet"], "--plugin keras:backend: got"),
    ('name = "c"\nplugins = ["jax:speed=fast"]\n', [], "'plugins[0].options.speed'"),
    ('name = "c"\nplugins = ["jax", "jax"]\n', [], "'plugins[1]'"),
    ('name = "c"\n', ["--plugin", "jax:init_timeout=soon"], "--plugin jax:init_timeout: got"),
    ('name = "c"\n', ["--plugin", "torch:init_timeout=0"], "--plugin torch:init_timeout: got"),
    ('name = "c"\n', ["--plugin", "torch:backend=ucc"], "--plugin torch:backend: got"),
    (
        'name = "c"\nplugins = ["jax", {name = "keras", options = {mesh_shape = [1, 2]}}]\n',
        [],
        "'plugins[1].options.axis_names'",
    ),
    ('name = "c"\npython_packages = ["--index-url=http://x"]\n', [], "'python_packages[0]'"),
    ('name = "c"\npython_packages = ["numpy; rm -rf /"]\n', [], "'python_packages[0]'"),
    ('name = "c"\nhead_port = 80\n', [], "'head_port'"),
    ('name = "c"\nrun_timeout = 0\n', [], "'run_timeout'"),
    ('name = "c"\nrun_timeout = "1h"\n', [], "'run_timeout'"),
    ('name = "c"\nmax_restarts = -1\n', [], "'max_restarts'"),
    ('name = "c"\nmax_restarts = "twice"\n', [], "'max_restarts'"),
    ('name = "c"\nretry_on = "oom"\n', [], "'retry_on'"),
    ('name = "c"\nprocs_per_node = "many"\n', [], "'procs_per_node'"),
    ('name = "c"\ncolour = "blue"\n', [], "'colour'"),
    ('name = "c"\n[local]\nbase_address = "10.0.0.1"\n', [], "'local.base_address'"),
    ('name = "c"\n[local]\npython = "/no/such/python"\n', [], "'local.python'"),
    ('name = "c"\n[local]\nrecover = "yes"\n', [], "'local.recover'"),
    # Unattended recovery needs the state in S3 (in the spec) and an On-Demand head.
    (_aws(recover=True), [], "'aws.recover'"),
    (
        'backend = "s3://team-state/sky"\n' + _aws(recover=True, market="spot", head_market="spot"),
        [],
        "'aws.recover'",
    ),
    (_aws(recover="yes"), [], "'aws.recover'"),
    ('name = "c"\nprovider = "aws"\n', [], "'aws'"),
    (_aws(region="mars-1"), [], "'aws.region'"),
    (_aws(instance_type="huge"), [], "'aws.instance_type'"),
    (_aws(ami="ubuntu"), [], "'aws.ami'"),
    (_aws(disk_gb=2), [], "'aws.disk_gb'"),
    (_aws(ssh_cidrs=["10.0.0.1/8"]), [], "'aws.ssh_cidrs[0]'"),
    (_aws(ssh_cidrs=[]), [], "'aws.ssh_cidrs'"),
    (_aws(efa="yes"), [], "'aws.efa'"),
    (_aws(jax_extra="rocm"), [], "'aws.jax_extra'"),
    (_aws(jax_version="latest"), [], "'aws.jax_version'"),
    (_aws(subnet_id="net-1"), [], "'aws.subnet_id'"),
    (_aws(idle_shutdown_minutes=-5), [], "'aws.idle_shutdown_minutes'"),
    (_aws(idle_shutdown_minutes=2), [], "'aws.idle_shutdown_minutes'"),
    (_aws(key_name="my-key"), [], "'aws.key_name'"),  # replaced by aws.ssh_key (a path)
    # Spot (issue 26)
    (_aws(market="spto"), [], "'aws.market'"),
    (_aws(head_market="SPOT"), [], "'aws.head_market'"),
    (_aws(market="spot", spot_max_price=-0.5), [], "'aws.spot_max_price'"),
    (_aws(market="spot", spot_max_price=0), [], "'aws.spot_max_price'"),
    (_aws(market="spot", spot_max_price="cheap"), [], "'aws.spot_max_price'"),
    (_aws(spot_max_price=1.5), [], "'aws.spot_max_price'"),  # no Spot node to cap
    (_aws(market="spot", spot_fallback="always"), [], "'aws.spot_fallback'"),
    (_aws(market="spot", capacity_reservation_id="cr-0123456789abcdef0"), [], "'aws.market'"),
    ("name = [\n", [], "--spec: got"),  # not TOML
]


@pytest.mark.parametrize(
    ("text", "flags", "field"), BAD_SPECS, ids=[b[2] + str(i) for i, b in enumerate(BAD_SPECS)]
)
def test_bad_spec_exits_2_names_field_writes_nothing(
    tmp_path: Path,
    clean_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    text: str,
    flags: list[str],
    field: str,
) -> None:
    # The console script's own entry (skyinfra.cli.main: its error handling and exit codes) in
    # this process: a hundred interpreters importing the CLI were most of this file's CPU.
    # test_usage_error_exits_2 and test_validate_names_bad_restart_fields_offline run it as
    # a process.
    (tmp_path / "skyinfra.toml").write_text(text)
    before = sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n not in clean_env]:
        monkeypatch.delenv(name)
    for name, value in clean_env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as ended:
        main(["up", *flags])
    stderr = capsys.readouterr().err
    assert ended.value.code == 2, stderr
    assert field in stderr, stderr
    assert "expected" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no .skyinfra, no cache


def test_validate_names_bad_restart_fields_offline(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    (tmp_path / "skyinfra.toml").write_text(
        'name = "c"\nmax_restarts = -1\nretry_on = "oom"\nwarm_workers = "no"\n'
    )
    proc = subprocess.run(
        [*skyinfra_argv(), "validate"],
        cwd=tmp_path,
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    assert "'max_restarts': got -1; expected an integer from 0 to 1000" in said, said
    assert "'retry_on': got 'oom'; expected one of ['signal', 'error']" in said, said
    assert "'warm_workers': got 'no'; expected true or false" in said, said
    good = 'name = "c"\nmax_restarts = 3\nretry_on = "error"\nwarm_workers = false\n'
    (tmp_path / "skyinfra.toml").write_text(good)
    ok = subprocess.run(
        [*skyinfra_argv(), "validate"], cwd=tmp_path, env=clean_env, capture_output=True
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_usage_error_exits_2(tmp_path: Path, clean_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [*skyinfra_argv(), "up", "--no-such-flag"],
        cwd=tmp_path,
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "no-such-flag" in proc.stderr


@pytest.mark.parametrize("command", ["up", "run", "status", "topology", "down", "tf", "validate"])
def test_every_command_has_help(command: str, clean_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [*skyinfra_argv(), command, "--help"],
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    assert "Usage:" in proc.stdout


def test_aws_nodes_pin_the_spec_jax_else_the_operators() -> None:
    """aws.jax_version wins; without it the operator's jax version; no jax: no pin."""
    from skyinfra.targets.aws.spec import jax_requirement
    from skyinfra.targets.aws.spec_parsing import parse_aws_section

    pinned = parse_aws_section({**AWS_OK, "jax_version": "0.9.1", "jax_extra": "cuda13"})
    assert jax_requirement(pinned, "0.10.2") == "jax[cuda13]==0.9.1"
    assert jax_requirement(parse_aws_section(AWS_OK), "0.10.2") == "jax[cuda12]==0.10.2"
    assert jax_requirement(parse_aws_section({**AWS_OK, "jax_extra": "none"}), "0.10.2") is None
    assert pinned.to_dict()["jax_version"] == "0.9.1"


def test_spot_markets_default_to_on_demand_and_the_head_stays_on_demand() -> None:
    from skyinfra.targets.aws.spec import node_markets

    plain = validate_spec({"name": "gpu", "provider": "aws", "nodes": 3, "aws": AWS_OK})
    aws = plain.section_as(AwsSpec)
    assert (aws.market, aws.head_market, aws.spot_max_price, aws.spot_fallback) == (
        "on-demand",
        "on-demand",
        None,
        "none",
    )
    # A spec without Spot reads as before issue 26 (plan-meta.json, the reviewed fields).
    assert not {"market", "head_market", "spot_max_price", "spot_fallback"} & set(aws.to_dict())
    assert set(node_markets(aws, 3).values()) == {"on-demand"}

    spot = validate_spec(
        {
            "name": "gpu",
            "provider": "aws",
            "nodes": 3,
            "aws": {**AWS_OK, "market": "spot", "spot_max_price": 2, "spot_fallback": "on-demand"},
        }
    ).section_as(AwsSpec)
    assert node_markets(spot, 3) == {"node-0": "on-demand", "node-1": "spot", "node-2": "spot"}
    assert spot.spot_max_price == 2.0
    assert spot.to_dict()["market"] == "spot" and spot.to_dict()["spot_fallback"] == "on-demand"
    head = validate_spec(
        {"name": "gpu", "provider": "aws", "nodes": 2, "aws": {**AWS_OK, "head_market": "spot"}}
    ).section_as(AwsSpec)
    assert node_markets(head, 2) == {"node-0": "spot", "node-1": "on-demand"}


def test_spot_problems_are_named_together() -> None:
    with pytest.raises(SpecProblems) as caught:
        validate_spec(
            {
                "name": "gpu",
                "provider": "aws",
                "aws": {**AWS_OK, "market": "spto", "spot_max_price": -1, "spot_fallback": 1},
            }
        )
    text = str(caught.value)
    for field in ("'aws.market'", "'aws.spot_max_price'", "'aws.spot_fallback'"):
        assert field in text, text
    assert "'spto'" in text and "['on-demand', 'spot']" in text


@pytest.mark.parametrize(
    ("raw", "field", "near"),
    [
        ({"name": "a", "nodez": 2}, "nodez", "'nodes'"),
        ({"name": "a", "plugin": ["jax"]}, "plugin", "'plugins'"),
        (
            {"name": "a", "local": {"base_adress": "127.0.0.9"}},
            "local.base_adress",
            "'local.base_address'",
        ),
    ],
)
def test_a_typo_in_a_key_names_the_key_it_is_near(
    raw: dict[str, object], field: str, near: str
) -> None:
    with pytest.raises(SpecError) as err:
        validate_spec(raw)
    assert err.value.field == field
    assert f"(did you mean {near}?)" in str(err.value)
    assert "one of the known keys" in str(err.value)  # the whole list still follows


def test_a_key_near_nothing_gets_the_list_alone() -> None:
    with pytest.raises(SpecError) as err:
        validate_spec({"name": "a", "zzzzzz": 1})
    assert "did you mean" not in str(err.value) and "one of the known keys" in str(err.value)


def test_a_missing_name_is_said_in_words() -> None:
    with pytest.raises(SpecError) as err:
        validate_spec({"nodes": 2})
    said = str(err.value)
    assert "invalid spec field 'name': got nothing (the field is missing)" in said
    assert "in the spec file or as --name" in said and "None" not in said


def test_an_unknown_plugin_does_not_hide_the_other_plugins_problems() -> None:
    raw = {
        "name": "demo",
        "plugins": [
            "nope",
            "keras:backend=xx",
            {"name": "torch", "options": {"backend": "zz"}},
            3,
            "jax",
            "jax",
        ],
    }
    with pytest.raises(SpecProblems) as err:
        validate_spec(raw)
    fields = [problem.field for problem in err.value.problems]
    assert fields == [
        "plugins[3]",
        "plugins[0].name",
        "plugins[1].options.backend",
        "plugins[2].options.backend",
        "plugins[5]",
    ]


def test_a_flags_problem_names_the_flag_not_a_spec_field(tmp_path: Path) -> None:
    assert str(SpecError("--env", "bad-name", "NAME=VALUE")) == (
        "invalid value for --env: got 'bad-name'; expected NAME=VALUE"
    )
    flags = {
        "name": "ok",
        "nodes": 0,
        "procs_per_node": 0,
        "plugins": [parse_plugin_flag("nope"), parse_plugin_flag("keras:backend=xx")],
    }
    with pytest.raises(SpecProblems) as err:
        load_spec(None, flags)
    said = [str(problem) for problem in err.value.problems]
    assert said == [
        "invalid value for --nodes: got 0; expected an integer from 1 to 32",
        "invalid value for --procs-per-node: got 0; expected an integer from 1 to 64, or 'auto'",
        "invalid value for --plugin: got 'nope'; expected one of ['jax', 'keras', 'torch']",
        "invalid value for --plugin keras:backend: got 'xx'; expected one of jax, torch, "
        "tensorflow",
    ]
    # The same values from the file are the file's fields.
    path = tmp_path / "skyinfra.toml"
    path.write_text('name = "ok"\nnodes = 0\n')
    with pytest.raises(SpecError, match="invalid spec field 'nodes': got 0"):
        load_spec(path, {"nodes": None})
