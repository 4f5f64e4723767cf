"""``delete`` and ``purge``: they ask first (``--yes`` skips the question)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import AsyncIterator

from rich.cells import cell_len

from redis_agent_sessions._messages import plural, visible
from redis_agent_sessions.cli._context import (
    CliError,
    Context,
    NotFound,
    UsageError,
    json_bytes,
    no_session,
    utc,
    when,
)
from redis_agent_sessions.cli._transfer import PAGE, sessions_of
from redis_agent_sessions.models import Session

__all__ = ["run"]

_COLUMNS = ("APP", "USER", "SESSION", "UPDATED")
_KEYS = ("app_name", "user_id", "id", "last_update_time")  # the columns in --json


async def run(ctx: Context, args: argparse.Namespace) -> int:
    return await (_delete(ctx, args) if args.command == "delete" else _purge(ctx, args))


async def _delete(ctx: Context, args: argparse.Namespace) -> int:
    keys = ctx.keys.session(args.app, args.user, args.session)
    if not await ctx.client.exists(keys.meta):
        raise no_session(args)
    events = plural(await ctx.client.xlen(keys.events), "event")
    _confirm(
        args.yes,
        f"Delete session {args.session!r} of user {args.user!r} in app {args.app!r} ({events})?",
    )
    await ctx.sessions.delete_session(app_name=args.app, user_id=args.user, session_id=args.session)
    ctx.err.print(f"deleted session {args.session!r} ({events})")
    return 0


async def _purge(ctx: Context, args: argparse.Namespace) -> int:
    cutoff = time.time() - args.older_than
    if args.dry_run:
        return await _dry_run(ctx, args, cutoff)
    # Only ids are kept (the question names how many); each session is read again to delete.
    old = [(s.user_id, s.id) async for s in _old(ctx, args, cutoff)]
    if not old:
        raise _none_old(args, cutoff)
    sessions = plural(len(old), "session")
    _confirm(args.yes, f"Delete {sessions} of app {args.app!r} last updated before {when(cutoff)}?")
    with ctx.progress("purging", len(old)) as bar:
        for user, sid in old:
            await ctx.sessions.delete_session(app_name=args.app, user_id=user, session_id=sid)
            bar.advance(bar.task_ids[0])
    if ctx.json:
        ctx.print_json({**_about(args, cutoff), "dry_run": False, "deleted": len(old)})
    else:
        ctx.err.print(f"deleted {sessions}")
    return 0


async def _old(ctx: Context, args: argparse.Namespace, cutoff: float) -> AsyncIterator[Session]:
    """The sessions last updated before ``cutoff``, a page of the index at a time."""
    # Oldest update first, so the walk ends at the first newer session; a cluster has no
    # app-wide by-update index, so there every session's time is looked at.
    by_update = args.user is not None or not ctx.cluster
    order = "updated" if by_update else "created"
    async for s in sessions_of(ctx, args.app, args.user, order_by=order):
        if s.last_update_time < cutoff:
            yield s
        elif by_update:
            return


async def _dry_run(ctx: Context, args: argparse.Namespace, cutoff: float) -> int:
    """Lists what a purge would delete as the walk finds it, a page at a time, so that
    memory stays bounded however many there are: JSON written piece by piece, or a table
    per page under one header, each column as wide as the widest value so far."""
    count = 0
    page: list[tuple[str, ...]] = []
    widths = [cell_len(c) for c in _COLUMNS]

    def flush() -> None:
        if not page:  # the last page was full
            return
        if ctx.json:
            out = sys.stdout.buffer
            if count == len(page):  # begun with the first session: no session, no document
                out.write(json_bytes({**_about(args, cutoff), "dry_run": True})[:-1])
                out.write(b',"sessions":[')
            out.write(b"," if count > len(page) else b"")
            out.write(b",".join(json_bytes(dict(zip(_KEYS, row, strict=True))) for row in page))
            out.flush()
            return
        for row in page:
            widths[:] = [
                max(w, cell_len(visible(cell))) for w, cell in zip(widths, row, strict=True)
            ]
        table = ctx.table(*_COLUMNS, show_header=count == len(page))
        for column, width in zip(table.columns, widths, strict=True):
            column.min_width = width
        for row in page:
            table.add_row(*map(visible, row))
        ctx.out.print(table)

    async for s in _old(ctx, args, cutoff):
        page.append((s.app_name, s.user_id, s.id, when(s.last_update_time)))
        count += 1
        if len(page) == PAGE:
            flush()
            page.clear()
    if not count:
        raise _none_old(args, cutoff)
    flush()
    if ctx.json:
        sys.stdout.buffer.write(b'],"count":' + str(count).encode() + b"}\n")
        sys.stdout.buffer.flush()
    else:
        ctx.out.print(f"{plural(count, 'session')} last updated before {when(cutoff)} (dry run)")
    return 0


def _about(args: argparse.Namespace, cutoff: float) -> dict[str, object]:
    return {"app_name": args.app, "user_id": args.user, "last_updated_before": utc(cutoff)}


def _none_old(args: argparse.Namespace, cutoff: float) -> NotFound:
    whose = f"app {args.app!r}" if args.user is None else f"user {args.user!r} of app {args.app!r}"
    return NotFound(f"no session of {whose} was last updated before {when(cutoff)}")


def _confirm(yes: bool, question: str) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise UsageError(f"{question} Not confirmed: pass --yes to run without a terminal")
    answer = input(f"{question} [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise CliError("not confirmed; nothing deleted")
