"""What the ssh target's root module holds: its context, tfvars, the module's copy and, per
node, the small tree the first provisioner copies into the login user's home (the bootstrap
every target runs, and the script that marks the node enrolled)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skyinfra_runtime import ckptsync

from skyinfra import render, resources
from skyinfra.spec import ClusterSpec
from skyinfra.targets.ssh.contact import NODES_FOLDER, HostFacts
from skyinfra.targets.ssh.spec import SshSpec
from skyinfra.topology import Node, build_topology
from skyinfra.wheel import cache_root

# The root module's folder of per-node trees copied to the hosts (relative to the workspace).
STAGE_DIR = f"{render.SCRIPTS_DIR}/hosts"
ENROL = ".enrol"
READY_MARKER = ".skyinfra-ready"
# The node check bootstrap-node.sh runs last (beside it: --check-topology).
CHECK_SCRIPT = "scripts/check-node.py"
FAILED_MARKER = ".skyinfra-failed"
CHECKPOINT_SETTINGS = ckptsync.SETTINGS_FILE
# What Terraform's remote-exec runs on each host: the bootstrap every target runs, its output
# kept in .enrol/bootstrap.log (and, when it fails, its tail in the node's failed marker, which
# `up` and `status` show); then the host's GPUs, counted as the AWS node check counts them
# (nvidia-smi's list), and the ready marker.
ENROL_SCRIPT = """#!/usr/bin/env bash
# skyinfra's ssh target: enrol this host as a node. Usage: enrol.sh NODE_DIR BOOTSTRAP_ARGS...
set -uo pipefail
node_dir="$1"; shift
log="$node_dir/.enrol/bootstrap.log"
chmod 0755 "$node_dir/.enrol/uv"
rm -f "$node_dir/.skyinfra-failed" "$node_dir/.skyinfra-ready"
# The node's own environment, read by every command skyinfra runs there (node-env.sh): Keras
# keeps its settings in the node's folder, not in ~/.keras, which `down` would leave behind.
printf 'export KERAS_HOME=%q\\n' "$node_dir/.keras" > "$node_dir/node-env.sh"
. "$node_dir/node-env.sh"
if ! bash "$node_dir/.enrol/bootstrap-node.sh" --node-dir "$node_dir" "$@" > "$log" 2>&1; then
    cat "$log"
    { echo "the bootstrap failed on $(hostname) ($log):"; tail -n 15 "$log"; } \
        > "$node_dir/.skyinfra-failed"
    exit 2
fi
cat "$log"
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
echo "$gpus" > "$node_dir/gpus"
echo "ready $(date +%s)" >> "$node_dir/phases"
touch "$node_dir/.skyinfra-ready"
echo "skyinfra: enrolled $(hostname) as $node_dir ($("$node_dir/venv/bin/python" -V), $gpus GPU(s))"
"""

# Under skyinfra's cache: per runtime wheel and uv, a folder holding only those two (payload).
PAYLOAD_FOLDER = "ssh-payload"

TFVARS = (
    "cluster_name",
    "hosts",
    "user",
    "port",
    "private_key_path",
    "head_port",
    "python",
    "wheel_path",
    "wheel_sha256",
    "uv_path",
    "python_packages",
    "spare_hosts",
)


def payload(
    wheel: Path, wheel_sha256: str, uv: Path, cache: Path | None = None
) -> tuple[Path, Path]:
    """The wheel and uv as the hosts get them: (wheel, uv) in a folder of the cache holding
    only them, which one file provisioner copies to each host (one SSH connection for both,
    each costing the host's sshd and Terraform CPU). Hard links where the file system allows,
    else copies; made once per wheel and uv, then reused."""
    found = uv.resolve()
    st = found.stat()
    key = f"{wheel_sha256}\0{found}\0{st.st_size}\0{st.st_mtime_ns}"
    folder = (cache or cache_root()) / PAYLOAD_FOLDER / hashlib.sha256(key.encode()).hexdigest()
    made = (folder / wheel.name, folder / "uv")
    if folder.is_dir():
        return made
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for source, name in ((wheel, wheel.name), (found, "uv")):
        try:
            os.link(source, tmp / name)
        except OSError:  # another file system, or links not allowed
            shutil.copy2(source, tmp / name)
    try:
        tmp.rename(folder)  # whole or not at all; a concurrent `up` may have made it first
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return made


def host_lines(section: SshSpec, facts: Sequence[HostFacts], cluster: str) -> list[str]:
    """One line per enrolled host: what runs where (the root module's header; plan.md)."""
    return [
        f"node-{f.index}: {section.user}@{f.host}:{section.port} -> {f.node_dir(cluster)} "
        f"(venv made with uv from {section.python}, Python {f.python_version}; the "
        f"skyinfra-runtime wheel; key {f.host_key.split()[0]}; {gpu_words(f)})"
        for f in facts
    ]


def private_address(section: SshSpec, facts: HostFacts) -> str:
    """Where the other nodes reach node ``facts.index``: its ssh.private_addresses entry
    while it is on its host of ssh.hosts; a spare standing in for a lost host is reached on
    the address it is dialled on (spares list no private address)."""
    if facts.index < len(section.hosts) and section.hosts[facts.index] == facts.host:
        return section.private_address(facts.index)
    return facts.host


def gpu_words(facts: HostFacts) -> str:
    """What `up`, the root module's header and plan.md say of a host's GPUs."""
    if facts.accelerator is None:
        return "no GPU"
    return f"{facts.accelerator.count} x {facts.accelerator.type} GPU(s)"


def context(
    spec: ClusterSpec,
    facts: Sequence[HostFacts],
    *,
    wheel_path: Path,
    wheel_sha256: str,
    uv_path: str,
    spares: Sequence[str] = (),
) -> dict[str, Any]:
    """``spares``: the spare hosts left (listed, not enrolled until a host is lost)."""
    section = spec.section_as(SshSpec)
    return {
        "cluster_name": spec.name,
        "module_source": render.module_source("ssh"),
        "stage_dir": STAGE_DIR,
        "host_lines": host_lines(section, facts, spec.name),
        "enrol_topology": enrol_topology(spec, facts),
        "hosts": {
            f"node-{f.index}": {
                "index": f.index,
                "host": f.host,
                "private_address": private_address(section, f),
                "node_dir": f.node_dir(spec.name),
                "host_key": f.host_key,
                # nvidia-smi's count at first contact: the topology's accelerator.
                "gpus": f.gpus,
                "gpu_type": f.accelerator.type if f.accelerator else "",
            }
            for f in facts
        },
        "user": section.user,
        "port": section.port,
        "private_key_path": str(Path(section.key).expanduser().resolve()),
        "head_port": spec.head_port,
        "python": section.python,
        "wheel_path": str(wheel_path),
        "wheel_sha256": wheel_sha256,
        "uv_path": uv_path,
        "python_packages": list(spec.python_packages),
        "spare_hosts": list(spares),
        # Each node's checkpoints.json (ssh.checkpoints_url; no credential): "" without one.
        "checkpoint_settings": section.checkpoints.node_settings() if section.checkpoints else "",
    }


def enrol_topology(spec: ClusterSpec, facts: Sequence[HostFacts]) -> str:
    """The topology the node check reads at enrolment (check-node.py: the plugins'
        frameworks import on the host). The one the runtime reads comes from Terraform's outputs
        after `up`; both carry the GPUs first contact counted, which the node check holds the
    frameworks to (as on AWS)."""
    section = spec.section_as(SshSpec)
    topology = build_topology(
        spec,
        head_addr=private_address(section, facts[0]),
        nodes=[
            Node(f.index, f"node-{f.index}", private_address(section, f), f.host,
                 f"ssh-{spec.name}-{f.index}", f.accelerator)
            for f in facts
        ],
    )  # fmt: skip
    return json.dumps(topology.to_dict(), indent=2) + "\n"


def node_topology(topology: str, index: int) -> str:
    """The enrolment topology as node ``index`` gets it: every field, but of the nodes only
    its own (which the node check reads). The node's stage is hashed into its
    ``triggers_replace``: a spare standing in for another node must not replace this one."""
    data = json.loads(topology)
    data["nodes"] = [n for n in data.get("nodes") or [] if n.get("index") == index]
    return json.dumps(data, indent=2) + "\n"


def stage_files(
    cluster: str, indexes: Sequence[int], topology: str, checkpoint_settings: str = ""
) -> dict[str, str]:
    """Per node: scripts/hosts/node-<i>/.skyinfra/<cluster>/node-<i>/.enrol/ with the
    bootstrap, enrol.sh, the node check and its topology (its own node's); with
    ``checkpoint_settings``, the node's checkpoints.json beside .enrol/ (the runtime's
    ckptsync reads it there)."""
    out: dict[str, str] = {}
    for i in indexes:
        node = f"{STAGE_DIR}/node-{i}/{NODES_FOLDER}/{cluster}/node-{i}"
        if checkpoint_settings:
            out[f"{node}/{CHECKPOINT_SETTINGS}"] = checkpoint_settings
        base = f"{node}/{ENROL}"
        out[f"{base}/bootstrap-node.sh"] = resources.bootstrap_script()
        out[f"{base}/enrol.sh"] = ENROL_SCRIPT
        out[f"{base}/check-node.py"] = resources.read_text(CHECK_SCRIPT)
        out[f"{base}/topology.json"] = node_topology(topology, i)
    return out


def files(ctx: dict[str, Any]) -> dict[str, str]:
    """Everything the workspace holds for the cluster's Terraform."""
    tfvars = {name: ctx[name] for name in TFVARS}
    indexes = [h["index"] for h in ctx["hosts"].values()]
    return {
        **render.render_root("ssh", ctx),
        render.TFVARS_JSON: json.dumps(tfvars, indent=2) + "\n",
        **render.module_files("ssh"),
        **stage_files(
            ctx["cluster_name"], indexes, ctx["enrol_topology"], ctx["checkpoint_settings"]
        ),
    }
