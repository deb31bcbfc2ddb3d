"""`make demo`: a 2-node local cluster, Keras-on-JAX digits on both nodes, then tear down.

Runs from the current directory, which must hold ``examples/keras_digits.py`` (the
repository root: ``make demo`` runs it there; an installed skyinfra ships no examples). Uses its
own workspace folder (``./.skyinfra/demo-clusters``) so it never touches a user's cluster, and
brings the cluster down also when the run fails.
"""

from __future__ import annotations

import sys
from pathlib import Path

from skyinfra import exitcodes, lifecycle
from skyinfra.errors import SkyinfraError
from skyinfra.run.launch import ClusterNodes, JobLaunch
from skyinfra.run.report import print_report, raise_for_failure, worker_results
from skyinfra.run.session import run_on_cluster
from skyinfra.spec import validate_spec
from skyinfra.workspace import Workspace

DEMO_DIR = Path(".skyinfra") / "demo-clusters"
ENTRY_FILE = "examples/keras_digits.py"
ENTRY = f"{ENTRY_FILE}:main"


def say(line: str) -> None:
    print(line, flush=True)


def _its_own(_changes: object) -> bool:
    """The demo replaces or destroys only its own cluster, in its own folder: no question."""
    return True


def demo() -> int:
    src = Path.cwd()
    if not (src / ENTRY_FILE).is_file():
        print(
            f"[demo] error: {ENTRY_FILE} is not in {src}; run the demo from the repository "
            "root (`make demo`)",
            file=sys.stderr,
        )
        return 2
    spec = validate_spec({"name": "demo", "nodes": 2, "plugins": ["jax", "keras:backend=jax"]})
    ws = Workspace(src / DEMO_DIR / spec.name)
    print(f"[demo] bringing up {spec.nodes} local nodes in {ws.path}", flush=True)
    try:
        _, topology = lifecycle.up(spec, ws, print, confirm=_its_own)
        report = run_on_cluster(
            JobLaunch(entry=ENTRY, src=src, copy_cache=ws.copy_cache_file),
            ClusterNodes(
                lifecycle.transport_for(ws, topology), topology, ws.topology_file, ws.runs_dir
            ),
            echo=say,
        )
        print_report(report, say, prefix="[demo]")
        raise_for_failure(report)
        values = [w["value"] for o in report.outcomes.values() for w in worker_results(o)]
        for value in values:
            print(
                f"[demo] node-{value['node']}: accuracy {value['accuracy']:.4f} "
                f"on held-out digits, weights sha256 {value['weights_sha256'][:16]}..."
            )
        same = len(values) == spec.nodes and len({v["weights_sha256"] for v in values}) == 1
        print(f"[demo] final weights identical on all nodes: {'yes' if same else 'NO'}")
        return exitcodes.OK if same else exitcodes.ERROR
    except SkyinfraError as err:
        print(f"[demo] error: {err}", file=sys.stderr)
        return err.exit_code
    finally:
        if ws.exists():
            print("[demo] bringing the cluster down", flush=True)
            try:
                lifecycle.down(ws, print, confirm=_its_own)
            except SkyinfraError as err:
                print(f"[demo] error during down: {err}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(demo())
