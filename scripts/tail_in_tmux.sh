#!/usr/bin/env bash
# `tail -f` seen from a real terminal: a detached tmux pane (160x40, a tmux server of its own)
# runs `python -m redis_agent_sessions tail APP USER SESSION -f`, while writer processes (each
# its own python, as other workers would be) append three events one by one. Each must show
# up in the pane as it is written, all three in order; then Ctrl-C must end the tail with the
# CLI's exit code 130 and no traceback. Prints the captured pane; exit 0 when all of that held.
#
# Usage: REDIS_URL=redis://127.0.0.1:6379/0 scripts/tail_in_tmux.sh [KEY_PREFIX]
# Writes only keys under KEY_PREFIX (default ras-tail-demo-<random>), deletes them at the end,
# and always kills its tmux server. Needs tmux and the venv's python (PY, default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
WAIT=${TAIL_WAIT:-15} # seconds any one thing may take to show up in the pane

if [ -z "${REDIS_URL:-}" ]; then
  echo "tail_in_tmux.sh: REDIS_URL is not set (e.g. REDIS_URL=redis://127.0.0.1:6379/0)" >&2
  exit 2
fi
if ! command -v tmux >/dev/null; then
  echo "tail_in_tmux.sh: tmux is not installed (apt-get install tmux)" >&2
  exit 2
fi
PREFIX=${1:-ras-tail-demo-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')}
APP=tail_app USER_ID=tail_user SESSION=tail-session
# The pane's program and every writer are separate processes, and nothing may reach the
# test's or the caller's own tmux: a socket of our own, named after this shell's pid.
SOCKET=ras-tail-$$
# UTF-8 in the pane regardless of the caller's locale, or tmux would draw the texts as '_'.
export LANG=C.UTF-8 LC_ALL=C.UTF-8 PYTHONIOENCODING=utf-8
T=(tmux -L "$SOCKET" -f /dev/null)

# writer create|append TEXT|cleanup: one short-lived python process per call.
writer() {
  "$PY" - "$PREFIX" "$APP" "$USER_ID" "$SESSION" "$@" <<'PY'
from __future__ import annotations

import asyncio
import os
import sys

from redis_agent_sessions import (
    Content, Event, EventActions, Part, RedisSessionService, SessionServiceConfig,
)

prefix, app, user, sid, action, *rest = sys.argv[1:]


async def main() -> None:
    config = SessionServiceConfig(key_prefix=prefix)
    async with RedisSessionService.from_url(os.environ["REDIS_URL"], config=config) as svc:
        if action == "create":
            await svc.create_session(
                app_name=app, user_id=user, session_id=sid, state={"trip": "LIS-ZRH"}
            )
        elif action == "append":
            session = await svc.get_session(app_name=app, user_id=user, session_id=sid)
            assert session is not None, "the session is gone"
            turn = len(session.events)
            await svc.append_event(
                session,
                Event(
                    author="user" if turn % 2 else "booking_agent",
                    content=Content(role="user", parts=[Part(text=rest[0])]),
                    actions=EventActions(state_delta={"turn": turn}),
                ),
            )
        else:  # cleanup: only this run's keys (a shared server is never flushed)
            client = svc._client
            keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
            for start in range(0, len(keys), 500):
                await client.unlink(*keys[start : start + 500])


asyncio.run(main())
PY
}

SOCKET_PATH=
cleanup() {
  "${T[@]}" kill-server 2>/dev/null || true
  # kill-server leaves the socket file behind (tmux 3.3a).
  if [ -n "$SOCKET_PATH" ]; then rm -f "$SOCKET_PATH"; fi
  writer cleanup || echo "tail_in_tmux.sh: could not delete the keys under $PREFIX" >&2
}
trap cleanup EXIT

# The whole pane, scrollback included (tmux's "Pane is dead" line scrolls the first one
# off), runs of empty rows squeezed to one.
pane() { "${T[@]}" capture-pane -p -J -S - -t tail | cat -s; }

# wait_for TEXT: until the pane shows TEXT (fixed string), at most $WAIT seconds.
wait_for() {
  local _
  for _ in $(seq 1 $((WAIT * 10))); do
    # No `pane | grep -q`: grep quitting early could SIGPIPE the capture, failing the match.
    [[ "$(pane)" == *"$1"* ]] && return 0
    sleep 0.1
  done
  fail "'$1' did not appear in the pane within ${WAIT} s"
}

fail() {
  echo "tail_in_tmux.sh: $1; the pane:" >&2
  pane >&2
  exit 1
}

writer create
writer append "opening: find me a flight from Lisbon to Zürich"
# The pane runs a bash that ignores SIGINT itself, restores it for the tail and prints the
# tail's exit status: tmux 3.3a now and then never reaps a pane's process that C-c ended (it
# stays a zombie, #{pane_dead_status} stays empty; ~1 run in 30 here, with plain `sleep`
# too), so tmux's own record of the status cannot be relied on. remain-on-exit is set before
# the session exists, so even a tail that dies at once leaves its error in the pane.
# shellcheck disable=SC2016 # $@ and $? belong to the pane's bash
"${T[@]}" set-option -g remain-on-exit on \; \
  new-session -d -s tail -x 160 -y 40 \
  bash -c 'trap "" INT; (trap - INT; exec "$@"); printf "\n[tail exited with status %s]\n" $?' tail \
  "$PY" -m redis_agent_sessions tail "$APP" "$USER_ID" "$SESSION" -f \
  --url "$REDIS_URL" --key-prefix "$PREFIX"
SOCKET_PATH=$("${T[@]}" display-message -p '#{socket_path}')
# The backlog printed means the tail read it and is about to follow, so the appends below
# can only reach the pane through the follow.
wait_for "opening: find me a flight"

TEXTS=(
  "first follow: Zürich → Lisboa, 2 adults ✈"
  "second follow: 東京 hotel, 3 nights — naïve café ok"
  "third follow: paid €129.50, ref K7QX2M ✓"
)
for text in "${TEXTS[@]}"; do
  writer append "$text"
  wait_for "$text"
done

# In order: the pane line of each text comes after the one before.
captured=$(pane)
last=0
for text in "${TEXTS[@]}"; do
  line=$(grep -m 1 -nF -- "$text" <<<"$captured" | cut -d: -f1)
  [ "$line" -gt "$last" ] || fail "'$text' is out of order (line $line, after line $last)"
  last=$line
done

"${T[@]}" send-keys -t tail C-c
wait_for "[tail exited with status "
final=$(pane)
echo "---- tmux pane (-L ${SOCKET}, 160x40) ----"
sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' <<<"$final"
echo "------------------------------------------"
status=$(sed -n 's/.*\[tail exited with status \([0-9]*\)\].*/\1/p' <<<"$final")
[ "$status" = 130 ] || fail "the tail exited with status $status after Ctrl-C, not 130"
if grep -q "Traceback" <<<"$final"; then
  fail "a Python traceback is in the pane"
fi
echo "OK: ${#TEXTS[@]} appended events appeared in order while tail -f ran;" \
  "Ctrl-C ended it with status 130, no traceback"
