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
