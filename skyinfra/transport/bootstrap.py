"""The node bootstrap as the operator reads it over SSH, whatever the target: the readiness
protocol (one probe script, one pure parser) and the node folder's env file.

provision.sh (cloud-init's runcmd on AWS, Terraform's provisioner on the ssh target) leaves
its outcome in two marker files: ``ready`` once the bootstrap finished, ``failed`` (the failing
line and command) when it did not. The probe script, run on the node in one SSH command,
prints what it finds as a first-line word and detail lines after it:

- ``ready``: the ready marker is there;
- ``failed`` + the failed marker's first :data:`DETAIL_CHARS` characters;
- ``cloud-init-error`` + cloud-init's status: cloud-init failed (perhaps before provision.sh);
- ``cloud-init-done`` + cloud-init's status: cloud-init finished, yet no marker;
- ``pending``: none of these (still booting or installing).

The bootstrap also appends ``PHASE EPOCH_SECONDS`` lines to ``phases`` beside the ready marker
(packages, uv, fetch, venv, wheel, jax, ready: cloud-init, provision.sh and bootstrap-node.sh
write them). With ``ready`` and ``pending`` the probe prints one more line,
``phase LAST FIRST_EPOCH LAST_EPOCH NOW_EPOCH`` (all on the node's clock), from which `status`
shows the current phase and how long it has run.

A status command (``cloud_init_status``: a command printing ``status: <state>``, cloud-init's
on AWS; None on the ssh target) is only asked when neither marker exists.
:func:`parse_probe_output` turns the output into a :class:`Readiness` whose detail says where
to look; it needs no node, so it is tested without sshd.
"""

from __future__ import annotations

import dataclasses
import posixpath
import shlex
from collections.abc import Sequence

from skyinfra.transport.base import Readiness

# Beside the ready marker: one "PHASE EPOCH_SECONDS" line per bootstrap phase.
PHASES_FILE = "phases"
# How much of the failed marker or of cloud-init's answer goes into a message.
DETAIL_CHARS = 600
# In the node folder: sourced before every process `run` starts on the node (ssh.py), when
# present (the AWS target's user data writes it: cloudinit.py).
NODE_ENV_FILE = "node-env.sh"


def node_shell_line(root: str, node: int, command: Sequence[str]) -> str:
    """The remote line `skyinfra ssh NODE -- CMD` runs: CMD (its words joined by spaces, as
    ssh does) in the node's folder ``root`` with the node's environment: its env file when
    the bootstrap wrote one, the venv first on PATH, SKYINFRA_NODE, SKYINFRA_NODE_DIR and
    SKYINFRA_SHARED_DIR."""
    venv = posixpath.join(root, "venv")
    env_file = shlex.quote(posixpath.join(root, NODE_ENV_FILE))
    exports = " ".join(
        f"{name}={shlex.quote(value)}"
        for name, value in {
            "VIRTUAL_ENV": venv,
            "SKYINFRA_NODE": str(node),
            "SKYINFRA_NODE_DIR": root,
            "SKYINFRA_SHARED_DIR": posixpath.join(root, "shared"),
        }.items()
    )
    return (
        f"cd {shlex.quote(root)} && if [ -r {env_file} ]; then . {env_file}; fi; "
        f'export PATH={shlex.quote(venv + "/bin")}:"$PATH" {exports}; ' + " ".join(command)
    )


def probe_script(ready_marker: str, failed_marker: str, cloud_init_status: str | None) -> str:
    """The shell script that prints the node's state (see the module docstring)."""
    ready = shlex.quote(ready_marker)
    failed = shlex.quote(failed_marker)
    phases = shlex.quote(posixpath.join(posixpath.dirname(ready_marker), PHASES_FILE))
    script = (
        # The last phase and the first one's start, on the node's clock.
        "say_phase() {\n"
        f"  [ -s {phases} ] || return 0\n"
        f"  first=$(head -n 1 {phases} | cut -d' ' -f2)\n"
        f'  echo "phase $(tail -n 1 {phases}) $first $(date +%s)"\n'
        "}\n"
        f"if [ -e {ready} ]; then echo ready; say_phase; exit 0; fi\n"
        f"if [ -e {failed} ]; then echo failed; head -c {DETAIL_CHARS} {failed}; exit 0; fi\n"
    )
    if cloud_init_status:
        program = shlex.split(cloud_init_status)[0]
        script += (
            f"if command -v {shlex.quote(program)} >/dev/null 2>&1; then\n"
            f"  s=$({cloud_init_status} 2>&1) || true\n"
            '  case "$s" in\n'
            '    *"status: error"*) echo cloud-init-error; echo "$s"; exit 0 ;;\n'
            # provision.sh may have written the marker just after the first look.
            f'    *"status: done"*) [ -e {ready} ] && echo ready || echo cloud-init-done\n'
            '      echo "$s"; exit 0 ;;\n'
            "  esac\n"
            "fi\n"
        )
    return script + "echo pending\nsay_phase\n"


def parse_probe_output(
    output: str, *, ready_marker: str, bootstrap_log: str, tail_command: str
) -> Readiness:
    """The node's readiness from what :func:`probe_script` printed.

    ``bootstrap_log`` is where the bootstrap's output is on the node and ``tail_command`` the
    command that shows it; failure details name both. Output the protocol does not know reads
    as pending.
    """
    state, _, rest = output.strip().partition("\n")
    if state in ("ready", "pending"):
        lines = rest.splitlines()
        phase_lines = [line for line in lines if line.startswith("phase ")]
        if phase_lines:
            found = parse_phase_line(phase_lines[-1])
            without = "\n".join(line for line in lines if not line.startswith("phase "))
            plain = parse_probe_output(
                f"{state}\n{without}",
                ready_marker=ready_marker,
                bootstrap_log=bootstrap_log,
                tail_command=tail_command,
            )
            if not found:
                return plain
            if plain.state == "pending":
                found["detail"] = (
                    f"bootstrap at phase {found['phase']} for {found['phase_s']:.0f} s "
                    f"({found['bootstrap_s']:.0f} s in all); {plain.detail}"
                )
            return dataclasses.replace(plain, **found)  # type: ignore[arg-type]
    rest = " ".join(rest.split())[:DETAIL_CHARS]
    where = f"see {bootstrap_log} on the node ({tail_command})"
    if state == "ready":
        return Readiness("ready")
    if state == "failed":
        return Readiness("failed", f"bootstrap failed: {rest or 'no detail'}; {where}")
    if state == "cloud-init-error":
        return Readiness("failed", f"cloud-init reported an error ({rest}); {where}")
    if state == "cloud-init-done":
        return Readiness(
            "failed",
            f"cloud-init finished but the bootstrap left no {ready_marker} ({rest}); {where}",
        )
    return Readiness(
        "pending",
        f"bootstrap still running (no {ready_marker} yet; progress in {bootstrap_log} on the node)",
    )


def parse_phase_line(line: str) -> dict[str, object] | None:
    """``phase NAME NAME_EPOCH FIRST_EPOCH NOW_EPOCH`` as Readiness fields (phase, phase_s,
    bootstrap_s); None for a line that does not read so (a half-written phases file).

    The probe prints the last phases line (NAME NAME_EPOCH), then the first one's epoch and
    the node's clock: differences on one clock, whatever the operator's clock says."""
    words = line.split()
    if len(words) != 5 or words[0] != "phase" or not all(w.isdigit() for w in words[2:]):
        return None
    name = words[1]
    since, first, now = (int(w) for w in words[2:])
    if name == "ready":  # the bootstrap's whole length, not time since it ended
        return {"phase": name, "phase_s": 0.0, "bootstrap_s": float(since - first)}
    return {
        "phase": name,
        "phase_s": float(max(0, now - since)),
        "bootstrap_s": float(max(0, now - first)),
    }
