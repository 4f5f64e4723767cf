"""Re-embedding stored entries: semantic recall turned on for a store written without it,
or another model rolled out.

Resumable by construction: an entry whose stored ``vkey`` is this model's key of what it is
embedded from (its text; a turn's with its neighbours', ``_vectors.vector_texts``), with a
vector of this dimension, is current and skipped, so a run that stops (Ctrl-C, a quota
error) is simply run again. A vector is stored only if the entry's content is still
the one embedded (compared in the script), so workers may write meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from redis_agent_sessions._redis.codec import check_id, text
from redis_agent_sessions.errors import CorruptDataError, InvalidInputError
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory._docs import turn_docs
from redis_agent_sessions.memory._embedders import Vectorizer
from redis_agent_sessions.memory._encoding import UNKNOWN_SESSION_ID
from redis_agent_sessions.memory._engine import MemoryEngine
from redis_agent_sessions.memory._reindex import owners, session_turns
from redis_agent_sessions.memory._store import NONE, MemoryStore
from redis_agent_sessions.models import Content

__all__ = ["ReembedReport", "reembed"]

_PAGE = 100
"""Entries read, embedded and written at a time."""


@dataclass
class ReembedReport:
    """What a re-embedding found and did (with ``dry_run``, ``embedded`` is what it would
    embed)."""

    model: str
    dimensions: int
    recorded: dict[str, Any] | None
    """The store's vector record before the run (None: no embedder had written)."""
    dry_run: bool
    users: int = 0
    entries: int = 0
    current: int = 0
    """Entries that already had a vector of this model for what they are embedded from."""
    embedded: int = 0
    skipped: int = 0
    """Entries that changed or went while being re-embedded (the next run does them)."""
    per_user: list[tuple[str, str, int]] = field(default_factory=list)
    """(app, user, entries) of each user found."""


async def reembed(
    engine: MemoryEngine,
    *,
    app: str | None,
    user: str | None,
    dry_run: bool,
    on_progress: Callable[[int, int], None] | None = None,
) -> ReembedReport:
    """Give every entry (of ``app``, of ``user``) a vector of ``engine``'s embedder;
    ``on_progress(done, total)`` after each page."""
    if engine.semantic is None:
        raise InvalidInputError("re-embedding needs an embedder")
    vectorizer = engine.semantic.vectorizer
    client, keys = engine.client, engine.keys
    app = None if app is None else check_id("app_name", app)
    user = None if user is None else check_id("user_id", user)
    report = ReembedReport(
        vectorizer.name, vectorizer.dimensions, await engine.recorded_vectors(), dry_run
    )
    report.per_user = await owners(client, keys, app, user)
    report.users = len(report.per_user)
    total = sum(n for _, _, n in report.per_user)
    reader = MemoryStore(client, keys, postings=NONE)
    for a, u, _ in report.per_user:
        writer = None if dry_run else await engine.adopt_vectors(a, u)
        embedded = _Turns(engine, a, u)
        start = 0
        while ids := [
            text(m)
            for m in await client.zrange(keys.memory_entries(a, u), start, start + _PAGE - 1)
        ]:
            start += len(ids)
            vectors_now = await reader.stored_vectors(a, u, ids)
            texts = await embedded.texts(ids, reader)
            todo = _stale(vectorizer, keys, a, u, ids, vectors_now, texts)
            report.entries += len(ids)
            report.current += len(ids) - len(todo)
            if writer is not None and todo:
                vectors = await vectorizer.mixed([t for *_, t in todo])
                rows = [(i, c, k, v) for (i, c, k, _), v in zip(todo, vectors, strict=True)]
                stored, skipped = await writer.set_vectors(a, u, vectorizer.name, rows)
                report.embedded += stored
                report.skipped += skipped
            elif todo:
                report.embedded += len(todo)
            if on_progress is not None:
                on_progress(report.entries, total)
    return report


class _Turns:
    """What each turn of a user's sessions is embedded from, as the writes make it: with its
    neighbours in its session (its stored events in order, learned facts left out)."""

    def __init__(self, engine: MemoryEngine, app: str, user: str) -> None:
        self._ctx, self._app, self._user = engine.ctx, app, user
        self._done: set[str] = set()
        self._texts: dict[str, tuple[str, ...]] = {}

    async def texts(self, ids: list[str], reader: MemoryStore) -> dict[str, tuple[str, ...]]:
        """The texts of those of ``ids`` that are turns of a session (others: their own)."""
        rows = await reader.read(self._app, self._user, ids, "session", "kind")
        for sid, kind in rows:
            sid = text(sid or "")
            if sid in ("", UNKNOWN_SESSION_ID) or sid in self._done or text(kind or "") == "fact":
                continue
            self._done.add(sid)
            turns = [
                t for t in await session_turns(self._ctx, self._app, self._user, sid) if not t.fact
            ]
            for doc in turn_docs(self._app, self._user, turns, reach=self._ctx.context_turns):
                self._texts[doc.id] = doc.embedded
        return {i: self._texts[i] for i in ids if i in self._texts}


def _stale(
    vectorizer: Vectorizer,
    keys: KeySpace,
    app: str,
    user: str,
    ids: list[str],
    rows: list[tuple[bytes | None, str, int]],
    texts: dict[str, tuple[str, ...]],
) -> list[tuple[str, bytes, str, tuple[str, ...]]]:
    """(id, content, vkey, texts embedded) of the entries without a current vector."""
    todo = []
    for memory_id, (content, vkey, size) in zip(ids, rows, strict=True):
        if content is None:
            continue  # deleted since the page was read
        try:
            body = Content.model_validate_json(content).text
        except ValidationError as exc:
            raise CorruptDataError(
                keys.memory_entry(app, user, memory_id), f"entry content is not Content: {exc}"
            ) from exc
        embedded = texts.get(memory_id, (body,))
        key = vectorizer.key(*embedded)
        if vkey != key or size != 4 * vectorizer.dimensions:
            todo.append((memory_id, content, key, embedded))
    return todo
