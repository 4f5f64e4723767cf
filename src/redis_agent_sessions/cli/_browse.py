"""Read-only commands: ``ls``, ``show``, ``tail`` and ``search``."""

from __future__ import annotations

import argparse
from typing import Any

from rich.text import Text

from redis_agent_sessions._messages import visible
from redis_agent_sessions._redis.codec import text
from redis_agent_sessions.cli._context import (
    Context,
    NotFound,
    UsageError,
    no_session,
    sessions_of_whom,
    utc,
    when,
)
from redis_agent_sessions.cli._follow import follow
from redis_agent_sessions.cli._options import PAGE_FLAG
from redis_agent_sessions.cli._prefixes import apps_hint, prefixes_hint
from redis_agent_sessions.cli._records import read_record
from redis_agent_sessions.cli._render import event_lines, short_json
from redis_agent_sessions.errors import InvalidInputError, SessionNotFoundError
from redis_agent_sessions.keys import unescape
from redis_agent_sessions.memory._analysis import text_terms
from redis_agent_sessions.memory._encoding import parse_iso
from redis_agent_sessions.memory._text import query_words
from redis_agent_sessions.memory._vectors import RETRIEVAL_KEY

__all__ = ["run"]


async def run(ctx: Context, args: argparse.Namespace) -> int:
    if args.command == "ls":
        return await (_ls_app(ctx, args) if args.app is not None else _ls_apps(ctx))
    if args.command == "show":
        return await _show(ctx, args)
    if args.command == "tail":
        return await _tail(ctx, args)
    return await _search(ctx, args)


async def _ls_apps(ctx: Context) -> int:
    """Apps from the apps index (written at create time: no keyspace scan)."""
    raw: list[Any] = await ctx.client.zrange(ctx.keys.apps(), 0, -1, withscores=True)
    apps = [(unescape(text(member)), float(score)) for member, score in raw]
    if not apps:
        prefix = ctx.config.key_prefix
        hint = await prefixes_hint(ctx.client, prefix, None)
        raise NotFound(f"no apps: no session was created under the key prefix {prefix!r}{hint}")
    pipe = ctx.client.pipeline(transaction=False)
    for app, _ in apps:
        pipe.zcard(ctx.keys.app_sessions(app))
    counts = await pipe.execute()
    rows = [
        {"app_name": app, "sessions": count, "first_session": utc(first)}
        for (app, first), count in zip(apps, counts, strict=True)
    ]
    if ctx.json:
        ctx.print_json(rows)
        return 0
    table = ctx.table("APP", "SESSIONS", "FIRST SESSION")
    for row in rows:
        table.add_row(visible(row["app_name"]), str(row["sessions"]), row["first_session"])
    ctx.out.print(table)
    return 0


async def _ls_app(ctx: Context, args: argparse.Namespace) -> int:
    order = args.order
    if ctx.cluster and args.user is None and order == "updated":
        # A cluster keeps no app-wide by-update index (it would span every user's slot).
        order = "created"
    page = await ctx.sessions.list_sessions_page(
        app_name=args.app,
        user_id=args.user,
        page_size=min(args.limit, 1000),
        page_token=args.page,
        order_by=order,
        newest_first=not args.oldest_first,
    )
    if not page.sessions and args.page is None:
        raise NotFound(await _none_listed(ctx, args))
    pipe = ctx.client.pipeline(transaction=False)
    for s in page.sessions:
        keys = ctx.keys.session(s.app_name, s.user_id, s.id)
        pipe.hget(keys.meta, "create_time")
        pipe.xlen(keys.events)
        pipe.hlen(keys.state)
    extra = await pipe.execute()
    rows = [
        {
            "user_id": s.user_id,
            "id": s.id,
            "create_time": utc(float(extra[3 * i])) if extra[3 * i] is not None else None,
            "last_update_time": utc(s.last_update_time),
            "events": extra[3 * i + 1],
            "state_keys": extra[3 * i + 2],
        }
        for i, s in enumerate(page.sessions)
    ]
    if ctx.json:
        ctx.print_json({"sessions": rows, "next_page_token": page.next_page_token})
        return 0
    table = ctx.table("USER", "SESSION", "CREATED", "UPDATED", "EVENTS", "STATE KEYS")
    for row in rows:
        table.add_row(
            visible(row["user_id"]),
            visible(row["id"]),
            row["create_time"] or "-",
            row["last_update_time"],
            str(row["events"]),
            str(row["state_keys"]),
        )
    ctx.out.print(table)
    if order != args.order:
        ctx.err.print("(cluster: app-wide listings are by creation time)")
    if page.next_page_token:
        ctx.out.print(f"next page: {PAGE_FLAG} {page.next_page_token}")
    return 0


async def _none_listed(ctx: Context, args: argparse.Namespace) -> str:
    """Why ``ls APP`` lists nothing, naming, when this prefix holds none of the app, its apps
    with a name close to it and the other key prefixes that hold sessions of the app (or of
    any app)."""
    prefix = ctx.config.key_prefix
    hint = ""
    if args.user is None or not await ctx.client.zcard(ctx.keys.app_sessions(args.app)):
        hint = await apps_hint(ctx.client, ctx.keys, args.app)
        hint += await prefixes_hint(ctx.client, prefix, args.app)
    whom = sessions_of_whom(args.app, args.user)
    return f"no sessions for {whom} under the key prefix {prefix!r}{hint}"


async def _show(ctx: Context, args: argparse.Namespace) -> int:
    record = await read_record(ctx.engine, args.app, args.user, args.session, last=args.last)
    if record is None:
        raise no_session(args)
    if ctx.json:  # the record as `export` writes it (epoch times: data, not a report)
        ctx.print_json(record)
        return 0
    total = await ctx.client.xlen(ctx.keys.session(args.app, args.user, args.session).events)
    ctx.out.print(Text(f"session {visible(record['id'])}", style="bold"))
    ctx.out.print(f"app {visible(record['app_name'])}   user {visible(record['user_id'])}")
    ctx.out.print(
        f"created {when(record['create_time'])}   "
        f"updated {when(record['last_update_time'])}   events {total}"
        + (f"   ttl {record['ttl']} s" if "ttl" in record else "")
    )
    ctx.out.print()
    table = ctx.table("SCOPE", "KEY", "VALUE")
    for scope, prefix in (("session", ""), ("user", "user:"), ("app", "app:")):
        for key, value in record["state"][scope].items():
            table.add_row(scope, visible(prefix + key), visible(short_json(value)))
    if table.row_count:
        ctx.out.print(Text("state", style="bold"))
        ctx.out.print(table)
        ctx.out.print()
    shown = len(record["events"])
    title = f"events (last {shown} of {total})" if shown < total else "events"
    ctx.out.print(Text(title, style="bold"))
    for event in record["events"]:
        for line in event_lines(event):
            ctx.out.print(line)
    return 0


async def _tail(ctx: Context, args: argparse.Namespace) -> int:
    try:
        page = await ctx.sessions.list_events(
            app_name=args.app,
            user_id=args.user,
            session_id=args.session,
            limit=max(args.lines, 1),
            newest_first=True,
        )
    except SessionNotFoundError:
        raise no_session(args) from None
    newest = page.events[0].id if page.events else None
    for event in reversed(page.events[: args.lines]):
        _print_event(ctx, event.model_dump(mode="json", exclude_none=True))
    if not args.follow:
        return 0
    await follow(
        ctx, args, newest, lambda e: _print_event(ctx, e.model_dump(mode="json", exclude_none=True))
    )
    ctx.err.print("(the session was deleted or expired)")
    return 0


def _print_event(ctx: Context, event: dict[str, Any]) -> None:
    if ctx.json:
        ctx.print_json(event)
        return
    for line in event_lines(event):
        ctx.out.print(line)
    ctx.out.file.flush()


async def _search(ctx: Context, args: argparse.Namespace) -> int:
    # The query's words as typed, each with its term (stop words have none).
    wanted = {w: t for w in sorted(query_words(args.query)) for t in text_terms(w, split=False)}
    if not wanted:
        raise UsageError(f"the query has no words to search for (stop words only?): {args.query!r}")
    if not await ctx.client.exists(ctx.keys.memory_backend()):
        # Searching would pick and record a backend: a read-only command must not.
        raise NotFound("nothing is in memory yet (no memory backend was ever chosen)")
    memory = ctx.memory()
    found = await memory._memory.reads.search(
        app_name=args.app, user_id=args.user, query=args.query, limit=args.limit, explain=True
    )
    if not found.memories:
        raise NotFound(f"nothing in memory of user {args.user!r} in app {args.app!r} matches")
    rows: list[dict[str, Any]] = []
    pipe = ctx.client.pipeline(transaction=False)
    for entry in found.memories:
        pipe.hget(ctx.keys.memory_entry(args.app, args.user, entry.id or ""), "tf")
    # tf: the entry's terms with its context, as "term:quarters".
    stored = await pipe.execute()
    indexed = [{p.rpartition(":")[0] for p in text(tf or "").split()} for tf in stored]
    for entry, terms in zip(found.memories, indexed, strict=True):
        how = entry.custom_metadata.pop(RETRIEVAL_KEY, {})
        said = set(text_terms(entry.content.text))
        rows.append(
            {
                "score": how.get("keyword_score") or how.get("score"),
                "found_by": how.get("found_by", []),
                "matched_words": [w for w, t in wanted.items() if t in said],
                # Found by the turns around it (or inside a longer run of text).
                "matched_around": [w for w, t in wanted.items() if t not in said and t in terms],
                "id": entry.id,
                "author": entry.author,
                "timestamp": _entry_time(entry.timestamp),
                "text": entry.content.text,
                "custom_metadata": entry.custom_metadata,
            }
        )
    if ctx.json:
        ctx.print_json(rows)
        return 0
    table = ctx.table("SCORE", "MATCHED", "WHEN", "AUTHOR", "TEXT")
    for row in rows:
        around = [f"({word})" for word in row["matched_around"]]
        table.add_row(
            "-" if row["score"] is None else f"{row['score']:.2f}",
            ", ".join([*row["matched_words"], *around]),
            row["timestamp"] or "-",
            visible(str(row["author"] or "-")),
            visible(str(row["text"])[:100]),
        )
    ctx.out.print(table)
    ctx.out.print(
        f"backend: {await memory.backend()}   score = BM25 (higher is better); "
        "(word): not said in the entry, found by the turns around it"
    )
    return 0


def _entry_time(value: str | None) -> str | None:
    """A memory entry's ISO-8601 timestamp (ADK writes local time without a zone) in the
    output's format, read as the memory service reads it; as stored if it cannot be read."""
    if value is None:
        return None
    try:
        return utc(parse_iso(value))
    except (InvalidInputError, OverflowError, OSError, ValueError):
        return value
