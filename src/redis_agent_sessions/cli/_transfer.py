"""``export`` and ``import``: sessions as JSON Lines, one session (with its events and the
state of each scope) per line; see ``_records`` for the shape."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import IO, Any

import orjson

from redis_agent_sessions._messages import plural
from redis_agent_sessions.cli._context import (
    CliError,
    Context,
    NotFound,
    UsageError,
    first_line,
    sessions_of_whom,
)
from redis_agent_sessions.cli._jsonl import LineTooLong, count_lines, lines, loads
from redis_agent_sessions.cli._records import dump, import_record, read_record
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.models import Session

__all__ = ["PAGE", "run", "sessions_of"]

PAGE = 500
"""Sessions per page of a walk (``sessions_of``)."""


async def run(ctx: Context, args: argparse.Namespace) -> int:
    return await (_export(ctx, args) if args.command == "export" else _import(ctx, args))


async def sessions_of(
    ctx: Context, app: str, user: str | None, *, order_by: str = "created"
) -> AsyncIterator[Session]:
    """Sessions (no events) of an app or one user, oldest first, a page at a time."""
    token = None
    while True:
        page = await ctx.sessions.list_sessions_page(
            app_name=app,
            user_id=user,
            page_size=PAGE,
            page_token=token,
            order_by=order_by,  # type: ignore[arg-type]
            newest_first=False,
        )
        for s in page.sessions:
            yield s
        token = page.next_page_token
        if token is None:
            return


async def _export(ctx: Context, args: argparse.Namespace) -> int:
    index = ctx.keys.user_sessions(args.app, args.user) if args.user else None
    total = await ctx.client.zcard(index or ctx.keys.app_sessions(args.app))
    exported = events = 0
    with _output(args.output) as out, ctx.progress("exporting", total) as bar:
        async for s in sessions_of(ctx, args.app, args.user):
            record = await read_record(ctx.engine, args.app, s.user_id, s.id, exact=True)
            if record is None:  # deleted while the export ran
                continue
            out.write(dump(record) + b"\n")
            exported += 1
            events += len(record["events"])
            bar.advance(bar.task_ids[0])
        if not exported:
            raise NotFound(
                f"no sessions for {sessions_of_whom(args.app, args.user)}: nothing exported"
            )
    ctx.err.print(f"exported {plural(exported, 'session')} ({plural(events, 'event')})")
    return 0


@contextlib.contextmanager
def _output(path: str | None) -> Iterator[IO[bytes]]:
    """stdout, or a file that appears (whole) only when the export succeeded."""
    if path is None or path == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, temp = tempfile.mkstemp(prefix=".export-", dir=folder)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


async def _import(ctx: Context, args: argparse.Namespace) -> int:
    engine = ctx.import_engine
    imported = skipped = events = 0
    with _input(args.file) as (stream, total), ctx.progress("importing", total) as bar:
        number = 0
        try:
            for number, box in lines(stream, args.max_line_bytes):
                record: Any = loads(box.pop())  # the line goes once decoded
                if await import_record(engine, record, replace=args.replace, spend=True):
                    imported += 1
                    events += len(record["events"])
                elif args.skip_existing:
                    skipped += 1
                else:
                    # Exit 1, as for data that cannot be read: what is stored stops the
                    # import, not how it was called.
                    raise CliError(
                        f"{args.file}:{number}: session {record['id']!r} of user "
                        f"{record['user_id']!r} in app {record['app_name']!r} exists; left as "
                        f"it was (--replace replaces, --skip-existing skips); {_before(imported)}"
                    )
                bar.advance(bar.task_ids[0])
        except (orjson.JSONDecodeError, InvalidInputError) as exc:
            number = exc.number if isinstance(exc, LineTooLong) else number
            raise UsageError(
                f"{args.file}:{number}: {first_line(exc)}; {_before(imported)}"
            ) from None
    _done(ctx, imported, skipped, events)
    return 0


def _before(imported: int) -> str:
    if not imported:
        return "stopped there: nothing was imported before it"
    whole = "is whole" if imported == 1 else "are whole"
    return f"stopped there: the {plural(imported, 'session')} imported before it {whole}"


def _done(ctx: Context, imported: int, skipped: int, events: int) -> None:
    existed = "existed and was skipped" if skipped == 1 else "existed and were skipped"
    ctx.err.print(
        f"imported {plural(imported, 'session')} ({plural(events, 'event')})"
        + (f"; {skipped:,} {existed}" if skipped else "")
    )


@contextlib.contextmanager
def _input(path: str) -> Iterator[tuple[IO[bytes], int | None]]:
    """The file (or stdin) to read, and its number of records when it can be read twice."""
    if path == "-":
        yield sys.stdin.buffer, None
        return
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below, after the count's own pass
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    with f:
        total = None
        if f.seekable():
            total = count_lines(f)
            f.seek(0)
        yield f, total
