"""Run with `-m torchrun_pkg.probe ARGS`: prints what `python -m` would show it."""

import json
import os
import sys

if __name__ == "__main__":
    print("PROBE " + json.dumps({"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd()}))
