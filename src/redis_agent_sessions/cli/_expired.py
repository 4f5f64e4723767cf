"""``expired``: drop the index entries of an app's sessions that no longer exist.

Writes drop them as they come due, up to 16 a write (the app's expiry index, see
``sessions/_layout.py``). What writes cannot find is a backlog: entries of sessions that
expired before the expiry index existed, or whose TTL the index never learned of (a session
created without one and appended by a worker that has one; on a cluster, sessions created
before the upgrade). This walks the app's session index a page at a time by rank, from the
newest end (dropping entries of a page never moves those of the pages still to come), checks
with pipelined EXISTS which sessions are gone, and hands them to the prune that listings use:
each is re-checked in the script, in its user's slot, and on a cluster the app index member
goes through the user's outbox. O(sessions) work, never a keyspace scan.
"""

from __future__ import annotations

import argparse
from typing import Any

from redis_agent_sessions._messages import plural
from redis_agent_sessions._redis.codec import text
from redis_agent_sessions.cli._context import Context
from redis_agent_sessions.keys import split_app_member

__all__ = ["run"]

_PAGE = 1000
_PRUNE = 100  # sessions per prune call


async def run(ctx: Context, args: argparse.Namespace) -> int:
    app, index, total = await ctx.app_index(args.app)
    checked = gone = dropped = 0
    with ctx.progress("checking" if args.dry_run else "dropping", total) as bar:
        end = total - 1
        while end >= 0:
            start = max(0, end - _PAGE + 1)
            members: list[Any] = await ctx.client.zrange(index, start, end)
            pairs = [split_app_member(text(m)) for m in members]
            pipe = ctx.client.pipeline(transaction=False)
            for user, sid in pairs:
                pipe.exists(ctx.keys.session(app, user, sid).meta)
            found = await pipe.execute() if pairs else []
            missing = [p for p, there in zip(pairs, found, strict=True) if not there]
            checked += len(pairs)
            gone += len(missing)
            if not args.dry_run:
                for at in range(0, len(missing), _PRUNE):
                    dropped += await ctx.engine.prune(app, missing[at : at + _PRUNE])
            bar.advance(bar.task_ids[0], len(pairs))
            end = start - 1
    if ctx.json:
        ctx.print_json(
            {
                "app_name": app,
                "dry_run": args.dry_run,
                "checked": checked,
                "expired": gone,
                "dropped": dropped,
            }
        )
        return 0
    exist = "no longer exists" if gone == 1 else "no longer exist"
    found_text = f"{gone:,} of {plural(checked, 'session')} in the index of app {app!r} {exist}"
    if args.dry_run:
        ctx.out.print(f"{found_text} (dry run)")
    else:
        ctx.err.print(f"{found_text}; dropped the index entries of {dropped:,}", soft_wrap=True)
    return 0
