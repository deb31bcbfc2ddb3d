"""The bootstrap readiness protocol of an AWS node: one probe script, one pure parser.

provision.sh (cloud-init's runcmd) leaves its outcome in two marker files: ``ready`` once the
bootstrap finished, ``failed`` (the failing line and command) when it did not. The probe
script, run on the node in one SSH command, prints what it finds as a first-line word and
detail lines after it:

- ``ready``: the ready marker is there;
- ``failed`` + the failed marker's first :data:`DETAIL_CHARS` characters;
- ``cloud-init-error`` + cloud-init's status: cloud-init failed (perhaps before provision.sh);
- ``cloud-init-done`` + cloud-init's status: cloud-init finished, yet no marker;
- ``pending``: none of these (still booting or installing).

cloud-init is only asked (``cloud_init_status``, a command printing ``status: <state>``) when
neither marker exists. :func:`parse_probe_output` turns the output into a :class:`Readiness`
whose detail says where to look; it needs no node, so it is tested without sshd.
"""

from __future__ import annotations

import shlex

from skyinfra.transport.base import Readiness

# Asked when neither marker exists: cloud-init may have failed before provision.sh ran.
CLOUD_INIT_STATUS = "cloud-init status"
# How much of the failed marker or of cloud-init's answer goes into a message.
DETAIL_CHARS = 600


def probe_script(ready_marker: str, failed_marker: str, cloud_init_status: str | None) -> str:
    """The shell script that prints the node's state (see the module docstring)."""
    ready = shlex.quote(ready_marker)
    failed = shlex.quote(failed_marker)
    script = (
        f"if [ -e {ready} ]; then echo ready; exit 0; fi\n"
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
    return script + "echo pending\n"


def parse_probe_output(
    output: str, *, ready_marker: str, bootstrap_log: str, tail_command: str
) -> Readiness:
    """The node's readiness from what :func:`probe_script` printed.

    ``bootstrap_log`` is where the bootstrap's output is on the node and ``tail_command`` the
    command that shows it; failure details name both. Output the protocol does not know reads
    as pending.
    """
    state, _, rest = output.strip().partition("\n")
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
