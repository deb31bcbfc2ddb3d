#!/usr/bin/env bash
# Node bootstrap, shared by both targets:
#   local target: run by the local-exec provisioner of infra/modules/local, once per node;
#   aws target:   run by cloud-init's runcmd with the wheel URL and the jax[cudaXX] extra.
#
# Usage:
#   bootstrap-node.sh --node-dir DIR --python PYTHON --wheel PATH_OR_URL
#                     [--inherit-site-packages] [--find-links URL]... [--package REQ]...
#                     [--uv UV] [--cache-dir DIR] [--phase-file FILE]
#                     [--check-topology FILE --node-index N] [--imds-standin ADDRESS]
#   bootstrap-node.sh --remove --node-dir DIR
#
# --imds-standin (local target): start the node's stand-in for EC2's metadata service on
# ADDRESS (skyinfra_runtime/imds_standin.py), which `skyinfra drill interrupt` sends a Spot
# interruption notice to; it lives as long as the node and ends it as --remove does.
#
# Result: DIR/venv with skyinfra-runtime (and the packages) installed, DIR/work for the
# user's code, DIR/pids for process ids the transport records, DIR/.skyinfra-node as marker.
# With --check-topology, check-node.py (beside this script) then checks that every framework
# the topology's plugins name imports and sees node N's GPUs; the bootstrap fails otherwise.
#
# Installer: uv (--uv, the binary; `uv venv` + `uv pip install` take well under a second
# where `python -m venv` + pip take 5-6 s) with --cache-dir as its cache, which nodes of one
# machine share; without a usable uv, pip, saying so in the log. --phase-file: each step
# appends "PHASE EPOCH_SECONDS" to it (AWS nodes: `skyinfra status` shows the last one).
#
# Every process of a node carries SKYINFRA_LOCAL_NODE_DIR=DIR in its environment (the
# bootstrap's own, and what the local transport starts), or SKYINFRA_NODE_DIR=DIR (what the
# runtime starts on any target: agents, launchers, workers, the standby keeper and its
# standbys, in sessions of their own). --remove ends all of them, whether or not DIR still
# exists, and the process groups recorded in DIR/pids/*.pid ("PID START", START being field 22
# of /proc/PID/stat), never a process that reused the pid of a stale pid file.
# A new bootstrap first ends what an earlier, interrupted one of the same DIR left running.
set -euo pipefail

node_dir="" python="" wheel="" inherit=0 remove=0 uv="" cache_dir="" phase_file=""
check_topology="" node_index="" imds_standin=""
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
        --uv) uv="${2?--uv needs a value}"; shift 2 ;;
        --cache-dir) cache_dir="${2:?--cache-dir needs a value}"; shift 2 ;;
        --phase-file) phase_file="${2:?--phase-file needs a value}"; shift 2 ;;
        --check-topology) check_topology="${2:?--check-topology needs a value}"; shift 2 ;;
        --node-index) node_index="${2:?--node-index needs a value}"; shift 2 ;;
        --imds-standin) imds_standin="${2:?--imds-standin needs a value}"; shift 2 ;;
        --remove) remove=1; shift ;;
        -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

[ -n "$node_dir" ] || die "--node-dir is required"
case "$node_dir" in /*) ;; *) die "--node-dir must be absolute, got '$node_dir'" ;; esac

# Sets REPLY to field $2 of /proc/$1/stat counted after the command name (in parentheses, and
# it may hold spaces): 1 the state, 2 the parent's pid, 20 the start time (field 22 of the
# whole line). Empty if the process is gone. Builtins only, no subshell: it runs for every pid
# file and every ancestor, several times a bootstrap (sed and cut were about 40 processes).
stat_field() {
    local line
    local -a fields
    REPLY=""
    { read -r line < "/proc/$1/stat"; } 2>/dev/null || return 0
    read -r -a fields <<< "${line##*) }"
    REPLY="${fields[$2 - 1]:-}"
}

# The recorded process groups that still exist and are still ours: a live process with the
# recorded pid but another start time reused a stale pid (a gone leader's group id cannot be
# reused while a member of the group lives, so such a group is still the one recorded).
recorded_groups() {
    local f pid start now
    for f in "$node_dir"/pids/*.pid; do
        [ -f "$f" ] || continue
        pid="" start=""
        read -r pid start < "$f" || true
        case "$pid" in '' | *[!0-9]*) continue ;; esac
        stat_field "$pid" 20
        now="$REPLY"
        [ -n "$now" ] && [ "$now" != "$start" ] && continue
        # A leader that ended but that no one reaped yet (an orphan where init is slow to
        # reap) is gone: kill -0 would still find its group; its children carry the mark.
        stat_field "$pid" 1
        [ "$REPLY" = Z ] && continue
        kill -0 -- "-$pid" 2>/dev/null && echo "$pid"
    done
    return 0
}

# Processes whose environment marks them as this node's, except this script and its callers.
marked_processes() {
    local spared=" " p=$$ f pid
    while [ -n "$p" ] && [ "$p" != 0 ]; do
        spared+="$p "
        stat_field "$p" 2
        p="$REPLY"
    done
    { grep -lzxF -e "SKYINFRA_LOCAL_NODE_DIR=$node_dir" -e "SKYINFRA_NODE_DIR=$node_dir" \
        /proc/[0-9]*/environ 2>/dev/null || true; } |
        while read -r f; do
            pid="${f#/proc/}"
            pid="${pid%/environ}"
            case "$spared" in *" $pid "*) ;; *) echo "$pid" ;; esac
        done
    return 0
}

# End every process of the node: TERM, up to 5 s, then KILL what a fresh look still finds.
# A process may start another while it is being ended (a launcher's SIGTERM handler asks for a
# standby keeper, a keeper starts a standby just before its KILL): each look TERMs the ones it
# has not signalled yet, and the KILLs repeat until a fresh look finds nothing.
end_node_processes() {
    local pid left termed=" "
    for _ in 1 2 3 4 5 6 7 8 9 10 11; do
        left=""
        for pid in $(recorded_groups); do
            left+="$pid "
            case "$termed" in *" -$pid "*) continue ;; esac
            kill -TERM -- "-$pid" 2>/dev/null || true
            termed+="-$pid "
        done
        for pid in $(marked_processes); do
            left+="$pid "
            case "$termed" in *" $pid "*) continue ;; esac
            kill -TERM "$pid" 2>/dev/null || true
            termed+="$pid "
        done
        [ -n "$left" ] || return 0
        sleep 0.5
    done
    local groups marked
    for _ in {1..50}; do
        groups="$(recorded_groups)" marked="$(marked_processes)"
        [ -n "$groups$marked" ] || return 0
        for pid in $groups; do kill -KILL -- "-$pid" 2>/dev/null || true; done
        for pid in $marked; do kill -KILL "$pid" 2>/dev/null || true; done
        sleep 0.1
    done
    return 0
}

if [ "$remove" = 1 ]; then
    end_node_processes
    [ -d "$node_dir" ] || exit 0
    if [ ! -f "$node_dir/.skyinfra-node" ]; then
        # An empty folder is what a bootstrap stopped before its first step leaves.
        rmdir -- "$node_dir" 2>/dev/null && exit 0
        [ -e "$node_dir" ] || exit 0 # another removal took it meanwhile
        die "refusing to remove '$node_dir': no .skyinfra-node marker"
    fi
    # Renamed beside itself first, in one step: the node is gone at once for whoever waits
    # on it (the destroy of its replacement, `up`) however long its venv's GBs take to
    # delete, and a second removal at the same time finds nothing left to do. Hidden, so no
    # glob of node folders finds it; `down` on the ssh target finishes one left behind.
    trash="$(dirname "$node_dir")/.$(basename "$node_dir").removing-$$-$RANDOM"
    if ! mv -- "$node_dir" "$trash" 2>/dev/null; then
        [ -e "$node_dir" ] || exit 0 # another removal took it first
        trash="$node_dir"
    fi
    for _ in 1 2 3; do
        rm -rf -- "$trash" 2>/dev/null && break
        sleep 0.5
    done
    [ ! -e "$trash" ] || die "could not remove '$trash'"
    echo "bootstrap-node: removed $node_dir"
    exit 0
fi

[ -n "$python" ] || die "--python is required"
[ -n "$wheel" ] || die "--wheel is required"
command -v "$python" >/dev/null 2>&1 || die "--python '$python' is not an executable"

end_node_processes
export SKYINFRA_LOCAL_NODE_DIR="$node_dir"
mkdir -p "$node_dir"
touch "$node_dir/.skyinfra-node"
mkdir -p "$node_dir/work" "$node_dir/pids"

# --- install steps: phase, venv, wheel, inherited site-packages, packages, check ---------

phase() {
    [ -z "$phase_file" ] || echo "$1 $(date +%s)" >> "$phase_file"
}

# uv when it runs here, else pip (and the log says which, and why not uv).
use_uv=0
if [ -n "$uv" ] && "$uv" --version >/dev/null 2>&1; then
    use_uv=1
    echo "bootstrap-node: installing with $("$uv" --version)"
    # uv's own settings only: never a uv.toml of the operator's, never a downloaded Python.
    export UV_NO_CONFIG=1 UV_PYTHON_DOWNLOADS=never
    [ -z "$cache_dir" ] || export UV_CACHE_DIR="$cache_dir"
else
    echo "bootstrap-node: uv not available (${uv:-no --uv given}); falling back to pip"
fi

phase venv
if [ "$use_uv" = 1 ]; then
    "$uv" venv --quiet --clear --python "$python" "$node_dir/venv"
else
    "$python" -m venv --clear "$node_dir/venv"
fi
venv_python="$node_dir/venv/bin/python"

install() {
    if [ "$use_uv" = 1 ]; then
        "$uv" pip install --quiet --python "$venv_python" "$@"
    else
        "$venv_python" -m pip install --quiet --disable-pip-version-check "$@"
    fi
}

# The wheel goes in before the inherited site-packages become visible: otherwise the
# installer may find the operator's own skyinfra-runtime there and call it satisfied.
phase wheel
install --no-deps "$wheel"

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
    case " ${packages[*]}" in *" jax["* | *" jax="* | *" jax "*) phase jax ;; *) phase python-packages ;; esac
    install "${find_links[@]}" "${packages[@]}"
fi
runtime_imports() {
    "$venv_python" -c 'import skyinfra_runtime' || die "skyinfra_runtime does not import in $node_dir/venv"
}
# With --imds-standin the stand-in's start below imports the runtime: each interpreter that
# imports it costs about 0.1 s of CPU, which on a shared machine every node pays again.
[ -n "$imds_standin" ] || runtime_imports

# The node is fit for the topology's plugins: frameworks import, GPUs are seen (check-node.py).
if [ -n "$check_topology" ]; then
    [ -n "$node_index" ] || die "--check-topology needs --node-index"
    "$venv_python" "$(dirname "${BASH_SOURCE[0]}")/check-node.py" "$check_topology" "$node_index" ||
        die "node check failed (check-node.py above says why): the node cannot run this cluster's plugins"
fi
if [ -n "$imds_standin" ]; then
    # Detached (its own session, no terminal, stdio to a file) so that Terraform's local-exec
    # does not wait for it; the node's mark in its environment lets --remove end it.
    rm -f "$node_dir/notice.json"
    setsid "$venv_python" -m skyinfra_runtime imds-standin --node-dir "$node_dir" \
        --listen "$imds_standin" --remove-script "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")" \
        < /dev/null >> "$node_dir/imds-standin.log" 2>&1 &
    standin=$!
    for _ in $(seq 1 100); do
        [ -f "$node_dir/notice.json" ] && break
        kill -0 "$standin" 2>/dev/null || break
        sleep 0.1
    done
    if [ ! -f "$node_dir/notice.json" ]; then
        # Why it did not start: no runtime at all stops the node; a runtime without the
        # stand-in (a stripped-down one, as the Terraform-layer tests install) leaves a node
        # that works, but that no Spot notice can be sent to.
        runtime_imports
        if "$venv_python" -c 'import skyinfra_runtime.imds_standin' 2>/dev/null; then
            die "the IMDS stand-in did not start (see $node_dir/imds-standin.log)"
        fi
        echo "bootstrap-node: this runtime has no IMDS stand-in; \`skyinfra drill\` cannot reach $node_dir"
    fi
fi
echo "bootstrap-node: ready $node_dir"
