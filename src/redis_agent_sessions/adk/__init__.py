"""Drop-in google-adk services backed by Redis (``pip install redis-agent-sessions[adk]``).

``RedisSessionService`` is a ``google.adk.sessions.BaseSessionService``: it takes
and returns ADK's own ``Session``/``Event`` objects and raises ADK's own errors, while
the service is the core's own definition (``sessions/_service.py``) bound to ADK's models
through an ADK codec. ``RedisMemoryService`` (from ``_adk_memory``) is a
``google.adk.memory.BaseMemoryService`` delegating to the core memory service. Only
this module and the private modules it imports touch google.adk, so the core works
without it.

Swap them into a Runner:

```python
session_service = RedisSessionService.from_url("redis://localhost:6379/0")
memory_service = RedisMemoryService.from_url("redis://localhost:6379/0")
runner = Runner(agent=agent, app_name="booking_app",
                session_service=session_service, memory_service=memory_service)
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.adk.cli.service_registry import ServiceRegistry

try:
    from google.adk.errors import StaleSessionError as _AdkStaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError as _AdkAlreadyExists
    from google.adk.errors.session_not_found_error import (
        SessionNotFoundError as _AdkSessionNotFound,
    )
    from google.adk.events import Event
    from google.adk.sessions import BaseSessionService, Session
    from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "redis_agent_sessions.adk needs google-adk, which needs Python 3.11 or newer: "
        "pip install 'redis-agent-sessions[adk]'"
    ) from exc

from typing_extensions import override

from redis_agent_sessions import errors
from redis_agent_sessions._redis.codec import check_id
from redis_agent_sessions._redis.lifecycle import AnyRedis, check_client_or_uri, open_url
from redis_agent_sessions._redis.uri import SCHEMES
from redis_agent_sessions.adk._codec import AdkCodec
from redis_agent_sessions.adk._compacted import CompactedReads, read_compacted
from redis_agent_sessions.adk._memory import RedisMemoryService
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.memory._model_generator import ModelGenerator
from redis_agent_sessions.sessions._service import SessionServiceBase
from redis_agent_sessions.sessions._types import ErrorTypes

__all__ = [
    "AlreadyExistsError",
    "CompactedReads",
    "ModelGenerator",
    "RedisMemoryService",
    "RedisSessionService",
    "SessionNotFoundError",
    "StaleSessionError",
    "register",
]


# Each error is both ADK's (what ADK callers catch) and ours (so every error of this
# library still derives from RedisSessionsError).
class AlreadyExistsError(errors.AlreadyExistsError, _AdkAlreadyExists):
    """The session id is taken; nothing was written."""


class SessionNotFoundError(errors.SessionNotFoundError, _AdkSessionNotFound):
    """The session does not exist (never created, deleted, or expired)."""


class StaleSessionError(errors.StaleSessionError, _AdkStaleSessionError):
    """Another writer appended since this session copy was read; nothing was written."""


def _adk_codec() -> AdkCodec:
    return AdkCodec(ErrorTypes(AlreadyExistsError, SessionNotFoundError, StaleSessionError))


class RedisSessionService(
    SessionServiceBase[Session, Event, GetSessionConfig, ListSessionsResponse],
    BaseSessionService,
):
    """ADK sessions, events and scoped state in Redis, shared by every worker.

    Semantics are ADK's (see ``BaseSessionService``); a writer holding an outdated
    session gets ``StaleSessionError`` like with ``DatabaseSessionService`` (or, with
    ``SessionServiceConfig(stale_policy="merge")``, its append is applied). The methods
    beyond ADK's API (``refresh``, ``list_events``, ``watch``, ``list_sessions_page``,
    ``get_app_state``) take and return ADK's models too.

    Session ids are normalized like ADK's ``InMemorySessionService`` and
    ``SqliteSessionService`` do: surrounding whitespace is stripped on create, get and
    delete, and an empty one on create gets a new uuid. App names and user ids are never
    stripped (ADK keeps ``" u"`` and ``"u"`` apart too); an empty or padded one is refused
    on create and finds nothing on reads (None, ``[]``, ``{}``).

    Args:
        client: a ``redis.asyncio.Redis`` or ``RedisCluster`` client; it stays open when
            this service closes.
        config: key prefix, TTL, stale-writer policy and size limit. Every service
            sharing the data must use the same values; the core
            ``redis_agent_sessions.RedisSessionService`` with the same config reads
            and writes the same keys.
        uri: instead of a client, a ``redis://``, ``rediss://`` or ``unix://`` URL whose
            query may carry settings (``?key_prefix=prod&ttl_seconds=86400&cluster=true``;
            see [`register`][]); the service then owns and closes its client.
        agents_dir: accepted and ignored: ADK's service registry passes it to every
            service it builds.
    """

    def __init__(
        self,
        client: AnyRedis | None = None,
        *,
        config: SessionServiceConfig | None = None,
        uri: str | None = None,
        agents_dir: str | None = None,
    ) -> None:
        check_client_or_uri(client, uri)
        if uri is not None:
            client, config = open_url(uri, config)
        assert client is not None
        del agents_dir  # ADK passes it to every service it builds; nothing to do with it
        super().__init__(client, config=config)
        self._owns_client = uri is not None

    # ADK's DatabaseSessionService names its closer ``close``.
    async def close(self) -> None:
        """Close the client if this service created it."""
        await self.aclose()

    def _codec(self) -> AdkCodec:
        return _adk_codec()

    def _list_response(self, sessions: list[Session]) -> ListSessionsResponse:
        return ListSessionsResponse(sessions=sessions)

    def _new_session_id(self, session_id: str | None) -> str | None:
        # As ADK's InMemory and Sqlite services: stripped, and a new uuid when empty.
        return None if session_id is None else self._session_id(session_id) or None

    def _session_id(self, session_id: str) -> str:
        # ``"order-42\n"`` is ``"order-42"``; anything else is left to the core's checks.
        return session_id.strip() if isinstance(session_id, str) else session_id

    def _finds_nothing(self, **ids: object) -> bool:
        # The core refuses to store empty or padded ids (creating one raises), so ADK's
        # answer for an unknown id is exactly true for them. Any other bad id (not a str,
        # unencodable, too long) still raises InvalidInputError.
        found_nothing = False
        for name, value in ids.items():
            if isinstance(value, str) and (not value or value != value.strip()):
                found_nothing = True
            else:
                check_id(name, value)
        return found_nothing

    @override
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with merged state and its events in append order, or None.

        With a [`CompactedReads`][] config, ``events`` holds only what a Runner turn
        with compaction uses (see there).
        """
        if isinstance(config, CompactedReads):
            sid = self._session_id(session_id)
            if self._finds_nothing(app_name=app_name, user_id=user_id, session_id=sid):
                return None
            if config.num_recent_events is not None or config.after_timestamp is not None:
                raise errors.InvalidInputError(
                    "CompactedReads cannot be combined with num_recent_events or after_timestamp"
                )
            engine = self._engine
            await engine.ready()
            keys = engine.keys.session(app_name, user_id, sid)
            session, done = await read_compacted(engine.reads, keys, config.compaction)
            if done:
                return session
            config = None
        return await super().get_session(
            app_name=app_name, user_id=user_id, session_id=session_id, config=config
        )


def register(registry: ServiceRegistry | None = None) -> None:
    """Let ADK's CLI and servers take ``redis://``, ``rediss://`` and ``unix://`` URIs.

    Call it from a ``services.py`` in the agents directory (``adk web``, ``adk
    api_server``, ``adk run`` and ``get_fast_api_app`` import that file) to make
    ``--session_service_uri`` and ``--memory_service_uri`` build this module's services.
    The URI's query carries the settings: any [`SessionServiceConfig`][] field
    (``key_prefix``, ``ttl_seconds``, ``stale_policy``, ``cluster``, ...) and, for
    memory, ``memory_backend`` and semantic recall (``embedder=google:<model>``,
    ``embedder_dimensions``, ``vector_index``, ``min_similarity``); an unknown parameter
    fails with the list of valid ones.
    """
    # Imported here: the registry module loads ADK's CLI helpers, which workers never need.
    from google.adk.cli.service_registry import get_service_registry

    target = registry if registry is not None else get_service_registry()
    for scheme in SCHEMES:
        target.register_session_service(scheme, _session_service)
        target.register_memory_service(scheme, _memory_service)


def _session_service(uri: str, **kwargs: Any) -> RedisSessionService:
    return RedisSessionService(uri=uri, **kwargs)


def _memory_service(uri: str, **kwargs: Any) -> RedisMemoryService:
    return RedisMemoryService(uri=uri, **kwargs)
