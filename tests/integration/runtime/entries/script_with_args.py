"""Run as a script: prints its arguments and the node it runs on."""

import sys

from skyinfra_runtime import instance_info

print(f"script node={instance_info().node} args={sys.argv[1:]}")
