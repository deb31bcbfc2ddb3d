"""What importing the runtime costs: every node process (agent, launcher, workers) and every
`skyinfra` command imports skyinfra_runtime."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Loaded only when they are used: urllib.request with http.client (and ssl) is about 15 ms of
# start-up, needed only to ask the metadata service (skyinfra_runtime.spot.direct_opener);
# http.client, ssl and xml.etree about 10 ms, needed only for a request to S3
# (skyinfra_runtime.s3).
LAZY = ("urllib.request", "http.client", "ssl", "xml.etree.ElementTree")


@pytest.mark.parametrize(
    "module",
    [
        "skyinfra_runtime",
        # the node's agent, supervisor and job commands (`skyinfra-runtime jobs|logs|supervise`)
        "skyinfra_runtime.jobs.commands",
        "skyinfra_runtime.launcher",
    ],
)
def test_importing_the_runtime_loads_no_http_client(module: str) -> None:
    code = (
        f"import json, sys, {module}\n"
        f"print(json.dumps([m for m in {LAZY!r} if m in sys.modules]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
