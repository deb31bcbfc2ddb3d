#!/usr/bin/env bash
# System packages the tests use for real: cloud-init (offline `cloud-init schema` checks),
# shellcheck (the node scripts of infra/scripts/),
# openssh-server (a real sshd on 127.0.0.1 for the SSH transport tests) and iproute2 (`ip`,
# to bring up loopback in the tests' own network namespace, tests/loopback-only.sh). Installed from the
# Debian packages when missing and this user can (root with apt-get); otherwise a note, and
# those tests skip, unless SKYINFRA_REQUIRE_SYSTEM_TOOLS=1 (CI) makes them fail instead.
set -euo pipefail
need=()
command -v cloud-init >/dev/null 2>&1 || need+=(cloud-init)
[ -x /usr/sbin/sshd ] || command -v sshd >/dev/null 2>&1 || need+=(openssh-server)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
[ "${#need[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "system-deps: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
else
    echo "system-deps: missing ${need[*]} (not root or no apt-get): their tests will skip" >&2
fi
