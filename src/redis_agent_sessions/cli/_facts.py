"""``facts``: a user's learned facts, newest change first; ``--history`` puts each fact's
earlier revisions under it; ``--delete FACT_ID`` forgets one fact and its history.

One listing with flags, rather than a FACT_ID argument showing one fact: a history is
short (``FactSettings.history``, 10 by default), so the listing can carry every fact's
whole, and the one id an operator names is the one ``--delete`` takes, as copied from it.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.text import Text

from redis_agent_sessions._messages import plural, visible
from redis_agent_sessions._redis.codec import check_id
from redis_agent_sessions.cli._context import Context, NotFound, utc, when
from redis_agent_sessions.memory import RedisMemoryService
from redis_agent_sessions.memory._facts import revisions
from redis_agent_sessions.memory._generators import Fact, FactRevision, FactSource

__all__ = ["run"]

_TEXT = 100
"""Characters of a fact's text in the table (``--json`` has all of it)."""


async def run(ctx: Context, args: argparse.Namespace) -> int:
    app, user = check_id("app_name", args.app), check_id("user_id", args.user)
    if not await ctx.client.exists(ctx.keys.memory_backend()):
        # Reading facts would pick and record a backend: a read-only command must not.
        raise NotFound("nothing is in memory yet (no memory backend was ever chosen)")
    memory = ctx.memory()
    if args.delete is not None:
        return await _delete(ctx, memory, app, user, check_id("fact_id", args.delete))
    facts = await memory.list_facts(app_name=app, user_id=user)
    if not facts:
        raise NotFound(f"no learned facts of user {user!r} in app {app!r}")
    histories = await _histories(ctx, app, user, facts) if args.history else None
    if ctx.json:
        rows = [_fact_json(f) for f in facts]
        if histories is not None:
            for row, revisions in zip(rows, histories, strict=True):
                row["history"] = [_revision_json(r) for r in revisions]
        ctx.print_json(rows)
        return 0
    table = ctx.table("ID", "TEXT", "TOPICS", "REV", "UPDATED", "EXPIRES", "SOURCES")
    for i, fact in enumerate(facts):
        # Text cells: what a model wrote is shown as written, never read as rich markup.
        table.add_row(
            Text(visible(fact.id)),
            Text(visible(_short(fact.text))),
            Text(visible(", ".join(fact.topics) or "-")),
            str(fact.revision),
            when(fact.updated),
            when(fact.expires),
            Text(visible(_sources(fact.sources))),
        )
        for was in histories[i] if histories else []:
            # Under the fact it became, dimmed: what it said before, newest first.
            table.add_row(
                "",
                Text(visible(f"was: {_short(was.text)}"), style="dim"),
                Text(visible(", ".join(was.topics) or "-"), style="dim"),
                Text(str(was.revision), style="dim"),
                Text(when(was.updated), style="dim"),
                "",
                Text(visible(_sources(was.sources)), style="dim"),
            )
    ctx.out.print(table)
    earlier = sum(map(len, histories)) if histories is not None else None
    ctx.out.print(
        Text(
            f"{plural(len(facts), 'fact')} of user {user!r} in app {app!r}"
            + ("" if earlier is None else f"; {plural(earlier, 'earlier revision')} shown")
        )
    )
    return 0


async def _delete(
    ctx: Context, memory: RedisMemoryService, app: str, user: str, fact_id: str
) -> int:
    # Read first, as the fact store does: an id of another memory entry (a session's turn)
    # is no fact, and delete_memory would delete that entry instead.
    [fact] = await (await memory._memory.facts()).read(app, user, [fact_id])
    if fact is None:
        raise NotFound(f"no learned fact {fact_id!r} of user {user!r} in app {app!r}")
    earlier = len(await memory.fact_history(app_name=app, user_id=user, fact_id=fact_id))
    await memory.delete_memory(app_name=app, user_id=user, memory_id=fact_id)
    if ctx.json:
        ctx.print_json({"deleted": {**_fact_json(fact), "history_revisions": earlier}})
        return 0
    ctx.err.print(
        Text(
            f"deleted fact {fact_id!r} of user {user!r} in app {app!r} (revision "
            f"{fact.revision}, {plural(earlier, 'earlier revision')}): {visible(_short(fact.text))}"
        ),
        soft_wrap=True,  # one line, however long: stderr is no terminal to wrap for
    )
    return 0


async def _histories(
    ctx: Context, app: str, user: str, facts: list[Fact]
) -> list[list[FactRevision]]:
    """Each fact's earlier revisions, newest first, in one pipeline (one round trip, not one
    per fact as ``fact_history`` would take)."""
    pipe = ctx.client.pipeline(transaction=False)
    keys = [ctx.keys.memory_fact_history(app, user, f.id) for f in facts]
    for key in keys:
        pipe.lrange(key, 0, -1)
    now = time.time()
    return [revisions(k, raws, now) for k, raws in zip(keys, await pipe.execute(), strict=True)]


def _fact_json(fact: Fact) -> dict[str, Any]:
    return {
        "id": fact.id,
        "text": fact.text,
        "topics": fact.topics,
        "revision": fact.revision,
        "created": utc(fact.created),
        "updated": utc(fact.updated),
        "expires": utc(fact.expires),
        "sources": [s.model_dump() for s in fact.sources],
        "metadata": fact.metadata,
        "revision_labels": fact.revision_labels,
    }


def _revision_json(was: FactRevision) -> dict[str, Any]:
    return {
        "revision": was.revision,
        "text": was.text,
        "topics": was.topics,
        "updated": utc(was.updated),
        "sources": [s.model_dump() for s in was.sources],
        "labels": was.labels,
        "expires": utc(was.expires),
    }


def _sources(sources: list[FactSource]) -> str:
    """``s1 (2 events), s2 (1 event)``: the sessions a fact comes from."""
    return (
        ", ".join(f"{s.session_id} ({plural(len(s.event_ids), 'event')})" for s in sources) or "-"
    )


def _short(text: str) -> str:
    """One table line: a fact may hold line breaks, which would break the table's rows."""
    line = " ".join(text.split())
    return line if len(line) <= _TEXT else line[: _TEXT - 1] + "…"
