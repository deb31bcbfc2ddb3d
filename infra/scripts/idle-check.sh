#!/usr/bin/env bash
# Shut an idle AWS node down (which terminates it: the nodes module sets
# instance_initiated_shutdown_behavior) once no skyinfra process and no SSH session has been
# seen for IDLE_MINUTES minutes. Run every minute by skyinfra-idle.timer; the user data
# (infra/templates/aws/cloud-init/user-data.yaml.j2) installs both and arms the timer before
# provision.sh runs, and skyinfra-idle.service sets:
#   IDLE_MINUTES       how long the node may stay idle
#   PROVISION_MINUTES  how long a bootstrap still running (neither marker yet) counts as busy
#   STATE_DIR          where the last-busy stamp and provision.sh's ready/failed markers are
#   NODE_DIR           the node folder, whose pids/ records the running skyinfra commands
#   MAX_LIFETIME_MINUTES  (optional, the spec's aws.max_lifetime_hours) the node ends itself
#                      once up this long, busy or not; IDLE_MINUTES=0 then turns the idle
#                      check off and keeps only this one
# A node whose bootstrap failed (STATE_DIR/failed) is idle like any other: nobody can run on
# it, so it ends itself IDLE_MINUTES later unless someone is logged in to look.
set -u
mkdir -p "$STATE_DIR"
if [ "${MAX_LIFETIME_MINUTES:-0}" -gt 0 ]; then
    # Uptime counts from boot, that is from the instance's launch.
    up_s=$(cut -d. -f1 "${UPTIME_FILE:-/proc/uptime}")
    if [ "$up_s" -ge $(( MAX_LIFETIME_MINUTES * 60 )) ]; then
        logger -t skyinfra "up for ${up_s}s: max lifetime reached, shutting down"
        shutdown -h now
        exit 0
    fi
fi
[ "${IDLE_MINUTES:-0}" -gt 0 ] || exit 0
stamp="$STATE_DIR/last-busy"
busy=0
# A running job is busy on every node: each node's job agent (skyinfra-runtime supervise)
# holds pids/<job id>.pid while its part of the job runs, and removes it when that part ends,
# so a finished job (or one whose agent died: a lost job) leaves the node idle. A job waiting
# in the head's queue is busy too: its agents hold their pid files from its submission (a
# non-empty queue keeps the cluster up until its jobs ran or were cancelled).
for f in "$NODE_DIR"/pids/*.pid; do
    # A pid file holds "PID START" (the process's start time, field 22 of /proc/PID/stat):
    # a pid reused by an unrelated process since is not ours.
    pid=""; start=""; [ -f "$f" ] && read -r pid start _ < "$f"
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then continue; fi
    if [ -n "$start" ]; then
        [ "$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f20)" = "$start" ] || continue
    fi
    busy=1
done
if [ ! -f "$STATE_DIR/ready" ] && [ ! -f "$STATE_DIR/failed" ]; then
    uptime_s=$(cut -d. -f1 /proc/uptime)
    [ "$uptime_s" -lt $(( ${PROVISION_MINUTES:-60} * 60 )) ] && busy=1
fi
[ -n "$(who)" ] && busy=1
[ -f "$stamp" ] || busy=1
if [ "$busy" = 1 ]; then touch "$stamp"; exit 0; fi
idle=$(( $(date +%s) - $(stat -c %Y "$stamp") ))
if [ "$idle" -ge $(( IDLE_MINUTES * 60 )) ]; then
    logger -t skyinfra "idle for ${idle}s: shutting down"
    shutdown -h now
fi
