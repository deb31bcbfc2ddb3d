"""What importing the runtime costs: every node process (agent, launcher, workers) and every
`skyinfra` command imports skyinfra_runtime."""

from __future__ import annotations

import json
import subprocess
import sys

# Loaded only when they are used: urllib.request with http.client (and ssl) is about 15 ms of
# start-up, needed only to ask the metadata service (skyinfra_runtime.spot.direct_opener).
LAZY = ("urllib.request", "http.client")


def test_importing_the_runtime_loads_no_http_client() -> None:
    code = (
        "import json, sys, skyinfra_runtime\n"
        f"print(json.dumps([m for m in {LAZY!r} if m in sys.modules]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
