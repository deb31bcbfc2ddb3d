# Rendered by skyinfra from the cluster spec of "demo".
cluster_name    = "demo"
node_count      = 2
base_address    = "127.0.0.2"
head_port       = 29600
node_root       = "/srv/skyinfra/demo/nodes"
python          = "/opt/python/bin/python3"
wheel_path      = "/cache/wheels/skyinfra_runtime-0.1.0-py3-none-any.whl"
wheel_sha256    = "abababababababababababababababababababababababababababababababab"
python_packages = ["numpy>=1.26", "jax[cpu]"]
