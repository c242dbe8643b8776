#!/usr/bin/env bash
# Start or stop a Docker engine for the compose tests (./dev test calls it):
#
#   compose/engine.sh start    if no engine answers, start dockerd (vfs storage driver) and
#                              wait until it answers; if one answers already, do nothing
#   compose/engine.sh stop     stop the dockerd that `start` started (by the pid it recorded);
#                              an engine this script did not start is left alone
#   compose/engine.sh status   say whether an engine answers and whether we started it
#
# Idempotent. The vfs storage driver works on any filesystem (no overlay mounts in nested
# containers), at the price of a full copy per layer and per container.
# State: $KAFKASIM_DOCKERD_DIR (default /run/kafkasim-dockerd): dockerd.pid, dockerd.log.
set -euo pipefail

STATE=${KAFKASIM_DOCKERD_DIR:-/run/kafkasim-dockerd}
PIDFILE=$STATE/dockerd.pid
LOG=$STATE/dockerd.log
START_TIMEOUT_S=${KAFKASIM_DOCKERD_START_TIMEOUT_S:-60}
STOP_TIMEOUT_S=30

say() { printf 'engine: %s\n' "$*" >&2; }

answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

our_pid() {
    local pid
    [ -f "$PIDFILE" ] || return 1
    pid=$(cat "$PIDFILE")
    # Only a live dockerd under that pid is ours (the pid may have been reused since).
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] || return 1
    echo "$pid"
}

start() {
    if answers; then
        say "a Docker engine answers already ($(docker version --format '{{.Server.Version}}'))"
        return 0
    fi
    if our_pid >/dev/null; then
        say "dockerd $(our_pid) (ours) is running but does not answer yet; waiting"
    else
        [ "$(id -u)" = 0 ] || { say "starting dockerd needs root"; return 1; }
        command -v dockerd >/dev/null || { say "dockerd not found (apt-get install docker.io)"; return 1; }
        mkdir -p "$STATE"
        say "starting dockerd --storage-driver vfs (log: $LOG)"
        # Its own pid file: a system dockerd's /var/run/docker.pid is not ours to touch.
        setsid dockerd --storage-driver vfs --pidfile "$STATE/dockerd.own.pid" \
            </dev/null >>"$LOG" 2>&1 &
        echo $! >"$PIDFILE"
    fi
    local waited=0
    until answers; do
        if ! our_pid >/dev/null; then
            tail -20 "$LOG" >&2 || true
            say "dockerd exited while starting (log above)"
            rm -f "$PIDFILE"
            return 1
        fi
        if [ "$waited" -ge $((START_TIMEOUT_S * 2)) ]; then
            say "dockerd does not answer after ${START_TIMEOUT_S} s (log: $LOG)"
            return 1
        fi
        sleep 0.5
        waited=$((waited + 1))
    done
    say "dockerd $(our_pid) answers"
}

stop() {
    local pid waited=0
    if ! pid=$(our_pid); then
        rm -f "$PIDFILE"
        say "no dockerd started by this script is running"
        return 0
    fi
    say "stopping dockerd $pid"
    kill -TERM "$pid"
    while [ -d "/proc/$pid" ]; do
        if [ "$waited" -ge $((STOP_TIMEOUT_S * 2)) ]; then
            say "dockerd $pid still running after ${STOP_TIMEOUT_S} s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.5
        waited=$((waited + 1))
    done
    rm -f "$PIDFILE"
}

status() {
    if answers; then
        say "a Docker engine answers ($(docker version --format '{{.Server.Version}}'))"
    else
        say "no Docker engine answers"
    fi
    if pid=$(our_pid); then say "dockerd $pid was started by this script"; fi
}

case ${1:-} in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: compose/engine.sh start|stop|status" >&2; exit 2 ;;
esac
