"""jax, keras and torch plugins across real processes on loopback (CPU: gloo everywhere)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.integration.runtime.launch_harness import (
    ENTRIES,
    launch_argv,
    launcher_env,
    run_nodes,
    topology,
)

JAX = {"name": "jax", "options": {"init_timeout": 30}}
KERAS = {"name": "keras", "options": {"backend": "jax"}}
TORCH = {"name": "torch", "options": {"init_timeout": 30}}


def test_jax_two_processes_sum_across_processes(tmp_path: Path) -> None:
    runs = run_nodes(tmp_path, topology(nodes=2, plugins=[JAX]), f"{ENTRIES}/jax_sum.py:main")
    for run in runs:
        assert run.returncode == 0, run.stderr
        (value,) = run.values()
        assert value["process_count"] == 2
        assert value["process_index"] == run.node
        assert value["sum"] == 3.0  # 1 + 2
        assert value["collectives"] == "gloo"
    # Set-up and teardown are announced in order: jax up before the user code, down after.
    assert "plugin jax ready" in runs[0].stderr
    assert "plugin jax torn down" in runs[0].stderr


def test_every_nodes_next_worker_loads_what_its_node_compiled(tmp_path: Path) -> None:
    # JAX writes its persistent cache from process 0 only (it expects a folder every host
    # shares); each node's folder is its own, so node 1 compiled everything again each run.
    topo = {**topology(nodes=2, plugins=[JAX]), "warm_workers": False}
    node_env = {i: {"SKYINFRA_NODE_DIR": str(tmp_path / f"node-{i}")} for i in (0, 1)}
    for attempt in ("first", "second"):
        runs = run_nodes(tmp_path, topo, f"{ENTRIES}/jax_sum.py:cache_use", node_env=node_env)
        for run in runs:
            assert run.returncode == 0, run.stderr
            (counts,) = run.values()
            assert counts["requests"] >= 1, counts
            expected = 0 if attempt == "first" else counts["requests"]
            assert counts["hits"] == expected, (attempt, run.node, counts)
    for i in (0, 1):
        assert any((tmp_path / f"node-{i}" / "cache" / "jax").iterdir()), i


def test_jax_peer_that_never_arrives_fails_within_the_timeout(tmp_path: Path) -> None:
    # The option's 3 s ends it: with the default (600 s) the harness's deadline (120 s) would
    # stop the run first, and run_nodes raises TimeoutExpired.
    topo = topology(nodes=2, plugins=[{"name": "jax", "options": {"init_timeout": 3}}])
    (run,) = run_nodes(tmp_path, topo, f"{ENTRIES}/jax_sum.py:main", nodes=[1])
    assert run.returncode == 3, run.stderr
    assert "set-up of plugin 'jax'" in run.stderr
    assert "never reached the rendezvous" in run.stderr


def test_torch_peer_that_never_arrives_fails_within_the_timeout(tmp_path: Path) -> None:
    topo = topology(nodes=2, plugins=[{"name": "torch", "options": {"init_timeout": 3}}])
    (run,) = run_nodes(tmp_path, topo, f"{ENTRIES}/torch_ddp.py:ranks", nodes=[0])
    assert run.returncode == 3, run.stderr
    assert "set-up failed: torch init_process_group('gloo') failed for rank 0 of 2" in run.stderr


def test_keras_jax_data_parallel_ends_with_identical_weights(tmp_path: Path) -> None:
    topo = topology(nodes=2, plugins=[JAX, KERAS])
    runs = run_nodes(tmp_path, topo, f"{ENTRIES}/keras_fit.py:main")
    values = []
    for run in runs:
        assert run.returncode == 0, run.stderr
        (value,) = run.values()
        values.append(value)
    assert [v["rows"] for v in values] == [128, 128]  # shard(drop_last=True) of 256 rows
    assert values[0]["initial"] == values[1]["initial"]
    assert values[0]["final"] == values[1]["final"]
    assert values[0]["final"] != values[0]["initial"]  # training moved the weights
    # Teardown runs in reverse order of set-up.
    err = runs[0].stderr
    assert err.index("plugin jax ready") < err.index("plugin keras ready")
    assert err.index("plugin keras torn down") < err.index("plugin jax torn down")


def test_keras_jax_without_rng_sync_does_not_agree(tmp_path: Path) -> None:
    """The control: the same DataParallel set up by hand, without initialize_rng().

    Each process draws its own initial weights; JAX refuses to build the replicated global
    variables from values that differ between processes. This is what the keras plugin's
    initialize_rng() prevents (and what Skyward's keras plugin never tested).
    """
    topo = topology(nodes=2, plugins=[JAX])
    runs = run_nodes(
        tmp_path, topo, f"{ENTRIES}/keras_fit.py:without_rng_sync", env={"KERAS_BACKEND": "jax"}
    )
    assert any(run.returncode == 1 for run in runs)
    assert any("is not the same on each process" in run.stderr for run in runs)


def test_keras_imported_with_another_backend_is_a_clear_setup_error(tmp_path: Path) -> None:
    # The entry itself is only loaded after set-up, so a module-level `import keras` there is
    # fine; what the plugin cannot fix is keras imported earlier, here by sitecustomize (with
    # the numpy backend: any backend but the plugin's will do, and numpy's imports no torch,
    # 2.5 s of CPU less in each process that starts with it).
    script = tmp_path / "entry.py"
    script.write_text("def main():\n    return 1\n")
    sitecustomize = tmp_path / "site"
    sitecustomize.mkdir()
    (sitecustomize / "sitecustomize.py").write_text("import keras\n")
    topo = topology(nodes=1, plugins=[KERAS])
    (run,) = run_nodes(
        tmp_path,
        topo,
        f"{script}:main",
        env={"PYTHONPATH": str(sitecustomize), "KERAS_BACKEND": "numpy"},
    )
    assert run.returncode == 3, run.stderr
    assert "keras was already imported with backend 'numpy'" in run.stderr


def test_torch_ddp_two_nodes_identical_weights(tmp_path: Path) -> None:
    runs = run_nodes(
        tmp_path, topology(nodes=2, plugins=[TORCH]), f"{ENTRIES}/torch_ddp.py:ddp_steps"
    )
    values = []
    for run in runs:
        assert run.returncode == 0, run.stderr
        (value,) = run.values()
        values.append(value)
    assert [v["rank"] for v in values] == [0, 1]
    assert [v["rows"] for v in values] == [32, 32]
    assert values[0]["weights"] == values[1]["weights"]


def test_torch_two_nodes_by_two_processes_is_world_size_4(tmp_path: Path) -> None:
    topo = topology(nodes=2, plugins=[TORCH], procs_per_node=2)
    runs = run_nodes(tmp_path, topo, f"{ENTRIES}/torch_ddp.py:ranks")
    seen = []
    for run in runs:
        assert run.returncode == 0, run.stderr
        seen.extend(run.values())
    port = topo["head_port"] + 1  # torch rendezvous: the port after jax's
    assert sorted((v["NODE_RANK"], v["LOCAL_RANK"], v["RANK"], v["dist_rank"]) for v in seen) == [
        (0, 0, 0, 0),
        (0, 1, 1, 1),
        (1, 0, 2, 2),
        (1, 1, 3, 3),
    ]
    assert {v["WORLD_SIZE"] for v in seen} == {4}
    assert {v["dist_world_size"] for v in seen} == {4}
    assert {v["LOCAL_WORLD_SIZE"] for v in seen} == {2}
    assert {v["MASTER_PORT"] for v in seen} == {port}
    assert {v["backend"] for v in seen} == {"gloo"}


def test_failed_jax_process_exits_without_waiting_in_the_shutdown_barrier(
    tmp_path: Path,
) -> None:
    """jax's own atexit hook calls shutdown(), a barrier: a failed process must not wait in it
    for a peer that is still busy, or `skyinfra run` could not report the failure."""
    topo = topology(nodes=2, plugins=[JAX])
    topo_file = tmp_path / "topology.json"
    topo_file.write_text(json.dumps(topo))
    entry = f"{ENTRIES}/basics.py:fail_on_node_1_after_setup"
    # No run directory: the launchers' scratch goes to TMPDIR, which the head's SIGKILL below
    # leaves behind (here, not in the machine's /tmp).
    env = launcher_env(TMPDIR=str(tmp_path))
    head = subprocess.Popen(
        launch_argv("--topology", str(topo_file), "--node", "0", entry),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        failed = subprocess.run(
            launch_argv("--topology", str(topo_file), "--node", "1", entry),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,  # the barrier would wait 300 s (jax's default shutdown timeout)
        )
        assert failed.returncode == 1, failed.stderr
        assert "RuntimeError: node 1 gives up after set-up" in failed.stderr
        assert head.poll() is None  # the head is still in the user's code
    finally:
        head.kill()
        head.wait()


def test_keras_model_parallel_layout_splits_a_kernel_across_processes(tmp_path: Path) -> None:
    # keras 3 matches layout-map keys with re.fullmatch against the variable path
    # ("sequential/wide/kernel"), hence the leading ".*".
    keras_mp = {
        "name": "keras",
        "options": {
            "backend": "jax",
            "mesh_shape": [1, 2],
            "axis_names": ["batch", "model"],
            "layout_map": {".*wide/kernel": [None, "model"]},
        },
    }
    runs = run_nodes(
        tmp_path,
        topology(nodes=2, plugins=[JAX, keras_mp]),
        f"{ENTRIES}/keras_model_parallel.py:main",
    )
    values = []
    for run in runs:
        assert run.returncode == 0, run.stderr
        (value,) = run.values()
        values.append(value)
    for value in values:
        assert value["distribution"] == "ModelParallel"
        assert value["kernel_spec"] == [None, "model"]
        assert value["global_shape"] == [8, 4]
        assert value["local_shard_shape"] == [8, 2]  # half of the columns on each process
    assert values[0]["kernel_sum"] == values[1]["kernel_sum"]


def test_keras_backup_of_a_model_split_across_processes_is_refused_before_the_first_step(
    tmp_path: Path,
) -> None:
    keras_mp = {
        "name": "keras",
        "options": {
            "backend": "jax",
            "mesh_shape": [1, 2],
            "axis_names": ["batch", "model"],
            "layout_map": {".*wide/kernel": [None, "model"]},
        },
    }
    runs = run_nodes(
        tmp_path,
        topology(nodes=2, plugins=[JAX, keras_mp]),
        f"{ENTRIES}/keras_model_parallel.py:with_backup",
    )
    for run in runs:
        assert run.returncode == 0, run.stderr
        (value,) = run.values()
        assert value["steps"] == 0, value
        assert "split across processes (ModelParallel: sequential/wide/kernel)" in str(
            value["refused"]
        ), value
        assert "use DataParallel" in str(value["refused"])


def run_exit_probe(tmp_path: Path, plugin: dict[str, Any], function: str) -> tuple[Path, list[Any]]:
    """One node's worker runs entries/exit_work.py's ``function`` with ``plugin``; its exit
    did what an exit must: the atexit hook ran, the non-daemon thread was joined, and the
    file it never closed was flushed (by the worker: the interpreter's own teardown left it
    empty). The probe's folder and the worker's value."""
    out = tmp_path / "probe"
    out.mkdir()
    (run,) = run_nodes(
        tmp_path,
        topology(nodes=1, plugins=[plugin]),
        f"{ENTRIES}/exit_work.py:{function}",
        env={"EXIT_PROBE_DIR": str(out)},
    )
    assert run.returncode == 0, run.stderr
    assert (out / "atexit").read_text() == "ran"
    assert (out / "thread").read_text() == "joined"
    assert (out / "never-closed.txt").read_text() == "buffered, never closed\n"
    return out, run.values()


def test_torch_worker_ends_before_the_interpreter_tears_down_gloo(tmp_path: Path) -> None:
    # torch 2.13: a process group that outlives destroy_process_group() (DDP keeps it) is
    # destroyed in the interpreter's teardown, and one of gloo's threads can then abort the
    # process ("terminate called without an active exception", SIGABRT): a job that finished
    # failed, 1 process in 10 on this VM. The worker ends first, after what an exit must do.
    out, values = run_exit_probe(tmp_path, TORCH, "leaves_work_for_the_exit")
    assert values == [0]
    seen = (out / "teardown").read_text() if (out / "teardown").exists() else None
    assert seen is None, f"the interpreter tore down with {seen} gloo threads running"


def test_a_jax_worker_skips_the_interpreters_teardown_after_what_an_exit_must_do(
    tmp_path: Path,
) -> None:
    # A process that loaded XLA spent about 1 s in the interpreter's teardown (1.1 of the 1.2
    # s from a Keras entry's return to its launcher's exit, on 2 cores), at the end of every
    # jax job, and a file the entry left open lost what it had buffered. The worker now
    # leaves once the atexit hooks and threads are done, and flushes such files itself.
    out, values = run_exit_probe(tmp_path, JAX, "jax_leaves_work_for_the_exit")
    assert values == [16.0]
    assert not (out / "teardown").exists(), "the interpreter tore down"


def test_a_failed_torch_barrier_destroys_the_group_before_the_worker_ends(tmp_path: Path) -> None:
    # Node 1 is gone right after its init_process_group returned, so node 0's barrier after
    # its own init fails. Node 0's group exists by then: the plugin's teardown must still
    # destroy it, and the worker end before the interpreter's teardown (a group left to that
    # teardown can abort the process, SIGABRT, in place of the set-up failure's exit code).
    gone = {"PYTHONPATH": str(ENTRIES / "gone_after_init")}
    runs = run_nodes(
        tmp_path,
        topology(nodes=2, plugins=[TORCH]),
        f"{ENTRIES}/torch_ddp.py:started",
        node_env={1: gone},
    )
    node_0 = runs[0]
    assert node_0.returncode == 3, node_0.stderr
    err = node_0.stderr
    assert "set-up failed: torch barrier after init_process_group('gloo') failed" in err, err
    assert err.index("set-up failed") < err.index("plugin torch torn down"), err


def test_no_torch_rank_starts_its_function_before_every_rank_finished_its_init(
    tmp_path: Path,
) -> None:
    # A rank whose function ended at once closed its connections while a slower peer was still
    # connecting, and the peer's init failed ("connectFullMesh failed ... Connection closed by
    # peer"). Node 1's init_process_group returns 3 s late here: node 0 must wait for it.
    returned = tmp_path / "node-1-init-returned"
    slow = {"PYTHONPATH": str(ENTRIES / "slow_init"), "INIT_RETURNED_FILE": str(returned)}
    runs = run_nodes(
        tmp_path,
        topology(nodes=2, plugins=[TORCH]),
        f"{ENTRIES}/torch_ddp.py:started",
        node_env={1: slow},
    )
    for run in runs:
        assert run.returncode == 0, run.stderr
    (node_0,) = runs[0].values()
    assert node_0["rank"] == 0
    assert node_0["started"] >= float(returned.read_text())
