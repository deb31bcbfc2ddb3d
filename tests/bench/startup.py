"""Figure 7: start-up of the command line, `skyinfra --help` beside a bare `import click`.

Every command pays this before doing anything. The goal (issue 22) is at most 3x the bare
interpreter with click: `--help` loads no target SDK (boto3, paramiko) and no engine.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from common import VENV_BIN, base_env

GOAL_HELP_OVER_CLICK = 3.0


def _wall(argv: Sequence[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, capture_output=True, check=True)
    return time.perf_counter() - started


def _ms(values: Sequence[float]) -> dict[str, Any]:
    """As common.stats, in milliseconds: these runs are too short for its 10 ms rounding."""
    ms = [v * 1000 for v in values]
    return {
        "median": round(statistics.median(ms), 1),
        "min": round(min(ms), 1),
        "max": round(max(ms), 1),
        "n": len(ms),
        "values": [round(v, 1) for v in ms],
    }


def startup(reps: int) -> dict[str, Any]:
    """Medians of `skyinfra --help` and `python -c "import click"`, interleaved so that a
    change in the machine's load falls on both alike (at least 10 runs each: they are short)."""
    env = base_env()
    runs = max(reps, 10)
    help_s: list[float] = []
    click_s: list[float] = []
    for _ in range(runs):
        help_s.append(_wall([str(VENV_BIN / "skyinfra"), "--help"], env))
        click_s.append(_wall([sys.executable, "-c", "import click"], env))
    ratio = statistics.median(help_s) / statistics.median(click_s)
    return {"help_ms": _ms(help_s), "import_click_ms": _ms(click_s), "ratio": round(ratio, 2)}


if __name__ == "__main__":
    import json

    print(json.dumps(startup(int(sys.argv[1]) if len(sys.argv) > 1 else 10), indent=2))
