"""What the parts of one memory service share (``Context``): the client, settings and
keys, and the backend, opened on first use: the one recorded in Redis, or when none is,
this worker's choice, recorded for every later worker."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from redis.exceptions import NoPermissionError, ResponseError

from redis_agent_sessions._redis.codec import text
from redis_agent_sessions._redis.layout_version import check_layout
from redis_agent_sessions._redis.pressure import warn_once
from redis_agent_sessions._redis.topology import Topology
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import CorruptDataError, InvalidInputError, MemoryIndexError
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory._analysis import CONTEXT
from redis_agent_sessions.memory._consolidate import FactSettings
from redis_agent_sessions.memory._embedders import Vectorizer
from redis_agent_sessions.memory._facts import FactStore
from redis_agent_sessions.memory._generators import MemoryGenerator
from redis_agent_sessions.memory._indexes import index_layout
from redis_agent_sessions.memory._jobs import JobQueue
from redis_agent_sessions.memory._models import Backend
from redis_agent_sessions.memory._ranking import IndexRanker, PlainRanker
from redis_agent_sessions.memory._record import check_vectors
from redis_agent_sessions.memory._search import IndexSearch, PlainSearch, has_search_module
from redis_agent_sessions.memory._store import CAPPED, PLAIN, MemoryStore
from redis_agent_sessions.memory._vectors import Semantic

__all__ = ["DEFAULT_CONTEXT_TURNS", "Context", "check_context_turns"]

DEFAULT_CONTEXT_TURNS = len(CONTEXT)


def check_context_turns(value: object) -> int:
    """``context_turns`` as given, or InvalidInputError: an int from 0 to ``len(CONTEXT)``
    (a word further away would weigh less than a quarter: nothing, in the stored integers)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"context_turns must be an int, got {type(value).__name__}")
    if not 0 <= value <= len(CONTEXT):
        raise InvalidInputError(f"context_turns must be from 0 to {len(CONTEXT)}: {value}")
    return value


class Context:
    """One memory service's client, settings and backend, shared by its parts."""

    def __init__(
        self,
        client: Any,
        *,
        config: SessionServiceConfig,
        backend: Backend,
        semantic: Semantic | None = None,
        generator: MemoryGenerator | None = None,
        facts: FactSettings | None = None,
        context_turns: int = DEFAULT_CONTEXT_TURNS,
    ) -> None:
        if backend not in ("auto", "search", "plain"):
            raise InvalidInputError(f"backend must be 'auto', 'search' or 'plain': {backend!r}")
        self.context_turns = check_context_turns(context_turns)
        """How many turns on each side of an entry, in its session, it is also found by
        (0: its own words only), when it is written."""
        self.config = config
        self.keys = KeySpace(self.config.key_prefix)
        self.client = client
        self.wanted: Backend = backend
        """The backend this service asks for (``auto``: the recorded one, or detected)."""
        self.topology = Topology(client)
        self.semantic = semantic
        self.vectorizer: Vectorizer | None = None if semantic is None else semantic.vectorizer
        self.generator = generator
        self.fact_settings = facts or FactSettings()
        self.jobs = JobQueue(client, self.keys, self.fact_settings, config.max_payload_bytes)
        """Background generation's queue (``mode="background"``): jobs a FactWorker runs."""
        self.adopting = False
        """Set by ``reembed``: this service's embedder becomes the store's."""
        self.telemetry: Any = None
        """The Telemetry of the instrumented service (telemetry on): the generation's spans."""
        self._store: MemoryStore | None = None
        self._search: IndexSearch | PlainSearch | None = None
        self._ranker: IndexRanker | PlainRanker | None = None
        self._facts: FactStore | None = None
        self._lock = asyncio.Lock()

    @property
    def ranker(self) -> IndexRanker | PlainRanker:
        """The backend's keyword ranking (once ``ready``)."""
        assert self._ranker is not None
        return self._ranker

    async def backend(self) -> Literal["search", "plain"]:
        _, search = await self.ready()
        return "search" if isinstance(search, IndexSearch) else "plain"

    async def ready(
        self, app: str | None = None, user: str | None = None
    ) -> tuple[MemoryStore, IndexSearch | PlainSearch]:
        """The store and search, choosing the backend on first call; with ``app`` and
        ``user``, also ready for writes of that user (their index, on a cluster)."""
        if self._store is None or self._search is None:
            async with self._lock:
                if self._store is None or self._search is None:
                    await self.topology.ready()
                    await warn_once(self.topology, None)
                    # Memory shares the store: a newer layout is refused here too (the
                    # sessions' first write records the version; memory only reads it).
                    await check_layout(self.client, self.keys.layout())
                    self._store, self._search = await self._open_backend()
        if app is not None and user is not None and isinstance(self._search, IndexSearch):
            await self._search.ensure_index(app, user, rebuild=self.adopting)
        return self._store, self._search

    async def ready_for(self, app: str, user: str) -> tuple[MemoryStore, IndexSearch | PlainSearch]:
        """The store and search, ready for writes of (app, user)."""
        return await self.ready(app, user)

    async def _open_backend(self) -> tuple[MemoryStore, IndexSearch | PlainSearch]:
        """The backend recorded in Redis, or when none is, this worker's choice, recorded
        for every later worker (so workers that would detect differently, having other
        permissions, never split). The search index is made before the choice is recorded:
        a worker that cannot make it records nothing."""
        key = self.keys.memory_backend()
        recorded = await self.client.get(key)
        chosen = self.wanted if recorded is None else _backend_name(key, recorded)
        if chosen == "auto":
            chosen = "search" if await has_search_module(self.topology) else "plain"
        if self.wanted not in ("auto", chosen):
            raise MemoryIndexError(
                f"this service asks for the {self.wanted!r} memory backend, but "
                f"{key!r} records {chosen!r}, used by the other workers"
            )
        if self.semantic is not None:
            await check_vectors(self.client, self.keys, self.vector_record())
        search: IndexSearch | PlainSearch = PlainSearch(self.client, self.keys, self.semantic)
        if chosen == "search":
            layout = index_layout(
                self.keys,
                cluster=self.topology.cluster,
                memory_index=self.config.memory_index,
                node_of=self.topology.node_of if self.topology.routes_by_slot else None,
            )
            search = IndexSearch(self.topology, layout, self.semantic)
            try:
                await search.prepare(rebuild=self.adopting)
            except NoPermissionError:
                raise  # a PermissionDeniedError naming what to grant
            except ResponseError as exc:
                raise MemoryIndexError(
                    f"the memory backend is 'search' but this client cannot use "
                    f"the search module: {exc}"
                ) from exc
        self._ranker = (
            IndexRanker(self.topology, self.keys, search.index, search.missing)
            if isinstance(search, IndexSearch)
            else PlainRanker(self.client, self.keys)
        )
        if recorded is None:
            await self.client.set(key, chosen, nx=True)
            again = await self.client.get(key)
            if again is None:  # deleted at once by someone else: do not guess
                raise MemoryIndexError(f"could not record the memory backend in {key!r}")
            if _backend_name(key, again) != chosen:  # another worker recorded first
                return await self._open_backend()
        store = MemoryStore(
            self.client,
            self.keys,
            postings=PLAIN if chosen == "plain" else CAPPED,
            indexed=self.config.indexed_metadata,
        )
        return store, search

    async def facts(self) -> FactStore:
        """The learned facts' store (on the backend's entries)."""
        store, _ = await self.ready()
        if self._facts is None:
            self._facts = FactStore(self.client, self.keys, store, self.fact_settings.history)
        return self._facts

    def vector_record(self) -> dict[str, Any]:
        """This service's vector record: what its embedder makes."""
        assert self.vectorizer is not None
        return {"dimensions": self.vectorizer.dimensions, "model": self.vectorizer.name}


def _backend_name(key: str, raw: bytes | str) -> Literal["search", "plain"]:
    name = text(raw)
    if name not in ("search", "plain"):
        raise CorruptDataError(key, f"not a memory backend name: {name!r}")
    return "search" if name == "search" else "plain"
