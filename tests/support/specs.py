"""Spec files more than one test level uses."""

# Keras model parallelism written in skyinfra.toml (TOML has no null: "" is a replicated
# dimension), carried in topology.json as JSON, and applied by the runtime on both nodes.
MODEL_PARALLEL_SPEC = """
name = "mp"
nodes = 2
[[plugins]]
name = "jax"
options = { init_timeout = 60 }
[[plugins]]
name = "keras"
[plugins.options]
backend = "jax"
mesh_shape = [1, 2]
axis_names = ["batch", "model"]
layout_map = { ".*wide/kernel" = ["", "model"] }
"""
