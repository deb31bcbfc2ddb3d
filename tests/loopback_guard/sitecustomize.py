"""Test-only: every Python process the tests start refuses non-loopback destinations.

tests/conftest.py puts this folder first on PYTHONPATH; see loopback_guard.py.
"""

import loopback_guard

loopback_guard.install()
