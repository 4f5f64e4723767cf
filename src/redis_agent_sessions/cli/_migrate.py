"""``migrate``: copy sessions from google-adk's DatabaseSessionService into Redis.

The source is read only through ADK's own service, so every schema version ADK reads
migrates as ADK itself returns it. Sessions already in Redis are skipped, which makes an
interrupted run safe to repeat.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from redis_agent_sessions._messages import plural
from redis_agent_sessions.cli._context import CliError, Context, NotFound, UsageError, first_line
from redis_agent_sessions.cli._records import import_record
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.state import split_state_delta

if TYPE_CHECKING:
    from google.adk.sessions import DatabaseSessionService, Session

__all__ = ["run"]

_CHUNK = 1000  # EXISTS per pipeline round trip


async def run(ctx: Context, args: argparse.Namespace) -> int:
    source, shown = _open(args.source)
    try:
        with _reading(shown):
            apps, sessions = await _listed(source, args.apps)
        metas = [ctx.engine.keys.session(s.app_name, s.user_id, s.id).meta for s in sessions]
        present = await _exists(ctx, metas)
        copied = skipped = events = 0
        gone: set[str] = set()
        with ctx.progress("migrating", len(sessions)) as bar:
            for listed, meta, there in zip(sessions, metas, present, strict=True):
                session = None
                if not there:
                    with _reading(shown):
                        session = await source.get_session(
                            app_name=listed.app_name, user_id=listed.user_id, session_id=listed.id
                        )
                if there:
                    skipped += 1
                elif session is None:  # deleted since it was listed: nothing left to copy
                    gone.add(meta)
                elif args.dry_run or await _import(ctx, session):
                    copied += 1
                    events += len(session.events)
                else:  # written by someone else since the EXISTS above
                    skipped += 1
                bar.advance(bar.task_ids[0])
    finally:
        await source.close()
    done = (
        f"{plural(copied, 'session')} ({plural(events, 'event')}) from "
        f"{plural(len(apps), 'app')}; {skipped:,} already in Redis"
    )
    if args.dry_run:
        ctx.out.print(f"dry run: would migrate {done}; nothing written")
        return 0
    expected = [meta for meta in metas if meta not in gone]
    found = sum(await _exists(ctx, expected))
    expected_text = plural(len(expected), "source session")
    ctx.out.print(f"migrated {done}; check: {found:,} of {expected_text} present")
    if found != len(expected):
        missing = len(expected) - found
        are = "is" if missing == 1 else "are"
        raise NotFound(f"check failed: {plural(missing, 'source session')} {are} not in Redis")
    return 0


def _open(url: str) -> tuple[DatabaseSessionService, str]:
    """ADK's service on ``url``, and the URL as messages show it (no password)."""
    try:
        from google.adk.sessions import DatabaseSessionService
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError
    except ImportError as exc:
        raise UsageError(
            f"migrate needs google-adk and SQLAlchemy ({exc.name} is missing): "
            "pip install 'redis-agent-sessions[adk]' 'sqlalchemy[asyncio]'"
        ) from None
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise UsageError(
            "--from is not a database URL (e.g. sqlite+aiosqlite:///sessions.db)"
        ) from None
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite":
        # SQLite would create a missing file and ADK its tables in it: a mistyped path
        # would then "migrate" an empty database instead of failing.
        path = parsed.database or ":memory:"
        if path == ":memory:" or not Path(path).is_file():
            raise UsageError(f"--from {shown}: no SQLite database file at {path!r}")
    # ADK logs some failures before raising them: the raised error is the one line we print.
    logging.getLogger("google_adk").addHandler(logging.NullHandler())
    try:
        return DatabaseSessionService(db_url=url), shown
    except (ValueError, ImportError) as exc:
        # ADK's message names the URL (password hidden); the cause says what is missing.
        cause = f" ({first_line(exc.__cause__)})" if exc.__cause__ is not None else ""
        raise UsageError(f"bad --from: {first_line(exc)}{cause}") from None


@contextmanager
def _reading(shown: str) -> Iterator[None]:
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except (SQLAlchemyError, OSError) as exc:
        raise UsageError(f"cannot read --from {shown}: {first_line(exc)}") from None


async def _listed(
    source: DatabaseSessionService, wanted: list[str] | None
) -> tuple[list[str], list[Session]]:
    """The apps and their sessions (without events); NotFound when nothing matches."""
    await source.prepare_tables()
    apps = list(dict.fromkeys(wanted)) if wanted else await _app_names(source)
    sessions: list[Session] = []
    for app in apps:
        found = (await source.list_sessions(app_name=app)).sessions
        if not found:
            raise NotFound(f"app {app!r} has no sessions in the source database")
        sessions += found
    if not sessions:
        raise NotFound("the source database holds no sessions")
    return apps, sessions


async def _app_names(source: DatabaseSessionService) -> list[str]:
    # ADK has no public way to list apps. Its own storage model and session factory are the
    # least bad way: they follow whichever schema version ADK detected, as SQL of ours
    # would not. Sessions rather than app_states rows, so apps whose sessions were all
    # deleted are not listed.
    from sqlalchemy import select

    model = source._get_schema_classes().StorageSession
    async with source._get_database_session_factory(read_only=True)() as db:
        rows = await db.execute(select(model.app_name).distinct().order_by(model.app_name))
        return list(rows.scalars())


async def _exists(ctx: Context, keys: list[str]) -> list[bool]:
    found: list[bool] = []
    for start in range(0, len(keys), _CHUNK):
        pipe = ctx.client.pipeline(transaction=False)
        for key in keys[start : start + _CHUNK]:
            pipe.exists(key)
        found += [bool(n) for n in await pipe.execute()]
    return found


async def _import(ctx: Context, session: Session) -> bool:
    try:
        return await import_record(ctx.import_engine, _record(session))
    except InvalidInputError as exc:
        name = f"{session.app_name}/{session.user_id}/{session.id}"
        raise CliError(f"session {name!r} cannot be stored: {first_line(exc)}") from None


def _record(session: Session) -> dict[str, Any]:
    """The session in the export format (see _records): state split by scope, temp: dropped."""
    scoped = split_state_delta(session.state)
    events = [orjson.loads(e.model_dump_json(exclude_none=True)) for e in session.events]
    return {
        "app_name": session.app_name,
        "user_id": session.user_id,
        "id": session.id,
        # ADK's Session does not expose its creation time; its first event is the
        # earliest that can be known through the service.
        "create_time": min([session.last_update_time, *(e.timestamp for e in session.events)]),
        "last_update_time": session.last_update_time,
        "state": {"session": scoped.session, "user": scoped.user, "app": scoped.app},
        "events": events,
    }
