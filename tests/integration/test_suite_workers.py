"""`make test`'s workers: pytest-xdist starts each with tests/loopback-only.sh as its
interpreter, so each has a network namespace of its own holding only loopback. Two local
clusters on 127.0.0.2:29500 in two workers then never meet; this proves the isolation holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

PROBE = """
import os
from pathlib import Path

def test_record_my_network():
    out = Path(os.environ["NETNS_OUT"]) / os.environ["PYTEST_XDIST_WORKER"]
    dev = Path("/proc/self/net/dev").read_text().splitlines()[2:]  # this process's namespace
    links = " ".join(sorted(line.split(":")[0].strip() for line in dev))
    out.write_text(os.readlink("/proc/self/ns/net") + "\\n" + links)
"""


def test_each_worker_has_a_loopback_only_network_namespace_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    out = tmp_path / "out"
    out.mkdir()
    worker_python = f"{REPO_ROOT / 'tests' / 'loopback-only.sh'} {sys.executable}"
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
            "--dist", "each", "--tx", f"2*popen//python={worker_python}",
            str(tmp_path / "test_probe.py"),
        ],
        cwd=tmp_path, env={**os.environ, "NETNS_OUT": str(out)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = {p.name: p.read_text().splitlines() for p in out.iterdir()}
    assert sorted(seen) == ["gw0", "gw1"], seen
    namespaces = {lines[0] for lines in seen.values()}
    assert len(namespaces) == 2, seen  # one each
    assert os.readlink("/proc/self/ns/net") not in namespaces  # neither is this test's own
    assert all(lines[1] == "lo" for lines in seen.values()), seen  # loopback, nothing else


SCHEDULE_PROBE = """
import os
from pathlib import Path

def test_{name}_{i}():
    with open(os.environ["ORDER_OUT"], "a") as out:
        out.write("{name} " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


def test_files_go_to_the_workers_longest_first_each_whole_on_one_worker(tmp_path: Path) -> None:
    """tests/support/schedule.py: by the recorded seconds, not the collection order, and a
    file that is not in the record counts by its number of tests."""
    for name, tests in (("a_short", 3), ("b_long", 2), ("c_middle", 2), ("d_new", 40)):
        (tmp_path / f"test_{name}.py").write_text(
            "".join(SCHEDULE_PROBE.format(name=name, i=i) for i in range(tests))
        )
    (tmp_path / "conftest.py").write_text(
        "from tests.support.schedule import pytest_xdist_make_scheduler  # noqa: F401\n"
    )
    record = tmp_path / "durations.json"
    record.write_text('{"test_a_short.py": 1.0, "test_b_long.py": 500.0, "test_c_middle.py": 9}')
    order = tmp_path / "order"

    def run(workers: int) -> list[tuple[str, str]]:
        order.write_text("")
        proc = subprocess.run(
            [
                sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
                "-p", "no:cacheprovider", "--dist", "loadfile", "-n", str(workers),
            ],
            cwd=tmp_path,
            env={
                **{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"},
                "ORDER_OUT": str(order),
                "SKYINFRA_TEST_DURATIONS": str(record),
                "PYTHONPATH": str(REPO_ROOT),
            },
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return [(line.split()[0], line.split()[1]) for line in order.read_text().splitlines()]

    # One worker: the files in the order they were handed out (d_new: 40 tests x 2 s = 80 s).
    files = [name for name, _ in run(1)]
    assert sorted(set(files), key=files.index) == ["b_long", "d_new", "c_middle", "a_short"]
    # Two workers: each file's tests all on one worker (its module fixtures made once).
    ran = run(2)
    assert len(ran) == 47
    for name in ("a_short", "b_long", "c_middle", "d_new"):
        assert len({worker for file, worker in ran if file == name}) == 1, ran
