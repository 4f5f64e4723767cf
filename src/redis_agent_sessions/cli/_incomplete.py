"""``incomplete``: find, and with ``--delete`` remove, an app's sessions whose keys Redis
evicted apart (its metadata left, its events, event ids or session state gone).

Reads and appends refuse such a session (``IncompleteSessionError``); this finds them all
without reading any events: it walks the app's session index a page at a time with
pipelined HMGET/EXISTS and applies the rule reads apply (``missing_parts``). O(sessions)
work, never a keyspace scan. Sessions whose metadata is gone are not listed: they are gone,
as expired ones are (``redis-agent-sessions expired`` drops what they leave in the indexes).

Exit codes: 0 when none is left (none found, or all deleted), 1 when some were found and
kept (so that a cron job can alert).
"""

from __future__ import annotations

import argparse
from typing import Any

from redis_agent_sessions._messages import plural, visible
from redis_agent_sessions._redis.codec import text
from redis_agent_sessions.cli._context import Context
from redis_agent_sessions.keys import split_app_member
from redis_agent_sessions.sessions._replies import missing_parts

__all__ = ["run"]

_PAGE = 1000


async def run(ctx: Context, args: argparse.Namespace) -> int:
    app, index, total = await ctx.app_index(args.app)
    found: list[tuple[str, str, list[str]]] = []
    with ctx.progress("checking", total) as bar:
        for start in range(0, total, _PAGE):
            members: list[Any] = await ctx.client.zrange(index, start, start + _PAGE - 1)
            pairs = [split_app_member(text(m)) for m in members]
            found += await _incomplete(ctx, app, pairs)
            bar.advance(bar.task_ids[0], len(pairs))
    if args.delete:
        for user, sid, _ in found:
            await ctx.engine.writes.delete_session(app_name=app, user_id=user, session_id=sid)
    if ctx.json:
        rows = [{"user_id": u, "session_id": s, "missing": m} for u, s, m in found]
        ctx.print_json(
            {"app_name": app, "checked": total, "incomplete": rows, "deleted": args.delete}
        )
    else:
        if found:
            table = ctx.table("USER", "SESSION", "MISSING")
            for user, sid, missing in found:
                table.add_row(visible(user), visible(sid), ", ".join(missing))
            ctx.out.print(table)
        done = f"; deleted {'it' if len(found) == 1 else 'them'}" if args.delete and found else ""
        ctx.err.print(
            f"{plural(len(found), 'session')} of {plural(total, 'session')} in the index of app "
            f"{app!r} {'is' if len(found) == 1 else 'are'} incomplete{done}",
            soft_wrap=True,
        )
    return 1 if found and not args.delete else 0


async def _incomplete(
    ctx: Context, app: str, pairs: list[tuple[str, str]]
) -> list[tuple[str, str, list[str]]]:
    """The sessions of ``pairs`` whose keys were evicted apart, with what each is missing."""
    pipe = ctx.client.pipeline(transaction=False)
    for user, sid in pairs:
        keys = ctx.keys.session(app, user, sid)
        pipe.hmget(keys.meta, ["rev", "has_state"])
        pipe.exists(keys.state)
        pipe.exists(keys.events)
        pipe.exists(keys.event_ids)
    replies = await pipe.execute() if pairs else []
    found = []
    for n, (user, sid) in enumerate(pairs):
        (rev, has_state), state, events, ids = replies[4 * n : 4 * n + 4]
        if rev is None:
            continue  # gone: not incomplete
        meta = {"rev": rev, "has_state": has_state}
        if missing := missing_parts(meta, state, (events, ids)):
            found.append((user, sid, missing))
    return found
