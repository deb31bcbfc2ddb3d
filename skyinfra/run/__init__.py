"""`skyinfra run`, in named modules: ``ignore`` (what is not copied to the nodes), ``session``
(the run itself, step by step), ``report`` (outcomes, summary.json, the printed report).
Readiness is a transport concern: ``skyinfra.transport.readiness``.

The names below are re-exported so ``from skyinfra.run import ...`` keeps working for now;
new code imports from the modules themselves.
"""

from skyinfra.run.ignore import make_ignore, read_ignore_patterns
from skyinfra.run.report import (
    NodeOutcome,
    RunReport,
    describe_exit,
    print_report,
    raise_for_failure,
)
from skyinfra.run.session import run_on_cluster
from skyinfra.transport.readiness import check_readiness, wait_until_ready

__all__ = [
    "NodeOutcome",
    "RunReport",
    "check_readiness",
    "describe_exit",
    "make_ignore",
    "print_report",
    "raise_for_failure",
    "read_ignore_patterns",
    "run_on_cluster",
    "wait_until_ready",
]
