"""``reindex``: analyse stored memory entries again with this version's analysis, after an
upgrade that changed it. Resumable: a second run skips what the first one finished (see
``memory/_reindex.py``)."""

from __future__ import annotations

import argparse

from redis_agent_sessions.cli._context import Context

__all__ = ["run"]


async def run(ctx: Context, args: argparse.Namespace) -> int:
    memory = ctx.memory()
    report = await ctx.tracked(
        "checking" if args.dry_run else "reindexing",
        lambda advance: memory.reindex(
            app_name=args.app, user_id=args.user, dry_run=args.dry_run, on_progress=advance
        ),
    )
    payload = {
        "dry_run": report.dry_run,
        "users": report.users,
        "entries": report.entries,
        "current": report.current,
        "reindexed": report.reindexed,
    }
    line = ctx.walked(args.app, report.users, report.entries, report.current, payload)
    if line is None:
        return 0
    if args.dry_run:
        ctx.out.print(f"{line}, {report.reindexed:,} to reindex (dry run)", soft_wrap=True)
    else:
        ctx.err.print(f"{line}, {report.reindexed:,} reindexed", soft_wrap=True)
    return 0
