"""`skyinfra run`, in named modules: ``ignore`` (what is not copied to the nodes), ``session``
(the run itself, step by step), ``report`` (outcomes, summary.json, the printed report).
Readiness is a transport concern: ``skyinfra.transport.readiness``.
"""
