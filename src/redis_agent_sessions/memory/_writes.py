"""Writes of memory: a session's or events' entries, explicit entries, deletes; with a
generator, learned facts instead of (or besides) the events; with an embedder, vectors for
the entries that need one, made before anything is written."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from redis_agent_sessions._redis.codec import check_id, check_sequence, text
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.memory._consolidate import Consolidator, checked_events
from redis_agent_sessions.memory._context import Context
from redis_agent_sessions.memory._docs import Turn, entry_doc, event_turns, iter_turn_docs, metadata
from redis_agent_sessions.memory._encoding import (
    BATCH_ENTRIES,
    UNKNOWN_SESSION_ID,
    VECTOR_BATCH_ENTRIES,
    Doc,
)
from redis_agent_sessions.memory._jobs import JobQueue
from redis_agent_sessions.memory._models import MemoryEntry
from redis_agent_sessions.memory._reindex import refresh_around, session_of
from redis_agent_sessions.memory._request_options import REQUEST_KEYS, RequestOptions
from redis_agent_sessions.memory._search import IndexSearch, PlainSearch
from redis_agent_sessions.memory._store import MemoryStore
from redis_agent_sessions.models import Event, Session

__all__ = ["Writes"]


class Writes:
    """add_session, add_events, add_memory and delete, on the core models."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def add_session(
        self, session: Session, custom_metadata: Mapping[str, object] | None = None
    ) -> None:
        # In bounded batches, tagged with one ingest id: the entries the session no longer
        # has are removed only after the last batch is stored.
        if not isinstance(session, Session):
            raise InvalidInputError(f"not a session: {type(session).__name__}")
        app, user = check_id("app_name", session.app_name), check_id("user_id", session.user_id)
        sid = check_id("session_id", session.id)
        meta, options = self._request(custom_metadata)
        # Entries over a limit are refused before the generator learns anything.
        turns = self._turns(lambda limit: event_turns(sid, session.events, meta, limit))
        ctx = self.ctx
        if ctx.generator is not None:
            await self._learn(app, user, session, options)
            if not ctx.fact_settings.keep_events:
                return
        store, search = await ctx.ready(app, user)
        docs = await self._entries(store, app, user, turns, keep=False)
        ingest = ctx.keys.memory_ingest(app, user, sid, uuid.uuid4().hex)
        stale = await store.put_all(
            app, user, docs, entries=(n := self._batch_entries(search)), many=len(turns) > n,
            mode="replace", session_id=sid, ingest=ingest, embed=self._embed,
        )  # fmt: skip
        while stale:
            await store.delete(app, user, stale, tombstone=False, only_session=sid, ingest=ingest)
            stale = await store.put(
                app, user, [], mode="replace", session_id=sid, ingest=ingest, final=True
            )

    async def _learn(
        self, app: str, user: str, session: Session, options: RequestOptions | None
    ) -> None:
        """The session's events not read yet, through the generator into the facts."""
        checked_events(session.events)
        await (await self.learner(app, user)).session(app, user, session, options)

    def _request(
        self, custom_metadata: Mapping[str, object] | None
    ) -> tuple[dict[str, Any], RequestOptions | None]:
        """A request's ``custom_metadata``: what its entries keep, and with a generator the
        options of its generation, checked before anything is written. Those keys say how
        facts are written (ADK's Memory Bank service reads them so), not what an entry is."""
        meta = metadata(custom_metadata)
        if self.ctx.generator is None:
            return meta, None
        options = RequestOptions.of(meta)
        return {k: v for k, v in meta.items() if k not in REQUEST_KEYS}, options

    async def learner(self, app: str, user: str, model: Any = None) -> Consolidator | JobQueue:
        """What learns from events: in background mode the job queue (a FactWorker's
        call passes its ``model`` and gets a Consolidator), else a Consolidator."""
        ctx = self.ctx
        if model is None and ctx.fact_settings.mode == "background":
            return ctx.jobs
        store, _ = await ctx.ready(app, user)
        generator = model or ctx.generator
        assert generator is not None

        async def embed(app: str, user: str, docs: list[Doc]) -> None:
            await self.embed_new(store, app, user, docs, keep=False)

        return Consolidator(
            await ctx.facts(), generator, ctx.fact_settings, ranker=ctx.ranker,
            embed=embed, telemetry=ctx.telemetry,
        )  # fmt: skip

    async def add_events(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        app, user = check_id("app_name", app_name), check_id("user_id", user_id)
        sid = UNKNOWN_SESSION_ID if session_id is None else check_id("session_id", session_id)
        check_sequence("events", events)
        meta, options = self._request(custom_metadata)
        turns = self._turns(lambda limit: event_turns(sid, events, meta, limit))
        ctx = self.ctx
        if ctx.generator is not None:
            checked_events(events)
            await (await self.learner(app, user)).events(app, user, sid, events, options)
            if not ctx.fact_settings.keep_events:
                return
        store, search = await ctx.ready(app, user)
        docs = await self._entries(store, app, user, turns, keep=True)
        await store.put_all(
            app, user, docs, entries=(n := self._batch_entries(search)), many=len(turns) > n,
            mode="keep", session_id=sid, embed=self._embed,
        )  # fmt: skip

    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        app, user = check_id("app_name", app_name), check_id("user_id", user_id)
        check_sequence("memories", memories)
        shared = metadata(custom_metadata)
        docs: dict[str, Doc] = {}
        for entry in memories:
            doc = entry_doc(app, user, entry, shared, self.ctx.config.max_payload_bytes)
            if doc is not None:
                docs[doc.id] = doc
        store, search = await self.ctx.ready(app, user)
        await self.embed_new(store, app, user, list(docs.values()), keep=False)
        await store.put_all(
            app, user, docs.values(), entries=self._batch_entries(search), mode="explicit",
            session_id=None, embed=self._embed,
        )  # fmt: skip

    async def delete(self, *, app_name: str, user_id: str, memory_id: str | None = None) -> None:
        app, user = check_id("app_name", app_name), check_id("user_id", user_id)
        if memory_id is not None:
            check_id("memory_id", memory_id)
        store, _ = await self.ctx.ready()
        facts = await self.ctx.facts()
        if memory_id is None:
            await store.delete_all(app, user)
            await facts.forget_all(app, user)
            return
        if await facts.which(app, user, [memory_id]):
            await facts.delete(app, user, memory_id)
            return
        turns = await session_of(self.ctx, app, user, memory_id)
        await store.delete(app, user, [memory_id], tombstone=True)

        # The turns around it were found by its words too: no longer.
        async def embed(store: MemoryStore, docs: list[Doc]) -> None:
            # Their vectors held its text too (the pairs it made with them).
            await self.embed_new(store, app, user, docs, keep=False)

        await refresh_around(self.ctx, app, user, turns, memory_id, embed)

    def _turns(self, make: Callable[[int], list[Turn]]) -> list[Turn]:
        """The turns ``make`` makes within the size limit; none when the generator keeps no
        events as entries."""
        if self.ctx.generator is not None and not self.ctx.fact_settings.keep_events:
            return []
        return make(self.ctx.config.max_payload_bytes)

    async def _entries(
        self, store: MemoryStore, app: str, user: str, turns: list[Turn], *, keep: bool
    ) -> Iterable[Doc]:
        """The turns' entries: analysed as they are written, unless they need vectors,
        which are all made before anything is written."""
        docs = iter_turn_docs(app, user, turns, reach=self.ctx.context_turns)
        if self.ctx.vectorizer is None:
            return docs
        made = list(docs)
        await self.embed_new(store, app, user, made, keep=keep)
        return made

    # -- vectors --------------------------------------------------------------------------

    def _batch_entries(self, search: IndexSearch | PlainSearch) -> int:
        if self.ctx.semantic is not None and isinstance(search, IndexSearch):
            return VECTOR_BATCH_ENTRIES
        return BATCH_ENTRIES

    async def embed_new(
        self, store: MemoryStore, app: str, user: str, docs: Sequence[Doc], *, keep: bool
    ) -> None:
        """Vectors for the docs that need one, before anything is written. An entry already
        stored from the same text by the same model keeps its vector (sessions are added
        again after every turn: only new events are embedded); with ``keep``, stored
        entries are not written at all."""
        vectorizer = self.ctx.vectorizer
        if vectorizer is None or not docs:
            return
        for doc in docs:
            doc.vkey = vectorizer.key(*doc.embedded)
            doc.fields["vkey"] = doc.vkey
            doc.fields["vmodel"] = vectorizer.name
        stored = await store.vector_keys(app, user, [doc.id for doc in docs])
        await self._embed(
            [
                doc
                for doc, (words, vkey) in zip(docs, stored, strict=True)
                if not (keep and words is not None) and text(vkey or "") != doc.vkey
            ]
        )

    async def _embed(self, docs: list[Doc]) -> None:
        vectorizer = self.ctx.vectorizer
        assert vectorizer is not None
        for doc, vector in zip(
            docs, await vectorizer.mixed([doc.embedded for doc in docs]), strict=True
        ):
            doc.vec = vector
