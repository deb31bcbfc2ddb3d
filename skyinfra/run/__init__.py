"""`skyinfra run`, in named modules: ``ignore`` (what is not copied to the nodes), ``session``
(the run itself, step by step), ``report`` (outcomes, summary.json, the printed report).
Readiness is a transport concern: ``skyinfra.transport.readiness``.
"""

# Run directories each node keeps (the newest, the current one included); 0 keeps all.
# Here, not in session.py, so that `run`'s help shows it without loading the session.
DEFAULT_KEEP_RUNS = 5
