#!/usr/bin/env bash
# `make test-cold`: the suite the way a fresh machine runs it. A fresh clone of HEAD (what is
# committed: no .venv, wheelhouse, bytecode or .pytest_cache), HOME an empty folder (no pip,
# uv or Terraform plugin caches), then .ci/run there: it builds everything itself and runs
# `make lint` and `make test`. Prints the whole run's seconds. The machine's system packages
# (tests/system-deps.sh) and Python stay as they are. SKYINFRA_COLD_KEEP=1 keeps the folder.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
base=$(mktemp -d "${TMPDIR:-/tmp}/skyinfra-cold.XXXXXX")
git clone -q --no-local "$repo" "$base/skyinfra"
mkdir "$base/home"
echo "test-cold: $(git -C "$base/skyinfra" log -1 --format='%h %s' | cut -c1-72)"
echo "test-cold: in $base, HOME=$base/home"
start=$(date +%s)
set +e
(
    cd "$base/skyinfra"
    env -u PIP_CACHE_DIR -u UV_CACHE_DIR -u XDG_CACHE_HOME -u TF_PLUGIN_CACHE_DIR \
        HOME="$base/home" bash .ci/run
)
rc=$?
set -e
echo "test-cold: .ci/run exited $rc after $(($(date +%s) - start)) s ($(nproc) cores)"
if [ "${SKYINFRA_COLD_KEEP:-0}" != 1 ]; then
    rm -rf "$base"
fi
exit "$rc"
