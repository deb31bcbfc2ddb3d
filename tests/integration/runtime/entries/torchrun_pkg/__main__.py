"""`-m torchrun_pkg` runs this, as `python -m` runs a package's __main__."""

import sys

print(f"PACKAGE MAIN {__name__} args={sys.argv[1:]}")
