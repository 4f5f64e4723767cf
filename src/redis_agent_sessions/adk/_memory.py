"""The google-adk memory drop-in, re-exported by :mod:`redis_agent_sessions.adk`.

Only imported through ``adk.py``, which checks for the ``[adk]`` extra first. Every call
translates ADK's types into the core's and delegates to the core
:class:`redis_agent_sessions.memory.RedisMemoryService`, so matching, ranking, scoping and
deletion rules live in one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from google.adk.events import Event as AdkEvent
from google.adk.memory import BaseMemoryService
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions import Session as AdkSession
from google.genai import types
from typing_extensions import Self, override

from redis_agent_sessions import memory as core
from redis_agent_sessions._redis.codec import check_sequence
from redis_agent_sessions._redis.lifecycle import (
    AnyRedis,
    ClientOwner,
    check_client_or_uri,
    open_memory_url,
)
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.models import Content, Event, Session

__all__ = ["RedisMemoryService"]


class RedisMemoryService(ClientOwner, BaseMemoryService):
    """ADK memory in Redis: keyword recall over past sessions, shared by every worker.

    Takes ADK's ``Session``/``Event``/``MemoryEntry`` and returns ADK's
    ``SearchMemoryResponse`` of ``MemoryEntry`` with ``google.genai`` ``Content``. Semantics
    are the core :class:`redis_agent_sessions.RedisMemoryService`'s, which reads and writes
    the same keys under the same config: ASCII words match whole words, results rank by
    distinct query words matched then newest first, at most ``limit`` (10) entries, scoped
    to one (app, user).

    Args:
        client: a ``redis.asyncio.Redis`` or ``RedisCluster`` client; it stays open when
            this service closes.
        config: the key prefix (``ttl_seconds`` and the session limits do not apply here).
        backend: ``search`` (RediSearch 2.x), ``plain`` (any Redis), or ``auto``.
        uri: instead of a client, a ``redis://``, ``rediss://`` or ``unix://`` URL whose
            query may carry settings (``?key_prefix=prod&ttl_seconds=86400&cluster=true``;
            see :func:`register`); the service then owns and closes its client.
        agents_dir: accepted and ignored: ADK's service registry passes it to every
            service it builds.
    """

    def __init__(
        self,
        client: AnyRedis | None = None,
        *,
        config: SessionServiceConfig | None = None,
        backend: core.Backend = "auto",
        uri: str | None = None,
        agents_dir: str | None = None,
    ) -> None:
        check_client_or_uri(client, uri)
        if uri is not None:
            client, config, backend = open_memory_url(uri, config, backend, cluster=False)
        assert client is not None
        del agents_dir  # ADK passes it to every service it builds; nothing to do with it
        self._core = core.RedisMemoryService(client, config=config, backend=backend)
        self._client = client
        self._owns_client = uri is not None

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        config: SessionServiceConfig | None = None,
        backend: core.Backend = "auto",
        cluster: bool = False,
        **redis_kwargs: Any,
    ) -> Self:
        """A service with its own client, closed by :meth:`aclose`."""
        client, config, backend = open_memory_url(url, config, backend, cluster, **redis_kwargs)
        service = cls(client, config=config, backend=backend)
        service._owns_client = True
        return service

    @property
    def config(self) -> SessionServiceConfig:
        return self._core.config

    async def backend(self) -> Literal["search", "plain"]:
        """The backend in use, detecting it on first call under ``auto``."""
        return await self._core.backend()

    # Named like ADK's DatabaseSessionService's closer, as on our session service.
    close = ClientOwner.aclose

    @override
    async def add_session_to_memory(self, session: AdkSession) -> None:
        """Index the session's events that carry text, replacing what it contributed before.

        Ids removed with :meth:`delete_memory` are not brought back.
        """
        if not isinstance(session, AdkSession):
            raise InvalidInputError(f"not an ADK Session: {type(session).__name__}")
        # Only the events matter to memory; the state is not copied (it may be large and
        # is never indexed).
        await self._core.add_session_to_memory(
            Session(
                id=session.id,
                app_name=session.app_name,
                user_id=session.user_id,
                events=_core_events(session.events),
            )
        )

    @override
    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[AdkEvent],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Add events incrementally: ids already stored or deleted are skipped.

        ``custom_metadata`` is stored on every entry added (ADK's in-memory service
        ignores it).
        """
        await self._core.add_events_to_memory(
            app_name=app_name,
            user_id=user_id,
            events=_core_events(events),
            session_id=session_id,
            custom_metadata=custom_metadata,
        )

    @override
    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Store explicit entries; an entry's id (a new uuid when None) replaces any entry
        with that id, even a deleted one. Its metadata overrides ``custom_metadata``."""
        check_sequence("memories", memories)
        entries = []
        for entry in memories:
            if not isinstance(entry, MemoryEntry):
                raise InvalidInputError(f"not an ADK MemoryEntry: {type(entry).__name__}")
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
        await self._core.add_memory(
            app_name=app_name, user_id=user_id, memories=entries, custom_metadata=custom_metadata
        )

    @override
    async def delete_memory(
        self, *, app_name: str, user_id: str, memory_id: str | None = None
    ) -> None:
        """Delete one entry, or every entry of the user when ``memory_id`` is None
        (ADK's in-memory service does nothing then).

        Deleted ids are remembered: re-adding their session does not bring them back.
        """
        await self._core.delete_memory(app_name=app_name, user_id=user_id, memory_id=memory_id)

    @override
    async def search_memory(
        self, *, app_name: str, user_id: str, query: str, limit: int = 10
    ) -> SearchMemoryResponse:
        """Entries containing query words: most distinct words matched first, then newest.

        ``limit`` is ours (ADK's API has none); ADK callers get the default, 10, the same
        cap as ADK's in-memory service.
        """
        found = await self._core.search_memory(
            app_name=app_name, user_id=user_id, query=query, limit=limit
        )
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


def _core_events(events: Sequence[AdkEvent]) -> list[Event]:
    check_sequence("events", events)
    converted = []
    for event in events:
        if not isinstance(event, AdkEvent):
            raise InvalidInputError(f"not an ADK Event: {type(event).__name__}")
        # The core models accept ADK's JSON as is, keeping the fields they do not model.
        converted.append(Event.model_validate(event.model_dump(mode="json", exclude_none=True)))
    return converted
