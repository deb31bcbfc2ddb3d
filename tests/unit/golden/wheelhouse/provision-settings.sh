# provision.sh's settings (infra/scripts/provision.sh says what each one is).
STATE_DIR=/var/lib/skyinfra
SCRIPT_DIR=/opt/skyinfra
NODE_DIR=/opt/skyinfra/node
SSH_USER=ubuntu
PYTHON=python3
WHEEL_URL=https://bucket.s3.us-east-1.amazonaws.com/w/skyinfra_runtime-0.1.0-py3-none-any.whl
WHEEL_REGION=us-east-1
WHEEL_SHA256=abababababababababababababababababababababababababababababababab
WHEEL_FILENAME=skyinfra_runtime-0.1.0-py3-none-any.whl
UV_VERSION=''
WHEELHOUSE_URL=https://skyinfra-staging-1-us-east-1.s3.us-east-1.amazonaws.com/_wheelhouse/k/index.json
WHEELHOUSE_SHA256=cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc
BOOTSTRAP_ARGS=(
  --find-links /opt/skyinfra/wheelhouse
  --package 'jax[cuda12]'
  --check-topology /etc/skyinfra/topology.json --node-index 1
)
