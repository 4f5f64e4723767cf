"""Indexing stored entries again: every entry analysed by another version of the analysis
(``reindex``, after a change of ``_analysis``), and the turns around a deleted entry, which
were found by its words.

An entry is scored with the words of the turns around it in its session (``_analysis``), so
it is analysed with its session's stored entries in order (time, then id). Entries added
without a session (``add_memory``, events without a session id) have no context.

Resumable by construction: a session whose entries are all indexed by the current analysis
is skipped, so a run that stops is simply run again. Each write is compare-and-set on what
the entry is found by (``memory_put.lua``), so workers may write meanwhile; vectors stay.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from pydantic import ValidationError

from redis_agent_sessions._redis.codec import check_id, text
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import CorruptDataError, InvalidInputError
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory._analysis import analysis_id
from redis_agent_sessions.memory._docs import Turn, turn_docs
from redis_agent_sessions.memory._encoding import BATCH_ENTRIES, UNKNOWN_SESSION_ID, Doc, batches
from redis_agent_sessions.memory._filters import entry_tokens
from redis_agent_sessions.memory._store import MemoryStore
from redis_agent_sessions.models import Content

__all__ = ["ReindexReport", "owners", "refresh_around", "reindex", "session_of", "session_turns"]

_PAGE = 500
_FIELDS = ("id", "session", "author", "ts", "timestamp", "content", "meta", "an", "fx", "kind")
_FACT_FIELDS = ("kind", "rev", "topics", "sources", "expires", "created")
"""A learned fact's own fields, kept as they are when it is written again."""


async def owners(
    client: Any, keys: KeySpace, app: str | None, user: str | None
) -> list[tuple[str, str, int]]:
    """The (app, user, entries) to re-embed: one user, or every user of an app or of the
    store, found by SCAN (an operator's one-off walk: memory keeps no registry of users)."""
    if user is not None:
        if app is None:
            raise InvalidInputError("a user is named within an app: give the app too")
        found = [(app, user)]
    else:
        seen = set()
        async for key in client.scan_iter(
            match=keys.memory_entries_pattern(app), count=1000, _type="zset"
        ):
            owner = keys.memory_owner(text(key))
            if owner is not None and (app is None or owner[0] == app):
                seen.add(owner)
        found = sorted(seen)
    pipe = client.pipeline(transaction=False)
    for a, u in found:
        pipe.zcard(keys.memory_entries(a, u))
    counts = await pipe.execute() if found else []
    return [(a, u, int(n)) for (a, u), n in zip(found, counts, strict=True) if n]


class MemoryContext(Protocol):
    """What reindexing needs of the memory service's context (whose writes call back into
    this module)."""

    @property
    def client(self) -> Any: ...

    @property
    def keys(self) -> KeySpace: ...

    @property
    def context_turns(self) -> int: ...

    @property
    def config(self) -> SessionServiceConfig: ...

    async def ready_for(self, app: str, user: str) -> tuple[MemoryStore, Any]: ...


@dataclass
class ReindexReport:
    """What a reindex found and did (with ``dry_run``, ``reindexed`` is what it would do)."""

    dry_run: bool
    users: int = 0
    entries: int = 0
    current: int = 0
    """Entries already indexed by this version's analysis."""
    reindexed: int = 0
    per_user: list[tuple[str, str, int]] = field(default_factory=list)


@dataclass(slots=True)
class _Stored(Turn):
    current: bool = True
    """Indexed by this version's analysis, with the filter tokens of this service's
    ``indexed_metadata``."""
    fact: dict[str, Any] = field(default_factory=dict)
    """A learned fact's own fields (``_FACT_FIELDS``)."""


async def _load(
    client: Any, ctx: MemoryContext, app: str, user: str, ids: Sequence[str]
) -> list[_Stored]:
    keys, reach = ctx.keys, ctx.context_turns
    pipe = client.pipeline(transaction=False)
    for memory_id in ids:
        pipe.hmget(keys.memory_entry(app, user, memory_id), *_FIELDS)
    out = []
    for memory_id, row in zip(ids, await pipe.execute() if ids else [], strict=True):
        if row[0] is None:
            continue  # deleted meanwhile
        key = keys.memory_entry(app, user, memory_id)
        try:
            content = Content.model_validate_json(row[5])
            meta = orjson.loads(row[6] or b"{}")
            ts = float(row[3])
        except (ValidationError, ValueError, TypeError, orjson.JSONDecodeError) as exc:
            raise CorruptDataError(key, f"not a memory entry: {exc}") from exc
        author, iso, sid = text(row[2] or ""), text(row[4] or ""), text(row[1] or "")
        # Without a session an entry has no context: the reach does not change its analysis.
        wanted = analysis_id() if sid in ("", UNKNOWN_SESSION_ID) else analysis_id(reach)
        fact = text(row[9] or "") == "fact"
        extra = {}
        if fact:
            extra_row = await client.hmget(key, *_FACT_FIELDS)  # facts are few
            extra = {n: text(v) for n, v in zip(_FACT_FIELDS, extra_row, strict=True) if v}
        # Entries written before filters (or before a field was declared) get their tokens.
        tokens = entry_tokens(
            kind="fact" if fact else "event",
            author=author[1:] if author else None,
            session=sid,
            topics=orjson.loads(extra["topics"]) if extra.get("topics") else (),
            meta=meta if isinstance(meta, dict) else {},
            indexed=ctx.config.indexed_metadata,
        )
        out.append(
            _Stored(
                memory_id,
                sid,
                author[1:] if author else None,
                ts,
                iso[1:] if iso else None,
                row[5],
                content.text,
                meta,
                current=text(row[7] or "") == wanted and text(row[8] or "") == ",".join(tokens),
                fact=extra,
            )
        )
    return out


def _docs(
    ctx: MemoryContext, app: str, user: str, turns: list[_Stored], todo: set[str]
) -> list[Doc]:
    """The docs of the ``todo`` ids among ``turns`` (one session, in order); vectors stay."""
    docs = turn_docs(app, user, turns, todo, reach=ctx.context_turns)
    facts = {t.id: t.fact for t in turns if t.fact}
    for doc in docs:
        doc.keep_vector = True
        doc.fields.update(facts.get(doc.id, {}))
    return docs


async def session_turns(ctx: MemoryContext, app: str, user: str, sid: str) -> list[_Stored]:
    """The stored entries of a session, in order (time, then id)."""
    client, keys = ctx.client, ctx.keys
    ids = sorted(text(m) for m in await client.smembers(keys.memory_session(app, user, sid)))
    turns = await _load(client, ctx, app, user, ids)
    return sorted(turns, key=lambda t: (t.ts, t.id))


async def _write(store: MemoryStore, app: str, user: str, sid: str, docs: list[Doc]) -> None:
    for batch in batches(docs, BATCH_ENTRIES):
        await store.put(app, user, batch, mode="replace", session_id=sid or None)


async def session_of(ctx: MemoryContext, app: str, user: str, memory_id: str) -> list[_Stored]:
    """The stored turns of the session of an entry about to be deleted (read first, so that
    a user who may not read them is refused before anything is deleted); [] when it has none."""
    store, _ = await ctx.ready_for(app, user)
    [(sid,)] = await store.read(app, user, [memory_id], "session")
    if sid is None or text(sid) in ("", UNKNOWN_SESSION_ID):
        return []
    return await session_turns(ctx, app, user, text(sid))


async def refresh_around(
    ctx: MemoryContext,
    app: str,
    user: str,
    turns: list[_Stored],
    memory_id: str,
    embed: Callable[[MemoryStore, list[Doc]], Awaitable[None]] | None = None,
) -> None:
    """Index again the turns (of ``session_of``) up to two away from the deleted one;
    ``embed`` gives them vectors (a turn's is made with its neighbours')."""
    at = next((i for i, t in enumerate(turns) if t.id == memory_id), None)
    if at is None:
        return
    todo = {t.id for t in turns[max(0, at - 2) : at + 3] if t.id != memory_id}
    rest = [t for t in turns if t.id != memory_id]
    if todo:
        store, _ = await ctx.ready_for(app, user)
        docs = _docs(ctx, app, user, rest, todo)
        if embed is not None:
            await embed(store, docs)
        await _write(store, app, user, rest[0].session, docs)


async def reindex(
    ctx: MemoryContext,
    *,
    app: str | None,
    user: str | None,
    dry_run: bool,
    on_progress: Callable[[int, int], None] | None = None,
) -> ReindexReport:
    """Index every entry (of ``app``, of ``user``) by this version's analysis;
    ``on_progress(done, total)`` after each page."""
    client, keys = ctx.client, ctx.keys
    app = None if app is None else check_id("app_name", app)
    user = None if user is None else check_id("user_id", user)
    report = ReindexReport(dry_run)
    report.per_user = await owners(client, keys, app, user)
    report.users = len(report.per_user)
    total = sum(n for _, _, n in report.per_user)
    for a, u, _ in report.per_user:
        store = None if dry_run else (await ctx.ready_for(a, u))[0]
        start = 0
        handled: set[str] = set()  # ids reindexed with their session, from a later page
        entries = keys.memory_entries(a, u)
        while ids := [text(m) for m in await client.zrange(entries, start, start + _PAGE - 1)]:
            start += len(ids)
            page = [t for t in await _load(client, ctx, a, u, ids) if t.id not in handled]
            report.entries += len(page)
            stale = [t for t in page if not t.current]
            report.current += len(page) - len(stale)
            for sid in sorted({t.session for t in stale}):
                turns = (
                    [t for t in stale if t.session == sid]
                    if sid in ("", UNKNOWN_SESSION_ID)
                    else await session_turns(ctx, a, u, sid)
                )
                todo = {t.id for t in turns if not t.current and t.id not in handled}
                handled |= todo
                report.reindexed += len(todo)
                if store is not None:
                    await _write(store, a, u, sid, _docs(ctx, a, u, turns, todo))
            if on_progress is not None:
                on_progress(report.entries, total)
    return report
