"""Warm torch DDP jobs in a row on one local cluster (issue 48; not part of `make bench`).

A torch standby imports torch and torch._dynamo before its job. A gloo group destroyed with
the GIL held, after the job's DDP outlived destroy_process_group(), hung such a worker at
its end (plugins/torch.py, keep_process_groups). This runs examples/torchrun_ddp.py, the
most prone shape (DDP a function's local, the group destroyed before it goes), as `-m` on 2
nodes of 2 workers, JOBS times, each on the standbys, and says how each job ended.

    tests/loopback-only.sh .venv/bin/python tests/bench/torch_warm_stress.py [JOBS]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

from common import REPO, VENV_BIN, base_env, cli, project

JOB_TIMEOUT_S = 120  # a hung worker: its job never ends on its own


def main(jobs: int) -> int:
    env = base_env()
    ended = []
    with project(2, ("torch",)) as root:
        with (root / "skyinfra.toml").open("a") as spec:
            spec.write("procs_per_node = 2\n")
        shutil.copytree(REPO / "examples", root / "examples")
        cli(["up", "--yes"], root, env)
        nodes = root / ".skyinfra" / "clusters" / "bench" / "nodes"
        try:
            for n in range(jobs):
                until = time.monotonic() + 300
                while not all(
                    list((nodes / f"node-{i}" / "standby").glob(f"w{s}-*.sock"))
                    for i in (0, 1)
                    for s in (0, 1)
                ):
                    if time.monotonic() > until:
                        raise SystemExit("the standbys never became ready")
                    time.sleep(0.2)
                argv = [str(VENV_BIN / "skyinfra"), "run", "-m", "examples.torchrun_ddp"]
                started = time.monotonic()
                try:
                    proc = subprocess.run(
                        argv, cwd=root, env=env, capture_output=True, timeout=JOB_TIMEOUT_S
                    )
                    how = f"exit {proc.returncode}"
                except subprocess.TimeoutExpired:  # `down` ends it
                    ended.append(f"hung (no end in {JOB_TIMEOUT_S} s)")
                    print(f"job {n + 1}: {ended[-1]}")
                    break
                runs = root / ".skyinfra" / "clusters" / "bench" / "runs"
                job = json.loads((max(runs.iterdir()) / "summary.json").read_text())["run_id"]
                starts = [
                    w["start"]
                    for i in (0, 1)
                    for w in json.loads(
                        (nodes / f"node-{i}" / "runs" / job / "timeline.json").read_text()
                    )["attempts"][-1]["workers"]
                ]
                ended.append(how)
                print(f"job {n + 1}: {how} in {time.monotonic() - started:.1f} s, {starts}")
        finally:
            cli(["down", "--yes"], root, env)
    print(f"{sum(e == 'exit 0' for e in ended)} of {len(ended)} warm jobs ended with exit 0")
    return 0 if all(e == "exit 0" for e in ended) else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
