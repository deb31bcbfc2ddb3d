"""`skyinfra verify`'s built-in checks: testinfra test modules, run on every node in this
order (nodes, rendezvous, collective, accelerators), then the project's own verify/test_*.py.
Each asks for ``node`` (its index), ``host`` (testinfra) and ``cluster`` (the VerifyContext)."""
