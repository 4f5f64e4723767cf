"""``delete`` and ``purge``: they ask first (``--yes`` skips the question)."""

from __future__ import annotations

import argparse
import sys
import time

from redis_agent_sessions.cli._context import (
    CliError,
    Context,
    NotFound,
    UsageError,
    no_session,
    when,
)
from redis_agent_sessions.cli._transfer import sessions_of

__all__ = ["run"]


async def run(ctx: Context, args: argparse.Namespace) -> int:
    return await (_delete(ctx, args) if args.command == "delete" else _purge(ctx, args))


async def _delete(ctx: Context, args: argparse.Namespace) -> int:
    keys = ctx.keys.session(args.app, args.user, args.session)
    if not await ctx.client.exists(keys.meta):
        raise no_session(args)
    events = await ctx.client.xlen(keys.events)
    _confirm(
        args.yes,
        f"Delete session {args.session!r} of user {args.user!r} in app {args.app!r} "
        f"({events} events)?",
    )
    await ctx.sessions.delete_session(app_name=args.app, user_id=args.user, session_id=args.session)
    ctx.err.print(f"deleted session {args.session!r} ({events} events)")
    return 0


async def _purge(ctx: Context, args: argparse.Namespace) -> int:
    cutoff = time.time() - args.older_than
    # Oldest update first, so the walk ends at the first newer session; a cluster has no
    # app-wide by-update index, so there every session's time is looked at.
    by_update = args.user is not None or not ctx.cluster
    order = "updated" if by_update else "created"
    old: list[tuple[str, str]] = []
    async for s in sessions_of(ctx, args.app, args.user, order_by=order):
        if s.last_update_time >= cutoff:
            if by_update:
                break
            continue
        old.append((s.user_id, s.id))
    if not old:
        raise NotFound(f"no session of app {args.app!r} was last updated before {when(cutoff)}")
    if args.dry_run:
        ctx.out.print(f"{len(old)} sessions last updated before {when(cutoff)} UTC (dry run)")
        return 0
    _confirm(
        args.yes,
        f"Delete {len(old)} sessions of app {args.app!r} last updated before {when(cutoff)} UTC?",
    )
    with ctx.progress("purging", len(old)) as bar:
        for user, sid in old:
            await ctx.sessions.delete_session(app_name=args.app, user_id=user, session_id=sid)
            bar.advance(bar.task_ids[0])
    ctx.err.print(f"deleted {len(old)} sessions")
    return 0


def _confirm(yes: bool, question: str) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise UsageError(f"{question} Not confirmed: pass --yes to run without a terminal")
    answer = input(f"{question} [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise CliError("not confirmed; nothing deleted")
