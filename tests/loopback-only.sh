#!/bin/sh
# Run a command (the test suite) in a new network namespace that holds only loopback, so no
# packet can leave this machine, whatever language sends it (Go, C++ collectives, Python).
# The Python and proxy guard (tests/loopback_guard/) names offending addresses on top of this.
#
# Needs `unshare --net` (root, or user namespaces) and `ip`. Without them the command runs
# in the machine's own network with a warning; CI (SKYINFRA_REQUIRE_SYSTEM_TOOLS=1) fails.
set -eu
if unshare --net true 2>/dev/null && command -v ip >/dev/null 2>&1; then
    exec unshare --net sh -c 'ip link set lo up && exec "$@"' sh "$@"
fi
if [ "${SKYINFRA_REQUIRE_SYSTEM_TOOLS:-}" = 1 ]; then
    echo "loopback-only: cannot create a network namespace (unshare --net, ip); refusing to run" >&2
    exit 1
fi
echo "loopback-only: warning: no network namespace (needs unshare --net and ip);" \
    "tests run with the Python/proxy loopback guard only" >&2
exec "$@"
