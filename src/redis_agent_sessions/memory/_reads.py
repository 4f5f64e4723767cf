"""Searches of memory: the backend's keyword ranking (``_ranking``), fused with the nearest
vectors when the service has an embedder (``_vectors``), and the entries read back; facts
past their time to live are forgotten on the way."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from redis_agent_sessions._redis.codec import check_id, text
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.memory._context import Context
from redis_agent_sessions.memory._docs import response
from redis_agent_sessions.memory._filters import NO_FILTER, Compiled
from redis_agent_sessions.memory._models import SearchMemoryResponse
from redis_agent_sessions.memory._ranking import search_terms
from redis_agent_sessions.memory._search import IndexSearch
from redis_agent_sessions.memory._store import MemoryStore
from redis_agent_sessions.memory._vectors import (
    FUSION_DEPTH,
    RESCORED,
    Hit,
    fuse,
    similarities,
)

__all__ = ["Reads"]

_MAX_LIMIT = 1000


class Reads:
    """search_memory, on the core models."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def search(
        self,
        *,
        app_name: str,
        user_id: str,
        query: str,
        limit: int = 10,
        vectors: bool = True,
        explain: bool = False,
        expired: bool = False,
        where: Compiled = NO_FILTER,
        recency_half_life: float | None = None,
    ) -> SearchMemoryResponse:
        """Ranked entries; with ``explain`` (the CLI), keyword results also say how they were
        found in ``custom_metadata[RETRIEVAL_KEY]`` (hybrid results always do). ``where``:
        the search's filter (checked: ``_filters.compile_filter``); ``recency_half_life``:
        seconds after which an entry's keyword score is halved (None: no recency)."""
        app, user = check_id("app_name", app_name), check_id("user_id", user_id)
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, got {type(query).__name__}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidInputError(f"limit must be a non-negative int, got {limit!r}")
        terms = search_terms(query)
        if not terms or limit == 0:
            return SearchMemoryResponse()
        ctx = self.ctx
        store, search = await ctx.ready()
        if isinstance(search, IndexSearch) and search.layout.provisioned:
            # An app's index is an operator's to make: a search says when it is missing
            # (checked once per process), where a user's, made at their first write, is not.
            await search.ensure_index(app, user)
        ranker = ctx.ranker
        limit = min(limit, _MAX_LIMIT)
        refine = where.with_recency(time.time(), recency_half_life)
        found: dict[str, dict[str, Any]] = {}
        hybrid = ctx.semantic is not None and vectors
        depth = max(limit, FUSION_DEPTH) if hybrid else limit
        hits: list[Hit] = []
        near: dict[str, float] = {}
        if not hybrid:
            ranked = await ranker.rank(app, user, terms, depth, refine)
        else:
            assert ctx.vectorizer is not None
            vector = await ctx.vectorizer.query(query)
            ranked, hits = await asyncio.gather(
                ranker.rank(app, user, terms, depth, refine),
                search.nearest(app, user, vector, depth),
            )
            if where:
                hits = await _within(store, app, user, hits, where)
            # The best keyword matches the vectors did not return are rescored by theirs too.
            returned = {h.id for h in hits}
            best = ranked.hits[: max(RESCORED, 2 * limit)]
            others = [i for i, _ in best if i not in returned]
            if others:
                rows = await store.read(app, user, others, "vec")
                near = similarities(
                    ctx.vectorizer, vector, [(i, r[0]) for i, r in zip(others, rows, strict=True)]
                )
        ids = [memory_id for memory_id, _ in ranked.hits]
        if hybrid:
            assert ctx.semantic is not None
            fused = fuse(
                ranked.hits, hits, near, ctx.semantic.min_similarity, limit, ranked.entries
            )
            ids, found = [memory_id for memory_id, _ in fused], dict(fused)
        elif explain:
            found = {
                memory_id: {
                    "found_by": ["keyword"],
                    "keyword_rank": rank,
                    "keyword_score": round(score, 6),
                }
                for rank, (memory_id, score) in enumerate(ranked.hits, 1)
            }
        entries = await store.fetch(app, user, ids)
        now = time.time()
        live = [e for e in entries if e.expires is None or e.expires > now]
        if len(live) < len(entries) and not expired:
            # Facts past their time to live are forgotten now, and the search asked again
            # (once: what another worker keeps changing is left out, never returned).
            await (await ctx.facts()).expire(app, user, now)
            return await self.search(
                app_name=app, user_id=user, query=query, limit=limit, vectors=vectors,
                explain=explain, expired=True, where=where,
                recency_half_life=recency_half_life,
            )  # fmt: skip
        return response(live, found)


async def _within(
    store: MemoryStore, app: str, user: str, hits: list[Hit], where: Compiled
) -> list[Hit]:
    """The vector hits within the filter (the vector index has no filter fields: the
    nearest ``FUSION_DEPTH`` are read, and those outside it dropped)."""
    rows = await store.read(app, user, [h.id for h in hits], "fx", "ts")
    return [
        h
        for h, (fx, ts) in zip(hits, rows, strict=True)
        if ts is not None and where.matches(text(fx or b"").split(","), float(ts))
    ]
