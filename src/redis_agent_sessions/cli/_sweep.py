"""``sweep``: finish the app-scope writes that workers left half done on a Redis Cluster,
and check the sessions its app's expiry index says are due (their index entries go when they
are gone).

Calls ``sweep_app_writes`` until no registered user older than the bound remains (each
call examines at most ``--limit`` users and expiry index members), or once with
``--dry-run``, which only counts.
"""

from __future__ import annotations

import argparse
import dataclasses

from redis_agent_sessions._messages import plural
from redis_agent_sessions.cli._context import Context
from redis_agent_sessions.sessions._sweep import SweepReport

__all__ = ["run"]


async def run(ctx: Context, args: argparse.Namespace) -> int:
    async def sweep(dry_run: bool) -> SweepReport:
        return await ctx.sessions.sweep_app_writes(
            app_name=args.app, older_than=args.older_than, limit=args.limit, dry_run=dry_run
        )

    if args.dry_run:
        total = await sweep(True)
    else:
        total = SweepReport()
        with ctx.progress("sweeping", None) as bar:
            while True:
                report = await sweep(False)
                total = _sum(total, report)
                bar.advance(bar.task_ids[0], report.users_examined)
                # Users still due that this call could not clear were registered again
                # meanwhile: the next call would find them again, so stop. Expiry index
                # members it checked are claimed for a minute: the next call takes others.
                if not report.more or not (report.users_cleared or report.expired_due):
                    break
    if ctx.json:
        ctx.print_json(
            {
                "app_name": args.app,
                "older_than": args.older_than,
                "dry_run": args.dry_run,
                **dataclasses.asdict(total),
            }
        )
        return 0
    if not ctx.cluster:
        ctx.out.print("nothing to sweep: on a single node app-scope writes are never pending")
        return 0
    due = f"{plural(total.users_examined, 'user')} registered over {args.older_than:g} s ago"
    writes = plural(total.entries_pending, "unapplied app-scope write")
    found = f"{total.users_pending:,} with {writes}"
    expiring = f"{plural(total.expired_due, 'session')} due for an expiry check"
    more = "; more remain (run again)" if total.more else ""
    if args.dry_run:
        ctx.out.print(f"{due}: {found}; {expiring} (dry run){more}")
    else:
        ctx.err.print(
            f"{due}: {found}; applied {total.entries_applied:,}, cleared "
            f"{plural(total.users_cleared, 'user')} from the registry; {expiring}, "
            f"{total.expired_dropped:,} of them gone "
            f"(index entries dropped){more}",
            soft_wrap=True,
        )
    return 0


def _sum(a: SweepReport, b: SweepReport) -> SweepReport:
    return SweepReport(
        users_examined=a.users_examined + b.users_examined,
        users_pending=a.users_pending + b.users_pending,
        entries_pending=a.entries_pending + b.entries_pending,
        entries_applied=a.entries_applied + b.entries_applied,
        users_cleared=a.users_cleared + b.users_cleared,
        more=b.more,
        expired_due=a.expired_due + b.expired_due,
        expired_dropped=a.expired_dropped + b.expired_dropped,
    )
