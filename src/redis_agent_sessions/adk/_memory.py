"""The google-adk memory drop-in, re-exported by ``redis_agent_sessions.adk``.

Only imported through ``adk/__init__.py``, which checks for the ``[adk]`` extra first. The
API is the core's own definition (``memory/_service.py``); this module only converts ADK's
types to the core's and back, so matching, ranking, scoping and deletion rules live in
one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.adk.events import Event as AdkEvent
from google.adk.memory import BaseMemoryService
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions import Session as AdkSession
from google.genai import types
from pydantic import ValidationError

from redis_agent_sessions import memory as core
from redis_agent_sessions._redis.codec import check_sequence
from redis_agent_sessions._redis.lifecycle import AnyRedis, check_client_or_uri
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.memory import (
    Backend,
    Embedder,
    FactSettings,
    MemoryGenerator,
    VectorIndex,
)
from redis_agent_sessions.memory._context import DEFAULT_CONTEXT_TURNS
from redis_agent_sessions.memory._service import MemoryServiceBase
from redis_agent_sessions.memory._url import open_memory_service_url
from redis_agent_sessions.models import Content, Event, Session

__all__ = ["RedisMemoryService"]


class RedisMemoryService(
    MemoryServiceBase[AdkSession, AdkEvent, MemoryEntry, SearchMemoryResponse], BaseMemoryService
):
    """ADK memory in Redis: keyword (and with an embedder, semantic) recall over past
    sessions, shared by every worker.

    Takes ADK's ``Session``/``Event``/``MemoryEntry`` and returns ADK's
    ``SearchMemoryResponse`` of ``MemoryEntry`` with ``google.genai`` ``Content``. Semantics
    are the core ``redis_agent_sessions.RedisMemoryService``'s, which reads and writes
    the same keys under the same config: ASCII words match whole words, results rank by
    distinct query words matched then newest first, at most ``limit`` (10) entries, scoped
    to one (app, user).

    Args:
        client: a ``redis.asyncio.Redis`` or ``RedisCluster`` client; it stays open when
            this service closes.
        config: the key prefix, and ``max_payload_bytes``, the most bytes of one entry
            (``ttl_seconds`` and the other session settings do not apply here).
        backend: ``search`` (RediSearch 2.x), ``plain`` (any Redis), or ``auto``.
        uri: instead of a client, a ``redis://``, ``rediss://`` or ``unix://`` URL whose
            query may carry settings (``?key_prefix=prod&ttl_seconds=86400&cluster=true``,
            ``&embedder=google:text-embedding-005``; see [`register`][]); the service then
            owns and closes its client.
        agents_dir: accepted and ignored: ADK's service registry passes it to every
            service it builds.
        embedder: turns semantic recall on, as on the core service.
        vector_index: the vector index's algorithm, as on the core service.
        min_similarity: the least similarity of a vector hit, as on the core service.
        generator: learns facts from sessions (see ``ModelGenerator``), as on the core
            service; ``facts`` its settings.
        context_turns: how many turns on each side a turn is also found by, as on the core
            service; 0 finds a turn by its own words only, as InMemoryMemoryService does.
    """

    def __init__(
        self,
        client: AnyRedis | None = None,
        *,
        config: SessionServiceConfig | None = None,
        backend: Backend = "auto",
        uri: str | None = None,
        agents_dir: str | None = None,
        embedder: Embedder | None = None,
        vector_index: VectorIndex = "HNSW",
        min_similarity: float = 0.0,
        generator: MemoryGenerator | None = None,
        facts: FactSettings | None = None,
        context_turns: int = DEFAULT_CONTEXT_TURNS,
    ) -> None:
        check_client_or_uri(client, uri)
        del agents_dir  # ADK passes it to every service it builds; nothing to do with it
        settings: dict[str, Any] = {
            "config": config,
            "backend": backend,
            "embedder": embedder,
            "vector_index": vector_index,
            "min_similarity": min_similarity,
            "generator": generator,
            "facts": facts,
            "context_turns": context_turns,
        }
        owns_embedder = False
        if uri is not None:
            client, settings, owns_embedder = open_memory_service_url(
                uri, cluster=False, **settings
            )
        assert client is not None
        super().__init__(client, **settings)
        self._owns_client = uri is not None
        self._owns_embedder = owns_embedder

    # Named like ADK's DatabaseSessionService's closer, as on our session service.
    async def close(self) -> None:
        """Close the client if this service created it."""
        await self.aclose()

    def _session(self, session: AdkSession) -> Session:
        if not isinstance(session, AdkSession):
            raise InvalidInputError(f"not an ADK Session: {type(session).__name__}")
        # Only the events matter to memory; the state is not copied (it may be large and
        # is never indexed).
        return Session(
            id=session.id,
            app_name=session.app_name,
            user_id=session.user_id,
            events=self._events(session.events),
        )

    def _events(self, events: Sequence[AdkEvent]) -> list[Event]:
        check_sequence("events", events)
        converted = []
        for event in events:
            if not isinstance(event, AdkEvent):
                raise InvalidInputError(f"not an ADK Event: {type(event).__name__}")
            # The core models accept ADK's JSON as is, keeping the fields they do not model.
            try:
                converted.append(
                    Event.model_validate(event.model_dump(mode="json", exclude_none=True))
                )
            except ValueError as exc:  # pydantic's: an event changed after it was validated
                raise InvalidInputError(
                    f"event {event.id!r} is not valid: {_reason(exc)}"
                ) from None
        return converted

    def _entries(self, memories: Sequence[MemoryEntry]) -> list[core.MemoryEntry]:
        check_sequence("memories", memories)
        entries = []
        for entry in memories:
            if not isinstance(entry, MemoryEntry):
                raise InvalidInputError(f"not an ADK MemoryEntry: {type(entry).__name__}")
            try:
                entries.append(
                    core.MemoryEntry(
                        content=Content.model_validate(
                            entry.content.model_dump(mode="json", exclude_none=True)
                        ),
                        custom_metadata=entry.custom_metadata,
                        id=entry.id,
                        author=entry.author,
                        timestamp=entry.timestamp,
                    )
                )
            except ValueError as exc:  # pydantic's: an entry changed after it was validated
                raise InvalidInputError(f"memory entry is not valid: {_reason(exc)}") from None
        return entries

    def _response(self, found: core.SearchMemoryResponse) -> SearchMemoryResponse:
        return SearchMemoryResponse(
            memories=[
                MemoryEntry(
                    # The core keeps genai fields it does not model as extras, so this
                    # round trip gives back the Content that was stored.
                    content=types.Content.model_validate(
                        entry.content.model_dump(mode="json", exclude_none=True)
                    ),
                    custom_metadata=entry.custom_metadata,
                    id=entry.id,
                    author=entry.author,
                    timestamp=entry.timestamp,
                )
                for entry in found.memories
            ]
        )


def _reason(exc: ValueError) -> str:
    """What pydantic found wrong, on one line: the first problem and where."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return f"{'.'.join(map(str, first['loc'])) or 'value'}: {first['msg']}"
    return str(exc)
