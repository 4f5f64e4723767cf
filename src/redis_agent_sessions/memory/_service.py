"""The public memory API, written once: the core service and the google-adk drop-in bind it
to their own models (``SessionT``, ``EventT``, ``EntryT`` memory entries, ``ResponseT``
search results) through four conversions; the store itself works on the core models."""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, TypeVar

from typing_extensions import Self

from redis_agent_sessions._health import Readiness, probe_app
from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import check_id
from redis_agent_sessions._redis.lifecycle import AnyRedis, ClientOwner
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.memory._consolidate import FactSettings
from redis_agent_sessions.memory._context import DEFAULT_CONTEXT_TURNS
from redis_agent_sessions.memory._embedders import Embedder, Vectorizer
from redis_agent_sessions.memory._engine import MemoryEngine
from redis_agent_sessions.memory._filters import (
    MemoryFilter,
    MetadataValue,
    compile_filter,
    half_life_seconds,
)
from redis_agent_sessions.memory._generators import Fact, FactRevision, MemoryGenerator
from redis_agent_sessions.memory._models import Backend, MemoryEntry, SearchMemoryResponse
from redis_agent_sessions.memory._reembed import ReembedReport, reembed
from redis_agent_sessions.memory._reindex import ReindexReport, reindex
from redis_agent_sessions.memory._url import open_memory_service_url
from redis_agent_sessions.memory._vectors import Semantic, VectorIndex
from redis_agent_sessions.models import Event, Session

__all__ = ["MemoryServiceBase"]

SessionT = TypeVar("SessionT")
EventT = TypeVar("EventT")
EntryT = TypeVar("EntryT")
ResponseT = TypeVar("ResponseT")


class MemoryServiceBase(ClientOwner, Generic[SessionT, EventT, EntryT, ResponseT]):
    """Memory entries in Redis, searchable by keyword (and by meaning, with an embedder),
    shared by every worker.

    Results rank by relevance (BM25 over stemmed words, each turn also found by the turns
    around it), at most ``limit`` (10) entries, scoped to one (app, user). With an
    ``embedder``, each entry also keeps a vector (a turn's made with its neighbours'), and
    a search scores the keyword matches and the nearest vectors together, adding the
    similarity to the keyword score once the two rankings agree beyond chance
    (docs/memory-ranking.md).

    Args:
        client: a ``redis.asyncio.Redis`` or ``RedisCluster`` client; it stays open when
            this service closes.
        config: the key prefix, and ``max_payload_bytes``, the most bytes of one entry
            (``ttl_seconds`` and the other session settings do not apply here).
        backend: ``search`` (RediSearch 2.x), ``plain`` (any Redis), or ``auto``: search
            when ``MODULE LIST`` shows the module at version 2.0 or later. The first worker
            records its choice in Redis (``<prefix>:mem:backend``); every later one uses
            the recorded backend, or raises MemoryIndexError when it asks for the other
            one or cannot use it, so workers never split between backends.
        embedder: turns semantic recall on (see [`Embedder`][]); every worker of a
            store must use the same dimension, recorded in ``<prefix>:mem:vectors``.
        vector_index: with the search backend, the vector index's algorithm: ``HNSW``
            (approximate, the default), ``FLAT`` (exact, linear) or ``SVS-VAMANA`` (where
            the server's search module has it).
        min_similarity: vector hits must be more similar than this (cosine, -1 to 1) to be
            returned, or to add to a keyword match's score; 0 keeps anything pointing the
            same way at all.
        context_turns: how many turns on each side of a turn, in its session, it is also
            found by (at half weight one away, a quarter two away), from 0 to 2 (the
            default); 0 finds a turn by its own words only, as ADK's
            InMemoryMemoryService does. Applied when entries are written: every writer of a
            store should use the same value, and ``reindex`` applies a change to the
            entries written before it (docs/memory-ranking.md#context).
    """

    def __init__(
        self,
        client: AnyRedis,
        *,
        config: SessionServiceConfig | None = None,
        backend: Backend = "auto",
        embedder: Embedder | None = None,
        vector_index: VectorIndex = "HNSW",
        min_similarity: float = 0.0,
        generator: MemoryGenerator | None = None,
        facts: FactSettings | None = None,
        context_turns: int = DEFAULT_CONTEXT_TURNS,
    ) -> None:
        semantic = None
        if embedder is not None:
            semantic = Semantic(Vectorizer(embedder), vector_index, min_similarity)
        if generator is not None and not isinstance(generator, MemoryGenerator):
            raise InvalidInputError(
                f"generator must have an async generate(request): {type(generator).__name__}"
            )
        if facts is not None and not isinstance(facts, FactSettings):
            raise InvalidInputError(f"facts must be a FactSettings: {type(facts).__name__}")
        self._memory = MemoryEngine(
            client,
            config=config or SessionServiceConfig(),
            backend=backend,
            semantic=semantic,
            generator=generator,
            facts=facts,
            context_turns=context_turns,
        )
        self._client = client
        self._owns_client = False
        self._owns_embedder = False
        if self._memory.config.telemetry:
            self._memory.instrument(self, OPERATIONS)

    @abstractmethod
    def _session(self, session: SessionT) -> Session:
        """``session`` as the core model (its events are what memory keeps)."""

    @abstractmethod
    def _events(self, events: Sequence[EventT]) -> Sequence[Event]: ...

    @abstractmethod
    def _entries(self, memories: Sequence[EntryT]) -> Sequence[MemoryEntry]: ...

    @abstractmethod
    def _response(self, found: SearchMemoryResponse) -> ResponseT: ...

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        config: SessionServiceConfig | None = None,
        backend: Backend = "auto",
        cluster: bool = False,
        embedder: Embedder | None = None,
        vector_index: VectorIndex = "HNSW",
        min_similarity: float = 0.0,
        generator: MemoryGenerator | None = None,
        facts: FactSettings | None = None,
        context_turns: int = DEFAULT_CONTEXT_TURNS,
        **redis_kwargs: Any,
    ) -> Self:
        """A service with its own client, closed by ``aclose``; the URL's query may
        carry settings, as for the session service's ``from_url``, and the memory's own:
        ``memory_backend``, ``embedder`` (``google:<model>`` or ``import:<module>:<name>``),
        ``embedder_dimensions``, ``vector_index``, ``min_similarity``, ``context_turns``,
        and for learned
        facts ``generator`` (``import:<module>:<name>``, or ``adk:<model>`` with the
        ``[adk]`` extra), ``fact_topics`` (comma-separated), ``fact_ttl_seconds``,
        ``keep_events``, ``disable_consolidation``, ``fact_revision_ttl``,
        ``fact_revision_labels`` and ``fact_metadata`` (``key:value,...``),
        ``fact_metadata_merge_strategy``, and for background generation ``fact_mode``,
        ``fact_trigger_events``, ``fact_trigger_idle_seconds``, ``fact_max_backlog``."""
        opened = open_memory_service_url(
            url,
            config=config,
            backend=backend,
            cluster=cluster,
            embedder=embedder,
            vector_index=vector_index,
            min_similarity=min_similarity,
            generator=generator,
            facts=facts,
            context_turns=context_turns,
            **redis_kwargs,
        )
        service = cls(opened.client, **opened.settings)
        service._owns_embedder = opened.owns_embedder
        service._owns_client = True
        return service

    @property
    def config(self) -> SessionServiceConfig:
        return self._memory.config

    async def aclose(self) -> None:
        """Close the client, and the embedder (its HTTP client), if this service made them
        (from a URL); what was passed in is its owner's to close."""
        try:
            await super().aclose()
        finally:
            closer = getattr(self.embedder, "aclose", None)
            if self._owns_embedder and callable(closer):
                await closer()

    @property
    def embedder(self) -> Embedder | None:
        """What makes this service's vectors; None when it searches by keyword only."""
        return None if self._memory.semantic is None else self._memory.semantic.vectorizer.embedder

    @_scripts.typed_permissions
    async def backend(self) -> Literal["search", "plain"]:
        """The backend in use, detecting it on first call under ``auto``."""
        return await self._memory.backend()

    @_scripts.typed_permissions
    async def check_ready(self, *, timeout: float = 5.0, app_name: str | None = None) -> Readiness:
        """Whether this service can work now, for an orchestrator's readiness probe: every
        Redis node answers, the memory backend opens (the search module and the index, for
        ``search``) and a search runs with this user's permissions. Never raises for what it
        finds: the result is falsy, and each [`Check`][] says what failed and why. The
        search is for a user of an app of its own, unless ``app_name`` names one (a Redis
        user limited to one app's keys passes its app)."""
        return await self._memory.check_ready(timeout, probe_app(app_name))

    @_scripts.typed_permissions
    async def add_session_to_memory(
        self, session: SessionT, *, custom_metadata: Mapping[str, object] | None = None
    ) -> None:
        """Index the session's events that carry text, replacing what it contributed before.

        Large sessions go in bounded batches; entries it no longer has are removed only
        after every batch is stored, so a failed call leaves the previous entries in place.
        Ids removed with ``delete_memory`` are not brought back.

        ``custom_metadata`` (ours: ADK's method has none) is stored on every entry, as
        ``add_events_to_memory``'s; with a generator, its keys ``revision_labels``,
        ``metadata``, ``metadata_merge_strategy`` and ``revision_ttl`` are the generation's
        options, as Memory Bank's (docs/facts.md#revisions-labels-and-metadata).
        """
        await self._memory.writes.add_session(self._session(session), custom_metadata)

    @_scripts.typed_permissions
    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[EventT],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Add events incrementally: ids already stored or deleted are skipped.

        ``custom_metadata`` is stored on every entry added (ADK's in-memory service
        ignores it). With a generator, its keys ``revision_labels``, ``metadata``,
        ``metadata_merge_strategy`` and ``revision_ttl`` are the generation's options, as
        ADK's Memory Bank service reads them (docs/facts.md#revisions-labels-and-metadata).
        """
        await self._memory.writes.add_events(
            app_name=app_name,
            user_id=user_id,
            events=self._events(events),
            session_id=session_id,
            custom_metadata=custom_metadata,
        )

    @_scripts.typed_permissions
    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[EntryT],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Store explicit entries; an entry's id (a new uuid when None) replaces any entry
        with that id, even a deleted one. Its metadata overrides ``custom_metadata``."""
        await self._memory.writes.add_memory(
            app_name=app_name,
            user_id=user_id,
            memories=self._entries(memories),
            custom_metadata=custom_metadata,
        )

    @_scripts.typed_permissions
    async def delete_memory(
        self, *, app_name: str, user_id: str, memory_id: str | None = None
    ) -> None:
        """Delete one entry, or every entry of the user when ``memory_id`` is None
        (ADK's in-memory service does nothing then).

        Deleted ids are remembered: re-adding their session does not bring them back.
        """
        await self._memory.writes.delete(app_name=app_name, user_id=user_id, memory_id=memory_id)

    @_scripts.typed_permissions
    async def search_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        query: str,
        limit: int = 10,
        filters: MemoryFilter | Mapping[str, object] | None = None,
        author: str | Sequence[str] | None = None,
        session_ids: Sequence[str] | None = None,
        since: datetime | float | None = None,
        until: datetime | float | None = None,
        topics: Sequence[str] | None = None,
        kind: Literal["fact", "event"] | None = None,
        metadata: Mapping[str, MetadataValue | Sequence[MetadataValue]] | None = None,
        recency_half_life: float | timedelta | None = None,
    ) -> ResponseT:
        """Entries ranked by relevance to the query (BM25 over stemmed words; fused with
        the nearest vectors when the service has an embedder).

        ASCII words match whole words; other words (e.g. CJK) also match inside longer
        runs of text. An empty or all-punctuation query finds nothing. ``limit`` is ours
        (ADK's API has none); ADK callers get the default, 10, the same cap as ADK's
        in-memory service.

        The rest are ours too (docs/memory.md#filters): ``filters`` (a
        [`MemoryFilter`][], or a mapping of its fields) and the same fields as
        keywords, ``author`` to ``metadata``, limit the search to the entries within every
        one given, inside the search (the best ``limit`` of those, not of all);
        ``recency_half_life`` (seconds or a timedelta) halves an entry's score for each
        half-life of its age. Raises InvalidFilterError, searching nothing, for an unknown
        field, a value of the wrong type, ``since`` after ``until``, or a metadata field
        not in the ``indexed_metadata`` setting.
        """
        where = compile_filter(
            filters, self._memory.config.indexed_metadata, author=author,
            session_ids=session_ids, since=since, until=until, topics=topics, kind=kind,
            metadata=metadata,
        )  # fmt: skip
        found = await self._memory.reads.search(
            app_name=app_name,
            user_id=user_id,
            query=query,
            limit=limit,
            where=where,
            recency_half_life=half_life_seconds(recency_half_life),
        )
        return self._response(found)

    @_scripts.typed_permissions
    async def wait_for_generation(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str | None = None,
        timeout: float = 60.0,
        flush: bool = True,
    ) -> None:
        """Return once background generation has nothing queued, deferred or running for
        the session (or, without ``session_id``, for the user): its facts are then stored.
        ``flush`` first makes the deferred jobs due now (triggers not reached). Raises
        GenerationTimeoutError after ``timeout`` seconds, and GenerationError when the
        session's last job failed its last attempt (it is in the dead letters)."""
        app, user = _owner(app_name, user_id)
        sid = None if session_id is None else check_id("session_id", session_id)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise InvalidInputError(f"timeout must be a non-negative number: {timeout!r}")
        await self._memory.jobs.wait(app, user, sid, float(timeout), bool(flush))

    @_scripts.typed_permissions
    async def list_facts(self, *, app_name: str, user_id: str) -> list[Fact]:
        """The user's learned facts, most recently changed first (those past their time to
        live are not listed: they are forgotten at the next change or search)."""
        app, user = _owner(app_name, user_id)
        facts = await self._memory.facts()
        now = time.time()
        found = await facts.read(app, user, await facts.ids(app, user))
        return [f for f in found if f is not None and (f.expires is None or f.expires > now)]

    @_scripts.typed_permissions
    async def fact_history(
        self, *, app_name: str, user_id: str, fact_id: str
    ) -> list[FactRevision]:
        """What a fact said before its latest revision, newest first (at most
        ``FactSettings.history``, none past its ``revision_ttl``); empty for a fact never
        updated, or gone."""
        app, user = _owner(app_name, user_id)
        memory_id = check_id("fact_id", fact_id)
        return await (await self._memory.facts()).history(app, user, memory_id)

    @_scripts.typed_permissions
    async def reembed(
        self,
        *,
        app_name: str | None = None,
        user_id: str | None = None,
        dry_run: bool = False,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> ReembedReport:
        """Give stored entries vectors of this service's embedder: to turn semantic recall on
        for entries written without it, or to roll out another model (a new dimension or
        vector index algorithm rebuilds the vector index; the entries stay). Every entry of
        the store, of an app, or of one user. Resumable: entries already current are
        skipped, so a run that stopped is run again. ``on_progress(done, total)``."""
        return await reembed(
            self._memory, app=app_name, user=user_id, dry_run=dry_run, on_progress=on_progress
        )

    @_scripts.typed_permissions
    async def reindex(
        self,
        *,
        app_name: str | None = None,
        user_id: str | None = None,
        dry_run: bool = False,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> ReindexReport:
        """Analyse stored entries again with this version's analysis, after an upgrade that
        changed it (each entry records the analysis it was indexed with): every entry of the
        store, of an app, or of one user, session by session. Resumable: entries already
        current are skipped, so a run that stopped is run again.
        ``on_progress(done, total)``."""
        await self._memory.backend()
        return await reindex(
            self._memory.ctx, app=app_name, user=user_id, dry_run=dry_run, on_progress=on_progress
        )


def _owner(app_name: str, user_id: str) -> tuple[str, str]:
    return check_id("app_name", app_name), check_id("user_id", user_id)


OPERATIONS = (
    "add_session_to_memory",
    "add_events_to_memory",
    "add_memory",
    "delete_memory",
    "wait_for_generation",
    "search_memory",
    "check_ready",
)
"""What telemetry traces."""
