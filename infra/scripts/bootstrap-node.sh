#!/usr/bin/env bash
# Node bootstrap, shared by both targets:
#   local target: run by the local-exec provisioner of infra/modules/local, once per node;
#   aws target:   run by cloud-init's runcmd with the wheel URL and the jax[cudaXX] extra.
#
# Usage:
#   bootstrap-node.sh --node-dir DIR --python PYTHON --wheel PATH_OR_URL
#                     [--inherit-site-packages] [--find-links URL]... [--package REQ]...
#   bootstrap-node.sh --remove --node-dir DIR
#
# Result: DIR/venv with skyinfra-runtime (and the packages) installed, DIR/work for the
# user's code, DIR/pids for process ids the transport records, DIR/.skyinfra-node as marker.
set -euo pipefail

node_dir="" python="" wheel="" inherit=0 remove=0
packages=() find_links=()

die() { echo "bootstrap-node: $*" >&2; exit 2; }

while [ "$#" -gt 0 ]; do
    case "$1" in
        --node-dir) node_dir="${2:?--node-dir needs a value}"; shift 2 ;;
        --python) python="${2:?--python needs a value}"; shift 2 ;;
        --wheel) wheel="${2:?--wheel needs a value}"; shift 2 ;;
        --package) packages+=("${2:?--package needs a value}"); shift 2 ;;
        --find-links) find_links+=(--find-links "${2:?--find-links needs a value}"); shift 2 ;;
        --inherit-site-packages) inherit=1; shift ;;
        --remove) remove=1; shift ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

[ -n "$node_dir" ] || die "--node-dir is required"
case "$node_dir" in /*) ;; *) die "--node-dir must be absolute, got '$node_dir'" ;; esac

if [ "$remove" = 1 ]; then
    [ -d "$node_dir" ] || exit 0
    [ -f "$node_dir/.skyinfra-node" ] || die "refusing to remove '$node_dir': no .skyinfra-node marker"
    # End what still runs on the node: every recorded process group, TERM then KILL.
    for f in "$node_dir"/pids/*.pid; do
        [ -f "$f" ] || continue
        pid="$(cat "$f")"
        kill -TERM -- "-$pid" 2>/dev/null || true
    done
    for f in "$node_dir"/pids/*.pid; do
        [ -f "$f" ] || continue
        pid="$(cat "$f")"
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            kill -0 -- "-$pid" 2>/dev/null || break
            sleep 0.5
        done
        kill -KILL -- "-$pid" 2>/dev/null || true
    done
    rm -rf -- "$node_dir"
    echo "bootstrap-node: removed $node_dir"
    exit 0
fi

[ -n "$python" ] || die "--python is required"
[ -n "$wheel" ] || die "--wheel is required"
command -v "$python" >/dev/null 2>&1 || die "--python '$python' is not an executable"

mkdir -p "$node_dir/work" "$node_dir/pids"
touch "$node_dir/.skyinfra-node"

"$python" -m venv --clear "$node_dir/venv"
venv_python="$node_dir/venv/bin/python"

# The wheel goes in before the inherited site-packages become visible: otherwise pip may
# find the operator's own skyinfra-runtime there and call the requirement satisfied.
"$venv_python" -m pip install --quiet --disable-pip-version-check --no-deps "$wheel"

if [ "$inherit" = 1 ]; then
    # A .pth file with plain paths appends the interpreter's site-packages *after* the
    # venv's own, so the node's runtime wheel wins while jax/keras/torch are shared.
    # Plain path lines (not `import site; site.addsitedir`) keep the operator's own .pth
    # files, such as editable-install finders, from running on the node.
    node_site="$("$venv_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    "$python" -c 'import site, sys; print("\n".join(p for p in site.getsitepackages() if p))' \
        > "$node_site/zz-skyinfra-inherited-site.pth"
fi

if [ "${#packages[@]}" -gt 0 ]; then
    "$venv_python" -m pip install --quiet --disable-pip-version-check "${find_links[@]}" "${packages[@]}"
fi
"$venv_python" -c 'import skyinfra_runtime' || die "skyinfra_runtime does not import in $node_dir/venv"
echo "bootstrap-node: ready $node_dir"
