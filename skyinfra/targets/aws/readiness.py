"""An AWS node's readiness probe asks cloud-init how it went (skyinfra/transport/bootstrap.py
holds the probe and its parser)."""

from __future__ import annotations

# Asked when neither marker exists: cloud-init may have failed before provision.sh ran.
CLOUD_INIT_STATUS = "cloud-init status"
