"""``reindex``: index stored memory entries by this version's analysis, so a store written by
0.1 is ranked as a new one is. Resumable: a second run skips what the first one finished (see
``memory/_reindex.py``)."""

from __future__ import annotations

import argparse

from redis_agent_sessions._messages import plural
from redis_agent_sessions.cli._context import Context, NotFound
from redis_agent_sessions.memory import RedisMemoryService

__all__ = ["run"]


async def run(ctx: Context, args: argparse.Namespace) -> int:
    memory = RedisMemoryService(ctx.client, config=ctx.config)
    report = await ctx.tracked(
        "checking" if args.dry_run else "reindexing",
        lambda advance: memory.reindex(
            app_name=args.app, user_id=args.user, dry_run=args.dry_run, on_progress=advance
        ),
    )
    if not report.entries:
        whose = "the store" if args.app is None else f"app {args.app!r}"
        raise NotFound(f"no memory entries in {whose}")
    if ctx.json:
        ctx.print_json(
            {
                "dry_run": report.dry_run,
                "users": report.users,
                "entries": report.entries,
                "current": report.current,
                "reindexed": report.reindexed,
            }
        )
        return 0
    line = (
        f"{plural(report.entries, 'entry', 'entries')} of "
        f"{plural(report.users, 'user')}: {report.current:,} already current"
    )
    if args.dry_run:
        ctx.out.print(f"{line}, {report.reindexed:,} to reindex (dry run)", soft_wrap=True)
    else:
        ctx.err.print(f"{line}, {report.reindexed:,} reindexed", soft_wrap=True)
    return 0
