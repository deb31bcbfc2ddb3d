"""The seeds' Keras example with the Python API: a 2-node local cluster opened in a `with`
block, the training function sent to both nodes, their results back as Python objects.

    .venv/bin/python examples/keras_api.py        # from the repository root

`keras_digits.main` is the training function `skyinfra run examples/keras_digits.py:main`
runs; here it travels by value (cloudpickle: this script's folder is not the project, the
directory the run copies). examples/keras_notebook.ipynb does the same from a notebook.
"""

from __future__ import annotations

from keras_digits import main as train

import skyinfra

if __name__ == "__main__":
    spec = {"name": "keras-api", "provider": "local", "nodes": 2}
    with skyinfra.Cluster(**spec, plugins=["jax", "keras:backend=jax"]) as cluster:
        results = cluster.run(train, epochs=8)  # one dict per worker, in rank order
    for result in results:
        print(result)
    assert len({r["weights_sha256"] for r in results}) == 1, "the nodes' weights differ"
