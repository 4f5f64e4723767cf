#!/usr/bin/env bash
# The test command: sets up .venv with every extra, starts throwaway Redis servers on
# loopback (Redis 7 from Debian's redis-server; Redis 8.2 + RediSearch from PyPI wheels; a
# 3-primary Redis Cluster of each) unless REDIS_URL is already set, runs pytest with any
# arguments given, stops the servers.
# Without redis-server (and not root to install it) the real-server tests skip.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  "${PYTHON:-python3}" -m venv .venv
  .venv/bin/pip install -q -U pip
fi
.venv/bin/pip install -q -e '.[dev,adk,demo]' 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -c 'import redis_agent_sessions, fakeredis, pytest' # the install must have worked

if [ -z "${REDIS_URL:-}" ]; then
  if ! command -v redis-server >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools
  fi
  if command -v redis-server >/dev/null; then
    # A directory of this run's own: `stop` (on any exit) kills only the servers it started,
    # never those of another run sharing the work tree. A failed start stops the run.
    export REDIS_TEST_DIR=.redis-test/test-$$
    trap 'scripts/redis-servers.sh stop; rm -rf "$REDIS_TEST_DIR"' EXIT
    servers=$(scripts/redis-servers.sh start)
    eval "$servers"
  else
    echo "redis-server not found: real-server tests will be skipped" >&2
  fi
fi
.venv/bin/python -m pytest "$@"
