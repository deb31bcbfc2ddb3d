"""An AWS node's readiness probe: provision.sh's markers where cloudinit.py puts them, and
cloud-init's own status when neither is there (skyinfra/transport/bootstrap.py holds the
probe and its parser; skyinfra/transport/ssh.py runs it)."""

from __future__ import annotations

from skyinfra.targets.aws.cloudinit import FAILED_MARKER, OUTPUT_LOG, READY_MARKER
from skyinfra.transport.ssh import ReadinessProbe

# Asked when neither marker exists: cloud-init may have failed before provision.sh ran.
CLOUD_INIT_STATUS = "cloud-init status"


# A real node's: cloud-init runs provision.sh (cloudinit.py).
CLOUD_INIT_PROBE = ReadinessProbe(
    ready_marker=READY_MARKER,
    failed_marker=FAILED_MARKER,
    cloud_init_status=CLOUD_INIT_STATUS,
    bootstrap_log=OUTPUT_LOG,
)
