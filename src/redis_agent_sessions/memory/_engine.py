"""The memory store, on this package's models: entries kept in Redis hashes, found by the
backend the first worker recorded (RediSearch, or postings kept by the write scripts).

Two backends answer the same contract. With the RediSearch module (2.x) an index over
the entry hashes does the matching; without it (plain Redis, fakeredis) the entries'
words are kept in per-user postings maintained by the write scripts. Either way a query
touches only one (app, user)'s entries and treats its text as data, never as syntax.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import orjson
from redis.exceptions import NoPermissionError, ResponseError

from redis_agent_sessions._health import (
    PROBE_ID,
    Probe,
    Readiness,
    memory_probe,
    redis_probe,
    run_checks,
)
from redis_agent_sessions._redis.codec import check_id, check_sequence, text
from redis_agent_sessions._redis.identity import read_identity
from redis_agent_sessions._redis.pressure import warn_once
from redis_agent_sessions._redis.topology import Topology
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import CorruptDataError, InvalidInputError, MemoryIndexError
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory._consolidate import Consolidator, FactSettings, checked_events
from redis_agent_sessions.memory._docs import entry_doc, event_docs, metadata, response
from redis_agent_sessions.memory._embedders import Vectorizer
from redis_agent_sessions.memory._facts import FactStore
from redis_agent_sessions.memory._generators import MemoryGenerator
from redis_agent_sessions.memory._index_defs import Provisioned
from redis_agent_sessions.memory._indexes import index_layout
from redis_agent_sessions.memory._models import Backend, MemoryEntry, SearchMemoryResponse
from redis_agent_sessions.memory._ranking import IndexRanker, PlainRanker, search_terms
from redis_agent_sessions.memory._record import check_vectors, recorded_vectors
from redis_agent_sessions.memory._reindex import refresh_around, session_of
from redis_agent_sessions.memory._search import IndexSearch, PlainSearch, has_search_module
from redis_agent_sessions.memory._store import (
    BATCH_ENTRIES,
    UNKNOWN_SESSION_ID,
    VECTOR_BATCH_ENTRIES,
    Doc,
    MemoryStore,
    batches,
)
from redis_agent_sessions.memory._vectors import FUSION_DEPTH, Hit, Semantic, fuse
from redis_agent_sessions.models import Event, Session

__all__ = ["MemoryEngine"]

_MAX_LIMIT = 1000
_log = logging.getLogger("redis_agent_sessions.memory")


class MemoryEngine:
    """The memory operations of one service, on the core models."""

    def __init__(
        self,
        client: Any,
        *,
        config: SessionServiceConfig,
        backend: Backend,
        semantic: Semantic | None = None,
        generator: MemoryGenerator | None = None,
        facts: FactSettings | None = None,
    ) -> None:
        if backend not in ("auto", "search", "plain"):
            raise InvalidInputError(f"backend must be 'auto', 'search' or 'plain': {backend!r}")
        self.config = config
        self._keys = KeySpace(self.config.key_prefix)
        self._client = client
        self._backend: Backend = backend
        self._store: MemoryStore | None = None
        self._search: IndexSearch | PlainSearch | None = None
        self._ranker: IndexRanker | PlainRanker | None = None
        self._lock = asyncio.Lock()
        self._topology = Topology(client)
        self.semantic = semantic
        self._adopting = False
        self._vectorizer: Vectorizer | None = None if semantic is None else semantic.vectorizer
        self.generator = generator
        self.fact_settings = facts or FactSettings()
        self._facts: FactStore | None = None
        self._telemetry: Any = None
        """The Telemetry of the instrumented service (telemetry on): the generation's spans."""

    @property
    def client(self) -> Any:
        return self._client

    @property
    def keys(self) -> KeySpace:
        return self._keys

    async def backend(self) -> Literal["search", "plain"]:
        await self._ready()
        return "search" if isinstance(self._search, IndexSearch) else "plain"

    def instrument(self, service: object, operations: tuple[str, ...]) -> None:
        """Spans for ``service``'s operations (telemetry on)."""
        from redis_agent_sessions._telemetry import Telemetry, instrument  # only when on

        topology = self._topology
        telemetry = Telemetry(self.config, topology.endpoint, lambda: read_identity(topology))
        instrument(service, operations, telemetry)
        self._telemetry = telemetry

    async def check_ready(self, timeout: float, app: str = PROBE_ID) -> Readiness:
        """Reach every node, open the backend (recorded or detected, its index made), and
        run a search for a user who has no memories: see :mod:`redis_agent_sessions._health`."""

        async def backend() -> str:
            return f"{await self.backend()} backend"

        async def search() -> str:
            # Keyword only: a probe every few seconds must not pay for an embedding call.
            await self.search(
                app_name=app, user_id=PROBE_ID, query="readiness probe", vectors=False
            )
            return "a search runs"

        probes: list[tuple[str, Probe]] = [
            ("redis", redis_probe(self._topology)),
            ("memory backend", backend),
            ("search", search),
        ]
        # Memory entries never have a TTL: only an allkeys-* policy evicts them.
        probes.append(("memory", memory_probe(self._topology, None)))
        return await run_checks(probes, timeout)

    async def _ready(
        self, app: str | None = None, user: str | None = None
    ) -> tuple[MemoryStore, IndexSearch | PlainSearch]:
        """The store and search, choosing the backend on first call; with ``app`` and
        ``user``, also ready for writes of that user (their index, on a cluster)."""
        if self._store is None or self._search is None:
            async with self._lock:
                if self._store is None or self._search is None:
                    await self._topology.ready()
                    await warn_once(self._topology, None)
                    self._store, self._search = await self._open_backend()
        if app is not None and user is not None and isinstance(self._search, IndexSearch):
            await self._search.ensure_index(app, user, rebuild=self._adopting)
        return self._store, self._search

    async def _open_backend(self) -> tuple[MemoryStore, IndexSearch | PlainSearch]:
        """The backend recorded in Redis, or when none is, this worker's choice, recorded
        for every later worker (so workers that would detect differently, having other
        permissions, never split). The search index is made before the choice is recorded:
        a worker that cannot make it records nothing."""
        key = self._keys.memory_backend()
        recorded = await self._client.get(key)
        chosen = self._backend if recorded is None else _backend_name(key, recorded)
        if chosen == "auto":
            chosen = "search" if await has_search_module(self._topology) else "plain"
        if self._backend not in ("auto", chosen):
            raise MemoryIndexError(
                f"this service asks for the {self._backend!r} memory backend, but "
                f"{key!r} records {chosen!r}, used by the other workers"
            )
        if self.semantic is not None:
            await self._check_vectors()
        search: IndexSearch | PlainSearch = PlainSearch(self._client, self._keys, self.semantic)
        if chosen == "search":
            layout = index_layout(
                self._keys,
                cluster=self._topology.cluster,
                memory_index=self.config.memory_index,
                node_of=self._topology.node_of if self._topology.routes_by_slot else None,
            )
            search = IndexSearch(self._topology, layout, self.semantic)
            try:
                await search.prepare(rebuild=self._adopting)
            except NoPermissionError:
                raise  # a PermissionDeniedError naming what to grant
            except ResponseError as exc:
                raise MemoryIndexError(
                    f"the memory backend is 'search' but this client cannot use "
                    f"the search module: {exc}"
                ) from exc
        self._ranker = (
            IndexRanker(self._topology, self._keys, search.index, search.missing)
            if isinstance(search, IndexSearch)
            else PlainRanker(self._client, self._keys)
        )
        if recorded is None:
            await self._client.set(key, chosen, nx=True)
            again = await self._client.get(key)
            if again is None:  # deleted at once by someone else: do not guess
                raise MemoryIndexError(f"could not record the memory backend in {key!r}")
            if _backend_name(key, again) != chosen:  # another worker recorded first
                return await self._open_backend()
        return MemoryStore(self._client, self._keys, postings=chosen == "plain"), search

    async def app_indexes(
        self, app: str, *, vectors: tuple[int, str] | None, rebuild: bool, drop: bool = False
    ) -> Provisioned | None:
        """An operator's step (``tenant create`` / ``tenant drop``): make (or drop) the
        app's own indexes; None on the plain backend, which has none."""
        _, search = await self._ready()
        if not isinstance(search, IndexSearch):
            return None
        if drop:
            return Provisioned(dropped=await search.definitions.drop(app))
        return await search.definitions.provision(app, vectors=vectors, rebuild=rebuild)

    async def facts(self) -> FactStore:
        """The learned facts' store (on the backend's entries)."""
        store, _ = await self._ready()
        if self._facts is None:
            self._facts = FactStore(self._client, self._keys, store, self.fact_settings.history)
        return self._facts

    async def ready_for(self, app: str, user: str) -> tuple[MemoryStore, IndexSearch | PlainSearch]:
        """The store and search, ready for writes of (app, user)."""
        return await self._ready(app, user)

    async def adopt_vectors(self, app: str, user: str) -> MemoryStore:
        """For ``reembed``: make this service's embedder the store's (its dimension and
        model recorded, a vector index of another definition made again), ready for the
        writes of (app, user). Entries keep their vectors until re-embedded."""
        if not self._adopting:
            await self._client.set(self._keys.memory_vectors(), orjson.dumps(self._mine()))
            self._adopting = True
        store, _ = await self._ready(app, user)
        return store

    async def recorded_vectors(self) -> dict[str, Any] | None:
        """The store's vector record (see :func:`recorded_vectors`)."""
        return await recorded_vectors(self._client, self._keys)

    def _mine(self) -> dict[str, Any]:
        """This service's vector record: what its embedder makes."""
        assert self._vectorizer is not None
        return {"dimensions": self._vectorizer.dimensions, "model": self._vectorizer.name}

    async def _check_vectors(self) -> None:
        await check_vectors(self._client, self._keys, self._mine())

    # -- writes ---------------------------------------------------------------------------

    async def add_session(self, session: Session) -> None:
        # In bounded batches, tagged with one ingest id: the entries the session no longer
        # has are removed only after the last batch is stored.
        if not isinstance(session, Session):
            raise InvalidInputError(f"not a session: {type(session).__name__}")
        app, user = check_id("app_name", session.app_name), check_id("user_id", session.user_id)
        sid = check_id("session_id", session.id)
        # Entries over a limit are refused before the generator learns anything.
        docs = self._docs(lambda limit: event_docs(app, user, sid, session.events, {}, limit))
        if self.generator is not None:
            await self._learn(app, user, session)
            if not self.fact_settings.keep_events:
                return
        store, _ = await self._ready(app, user)
        await self._embed_new(store, app, user, docs, keep=False)
        ingest = self._keys.memory_ingest(app, user, sid, uuid.uuid4().hex)
        parts = list(batches(docs, self._batch_entries())) or [[]]
        stale: list[str] = []
        for i, batch in enumerate(parts):
            last = i == len(parts) - 1
            stale = await store.put(
                app, user, batch, mode="replace", session_id=sid, ingest=ingest, final=last,
                embed=self._embed,
            )  # fmt: skip
        while stale:
            await store.delete(app, user, stale, tombstone=False, only_session=sid, ingest=ingest)
            stale = await store.put(
                app, user, [], mode="replace", session_id=sid, ingest=ingest, final=True
            )

    async def _learn(self, app: str, user: str, session: Session) -> None:
        """The session's events not read yet, through the generator into the facts."""
        checked_events(session.events)
        await (await self._learner(app, user)).session(app, user, session)

    async def _learner(self, app: str, user: str) -> Consolidator:
        store, _ = await self._ready(app, user)
        assert self.generator is not None
        assert self._ranker is not None

        async def embed(app: str, user: str, docs: list[Doc]) -> None:
            await self._embed_new(store, app, user, docs, keep=False)

        return Consolidator(
            await self.facts(), self.generator, self.fact_settings, rank=self._ranker.rank,
            embed=embed, telemetry=self._telemetry,
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
        meta = metadata(custom_metadata)
        docs = self._docs(lambda limit: event_docs(app, user, sid, events, meta, limit))
        if self.generator is not None:
            checked_events(events)
            await (await self._learner(app, user)).events(app, user, sid, events)
            if not self.fact_settings.keep_events:
                return
        store, _ = await self._ready(app, user)
        await self._embed_new(store, app, user, docs, keep=True)
        for batch in batches(docs, self._batch_entries()):
            await store.put(app, user, batch, mode="keep", session_id=sid, embed=self._embed)

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
            doc = entry_doc(app, user, entry, shared, self.config.max_payload_bytes)
            if doc is not None:
                docs[doc.id] = doc
        store, _ = await self._ready(app, user)
        await self._embed_new(store, app, user, list(docs.values()), keep=False)
        for batch in batches(list(docs.values()), self._batch_entries()):
            await store.put(app, user, batch, mode="explicit", session_id=None, embed=self._embed)

    async def delete(self, *, app_name: str, user_id: str, memory_id: str | None = None) -> None:
        app, user = check_id("app_name", app_name), check_id("user_id", user_id)
        if memory_id is not None:
            check_id("memory_id", memory_id)
        store, _ = await self._ready()
        facts = await self.facts()
        if memory_id is None:
            await store.delete_all(app, user)
            await facts.forget_all(app, user)
            return
        if await facts.which(app, user, [memory_id]):
            await facts.delete(app, user, memory_id)
            return
        turns = await session_of(self, app, user, memory_id)
        await store.delete(app, user, [memory_id], tombstone=True)
        # The turns around it were found by its words too: no longer.
        await refresh_around(self, app, user, turns, memory_id)

    # -- reads ----------------------------------------------------------------------------

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
    ) -> SearchMemoryResponse:
        """Ranked entries; with ``explain`` (the CLI), keyword results also say how they were
        found in ``custom_metadata[RETRIEVAL_KEY]`` (hybrid results always do)."""
        app, user = check_id("app_name", app_name), check_id("user_id", user_id)
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string, got {type(query).__name__}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidInputError(f"limit must be a non-negative int, got {limit!r}")
        terms = search_terms(query)
        if not terms or limit == 0:
            return SearchMemoryResponse()
        store, search = await self._ready()
        if isinstance(search, IndexSearch) and search.layout.provisioned:
            # An app's index is an operator's to make: a search says when it is missing
            # (checked once per process), where a user's, made at their first write, is not.
            await search.ensure_index(app, user)
        assert self._ranker is not None
        limit = min(limit, _MAX_LIMIT)
        found: dict[str, dict[str, Any]] = {}
        hybrid = self.semantic is not None and vectors
        depth = max(limit, FUSION_DEPTH) if hybrid else limit
        hits: list[Hit] = []
        if not hybrid:
            ranked = await self._ranker.rank(app, user, terms, depth)
        else:
            assert self._vectorizer is not None
            vector = await self._vectorizer.query(query)
            ranked, hits = await asyncio.gather(
                self._ranker.rank(app, user, terms, depth), search.nearest(app, user, vector, depth)
            )
        ids = [memory_id for memory_id, _ in ranked.hits]
        if hybrid:
            assert self.semantic is not None
            scores = dict(ranked.hits)
            keyword = [(memory_id, scores.get(memory_id, 0.0)) for memory_id in ids]
            fused = fuse(keyword, hits, self.semantic.min_similarity, limit, ranked.entries)
            ids, found = [memory_id for memory_id, _ in fused], dict(fused)
        elif explain:
            scores = dict(ranked.hits)
            found = {
                memory_id: {
                    "found_by": ["keyword"],
                    "keyword_rank": rank,
                    "keyword_score": round(scores[memory_id], 6) if memory_id in scores else None,
                }
                for rank, memory_id in enumerate(ids, 1)
            }
        entries = await store.fetch(app, user, ids)
        now = time.time()
        live = [e for e in entries if e.expires is None or e.expires > now]
        if len(live) < len(entries) and not expired:
            # Facts past their time to live are forgotten now, and the search asked again
            # (once: what another worker keeps changing is left out, never returned).
            await (await self.facts()).expire(app, user, now)
            return await self.search(
                app_name=app, user_id=user, query=query, limit=limit, vectors=vectors,
                explain=explain, expired=True,
            )  # fmt: skip
        return response(live, found)

    def _docs(self, make: Callable[[int], list[Doc]]) -> list[Doc]:
        """The entries ``make`` makes within the size limit; none when the generator keeps
        no events as entries."""
        if self.generator is not None and not self.fact_settings.keep_events:
            return []
        return make(self.config.max_payload_bytes)

    # -- vectors --------------------------------------------------------------------------

    def _batch_entries(self) -> int:
        if self.semantic is not None and isinstance(self._search, IndexSearch):
            return VECTOR_BATCH_ENTRIES
        return BATCH_ENTRIES

    async def _embed_new(
        self, store: MemoryStore, app: str, user: str, docs: Sequence[Doc], *, keep: bool
    ) -> None:
        """Vectors for the docs that need one, before anything is written. An entry already
        stored from the same text by the same model keeps its vector (sessions are added
        again after every turn: only new events are embedded); with ``keep``, stored
        entries are not written at all."""
        if self._vectorizer is None or not docs:
            return
        for doc in docs:
            doc.vkey = self._vectorizer.key(doc.raw)
            doc.fields["vkey"] = doc.vkey
            doc.fields["vmodel"] = self._vectorizer.name
        stored = await store.vector_keys(app, user, [doc.id for doc in docs])
        await self._embed(
            [
                doc
                for doc, (words, vkey) in zip(docs, stored, strict=True)
                if not (keep and words is not None) and text(vkey or "") != doc.vkey
            ]
        )

    async def _embed(self, docs: list[Doc]) -> None:
        assert self._vectorizer is not None
        for doc, vector in zip(
            docs, await self._vectorizer.documents([doc.raw for doc in docs]), strict=True
        ):
            doc.vec = vector

    # -- helpers --------------------------------------------------------------------------


def _backend_name(key: str, raw: bytes | str) -> Literal["search", "plain"]:
    name = text(raw)
    if name not in ("search", "plain"):
        raise CorruptDataError(key, f"not a memory backend name: {name!r}")
    return "search" if name == "search" else "plain"
