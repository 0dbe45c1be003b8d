#!/usr/bin/env bash
# Start a throwaway redis-server on loopback for the store tests.
#
#   eval "$(.ci/start-redis.sh)"     # sets CROSSFEED_TEST_REDIS_URL (and ..._PIDFILE)
#   kill "$(cat "$CROSSFEED_TEST_REDIS_PIDFILE")"   # when done
#
# Installs redis-server from the Debian packages if missing, binds 127.0.0.1 on a free port
# (CROSSFEED_REDIS_PORT to force one; 6399 if no free port can be found), no RDB/AOF persistence,
# daemonized, and waits (bounded) until PING answers. Only the export lines go to stdout;
# everything else goes to stderr so that the output can be eval'ed.
set -euo pipefail

log() { echo "start-redis: $*" >&2; }

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    log "installing redis-server (apt-get)"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq >&2
    $SUDO apt-get install -y -qq --no-install-recommends redis-server >&2
fi

free_port() {
    python3 - <<'PY' 2>/dev/null || echo 6399
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
}

workdir="$(mktemp -d "${TMPDIR:-/tmp}/crossfeed-redis.XXXXXX")"
for attempt in 1 2 3; do
    port="${CROSSFEED_REDIS_PORT:-$(free_port)}"
    if redis-server --bind 127.0.0.1 --port "$port" --protected-mode yes \
        --save "" --appendonly no --dir "$workdir" \
        --daemonize yes --pidfile "$workdir/redis.pid" --logfile "$workdir/redis.log" >&2; then
        for _ in $(seq 1 100); do  # up to ~10 s
            if [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = "PONG" ]; then
                log "redis-server up on 127.0.0.1:$port (pid $(cat "$workdir/redis.pid" 2>/dev/null), log $workdir/redis.log)"
                echo "export CROSSFEED_TEST_REDIS_URL=redis://127.0.0.1:$port/0"
                echo "export CROSSFEED_TEST_REDIS_PIDFILE=$workdir/redis.pid"
                exit 0
            fi
            sleep 0.1
        done
    fi
    log "attempt $attempt: redis-server did not answer on port $port"
    tail -n 5 "$workdir/redis.log" >&2 2>/dev/null || true
    if [ -f "$workdir/redis.pid" ]; then kill "$(cat "$workdir/redis.pid")" 2>/dev/null || true; rm -f "$workdir/redis.pid"; fi
    [ -n "${CROSSFEED_REDIS_PORT:-}" ] && break
done
log "giving up"
exit 1
