"""Topology parsing and instance_info() in this process (pure functions, no cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from skyinfra_runtime import (
    InstanceInfo,
    Topology,
    TopologyError,
    exitcodes,
    instance_info,
    load_topology,
)
from skyinfra_runtime.errors import PluginError, PluginFlagError, PluginOptionError, UsageError
from skyinfra_runtime.plugins import PLUGINS, from_name, parse_plugin_flag, validate_plugins
from skyinfra_runtime.plugins.base import init_timeout

from tests.integration.runtime.launch_harness import topology


def test_round_trip_through_to_dict() -> None:
    data = topology(nodes=3, plugins=[{"name": "jax", "options": {"init_timeout": 5}}])
    parsed = Topology.from_dict(data)
    assert Topology.from_dict(parsed.to_dict()) == parsed
    assert parsed.jax_port + 1 == parsed.torch_port


def test_nodes_are_ordered_by_index_whatever_the_file_order() -> None:
    data = topology(nodes=3)
    data["nodes"].reverse()
    assert [n.index for n in Topology.from_dict(data).nodes] == [0, 1, 2]


def test_load_from_a_file_path_and_from_inline_json(tmp_path: Path) -> None:
    data = topology(nodes=2)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    assert load_topology(path) == load_topology(json.dumps(data)) == Topology.from_dict(data)


def test_no_topology_means_one_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYINFRA_TOPOLOGY", raising=False)
    monkeypatch.delenv("SKYINFRA_NODE", raising=False)
    info = instance_info()
    assert (info.node, info.total_nodes, info.is_head, info.total_workers) == (0, 1, True, 1)
    assert len(info.peers) == 1


def test_instance_info_lists_every_peer_with_addresses() -> None:
    data = topology(nodes=2, accelerators=8)
    data["nodes"][1]["public_ip"] = "203.0.113.7"
    info = InstanceInfo.build(Topology.from_dict(data), node=1, worker=3, workers_per_node=8)
    assert info.accelerators == 8 and info.accelerator_type == "test-gpu"
    assert [p.public_ip for p in info.peers] == [None, "203.0.113.7"]
    assert (info.global_index, info.total_workers, info.is_head) == (11, 16, False)


def test_worker_index_out_of_range_is_a_topology_error() -> None:
    with pytest.raises(TopologyError, match="worker index 2 is out of range for 2"):
        InstanceInfo.build(Topology.from_dict(topology(nodes=1)), 0, worker=2, workers_per_node=2)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("jax", {"init_timeout": "soon"}, "not a number of seconds"),
        ("jax", {"init_timeout": 0}, "must be > 0"),
        ("keras", {"mesh_shape": [2]}, "mesh_shape, axis_names and layout_map together"),
        (
            "keras",
            {"backend": "torch", "mesh_shape": [1], "axis_names": ["d"], "layout_map": {}},
            "only available with backend='jax'",
        ),
    ],
)
def test_plugin_option_errors(name: str, options: dict[str, object], message: str) -> None:
    with pytest.raises(PluginError, match=message):
        plugin = from_name(name, options)
        init_timeout(getattr(plugin, "init_timeout", None))


def test_init_timeout_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKYINFRA_INIT_TIMEOUT", raising=False)
    assert init_timeout(None) == 600.0
    monkeypatch.setenv("SKYINFRA_INIT_TIMEOUT", "42")
    assert init_timeout(None) == 42.0
    assert init_timeout("7") == 7.0


def test_instance_id_may_be_null_before_boot_but_not_empty() -> None:
    data = topology(nodes=2)
    data["nodes"][1]["instance_id"] = None
    assert Topology.from_dict(data).nodes[1].instance_id is None
    data["nodes"][1]["instance_id"] = ""
    with pytest.raises(TopologyError, match=r"nodes\[1\] field 'instance_id'"):
        Topology.from_dict(data)


def test_plugin_flag_reads_json_values_and_keeps_other_text() -> None:
    ref = parse_plugin_flag(
        'keras:backend=jax,mesh_shape=[1,2],axis_names=["batch", "model"],'
        'layout_map={".*a,b/kernel": [null, "model"]}'
    )
    assert ref.name == "keras"
    assert ref.options == {
        "backend": "jax",
        "mesh_shape": [1, 2],
        "axis_names": ["batch", "model"],
        "layout_map": {".*a,b/kernel": [None, "model"]},  # the comma in quotes stayed
    }
    assert parse_plugin_flag("torch:init_timeout=2.5").options == {"init_timeout": 2.5}
    for bad in ("jax:init_timeout", "", "9x", "jax:=3"):
        with pytest.raises(PluginFlagError) as err:
            parse_plugin_flag(bad)
        assert isinstance(err.value, UsageError)  # the launcher's exit 2
        assert "NAME[:key=value,...]" in err.value.expected


def test_the_table_is_what_from_name_builds() -> None:
    assert set(PLUGINS) == {"jax", "keras", "torch"}
    torch = from_name("torch", {"backend": "gloo"})
    assert getattr(torch, "backend", None) == "gloo"
    keras = from_name(
        "keras",
        {"mesh_shape": [2], "axis_names": ["model"], "layout_map": {".*kernel": ["", "model"]}},
    )
    assert getattr(keras, "layout_map", None) == {".*kernel": [None, "model"]}


def test_validate_plugins_names_the_position() -> None:
    refs = [parse_plugin_flag("jax"), parse_plugin_flag("torch:backend=ucc")]
    with pytest.raises(PluginOptionError) as err:
        validate_plugins(refs)
    assert (err.value.index, err.value.field, err.value.value) == (1, "options.backend", "ucc")
    with pytest.raises(PluginOptionError, match="listed twice") as twice:
        validate_plugins([parse_plugin_flag("jax"), parse_plugin_flag("jax")])
    assert twice.value.index == 1


def test_exit_code_meanings() -> None:
    assert exitcodes.describe(exitcodes.SETUP_FAILED) == "topology or plugin set-up failed"
    assert exitcodes.describe(-9) == "killed by signal SIGKILL"
    assert exitcodes.describe(None).startswith("no exit code")
