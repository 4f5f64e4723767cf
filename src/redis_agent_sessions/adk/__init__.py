"""Drop-in google-adk services backed by Redis (``pip install redis-agent-sessions[adk]``).

:class:`RedisSessionService` is a ``google.adk.sessions.BaseSessionService``: it takes
and returns ADK's own ``Session``/``Event`` objects and raises ADK's own errors, while
the storage logic is the core's :class:`~redis_agent_sessions.sessions._engine.SessionEngine`
driven through an ADK codec. :class:`RedisMemoryService` (from ``_adk_memory``) is a
``google.adk.memory.BaseMemoryService`` delegating to the core memory service. Only
this module and the private modules it imports touch google.adk, so the core works
without it.

Swap them into a Runner::

    session_service = RedisSessionService.from_url("redis://localhost:6379/0")
    memory_service = RedisMemoryService.from_url("redis://localhost:6379/0")
    runner = Runner(agent=agent, app_name="booking_app", session_service=session_service,
                    memory_service=memory_service)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

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
        "redis_agent_sessions.adk needs google-adk: pip install 'redis-agent-sessions[adk]'"
    ) from exc

from typing_extensions import override

from redis_agent_sessions import errors
from redis_agent_sessions._redis.codec import check_id
from redis_agent_sessions._redis.lifecycle import (
    AnyRedis,
    ClientOwner,
    check_client_or_uri,
    open_url,
)
from redis_agent_sessions._redis.uri import SCHEMES
from redis_agent_sessions.adk._compacted import CompactedReads, read_compacted, read_hints
from redis_agent_sessions.adk._memory import RedisMemoryService
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.sessions._engine import SessionEngine
from redis_agent_sessions.sessions._pages import EventsPage, SessionsPage
from redis_agent_sessions.sessions._pydantic_codec import PydanticCodec, private

__all__ = [
    "AlreadyExistsError",
    "CompactedReads",
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


class _AdkCodec(PydanticCodec[Session, Event]):
    """Maps the engine onto ADK's ``Session`` and ``Event``.

    The engine's revision travels in ``Session._storage_update_marker``, the private
    attribute ADK reserves for exactly this, so pydantic ``==`` between a session we
    returned and one read back holds.
    """

    def __init__(self) -> None:
        # genai decodes base64 bytes itself, so binary parts survive dict validation
        # (tests/test_adk_parity.py::test_rich_event_round_trip).
        super().__init__(Session, Event, GetSessionConfig)

    def revision(self, session: Session) -> int | None:
        marker = private(session, "_storage_update_marker")
        # A marker we did not write (a session built by hand or by another backend)
        # says nothing about our revision: the engine then compares last event ids.
        if marker is None or not marker.isdigit():
            return None
        return int(marker)

    def set_revision(self, session: Session, revision: int) -> None:
        session._storage_update_marker = str(revision)

    def read_hints(self, event: Event) -> tuple[str, str]:
        return read_hints(event)


def _session_id(value: str) -> str:
    """A session id as ADK's InMemory and Sqlite services take it: surrounding whitespace
    stripped (``"order-42\\n"`` is ``"order-42"``); anything else is left to the core."""
    return value.strip() if isinstance(value, str) else value


async def _adk_errors(events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    """``events``, with a missing session raised as ADK's SessionNotFoundError."""
    try:
        async for event in events:
            yield event
    except errors.SessionNotFoundError as exc:
        raise SessionNotFoundError(str(exc)) from None


def _found_nothing(**ids: object) -> bool:
    """Whether a read names an id no session can be stored under: empty or padded.

    The core refuses to store such ids (creating one raises), so ADK's answer for an
    unknown id (None, [], {}) is exactly true for them. Any other bad id (not a str,
    unencodable, too long) still raises InvalidInputError.
    """
    found_nothing = False
    for name, value in ids.items():
        if isinstance(value, str) and (not value or value != value.strip()):
            found_nothing = True
        else:
            check_id(name, value)
    return found_nothing


class RedisSessionService(ClientOwner, BaseSessionService):
    """ADK sessions, events and scoped state in Redis, shared by every worker.

    Semantics are ADK's (see ``BaseSessionService``); a writer holding an outdated
    session gets ``StaleSessionError`` like with ``DatabaseSessionService`` (or, with
    ``SessionServiceConfig(stale_policy="merge")``, its append is applied).

    Session ids are normalized like ADK's ``InMemorySessionService`` and
    ``SqliteSessionService`` do: surrounding whitespace is stripped on create, get and
    delete, and an empty one on create gets a new uuid. App names and user ids are never
    stripped (ADK keeps ``" u"`` and ``"u"`` apart too); an empty or padded one is refused
    on create and finds nothing on reads.

    Args:
        client: a ``redis.asyncio.Redis`` or ``RedisCluster`` client; it stays open when
            this service closes.
        config: key prefix, TTL, stale-writer policy and size limit. Every service
            sharing the data must use the same values; the core
            :class:`redis_agent_sessions.RedisSessionService` with the same config reads
            and writes the same keys.
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
        uri: str | None = None,
        agents_dir: str | None = None,
    ) -> None:
        check_client_or_uri(client, uri)
        if uri is not None:
            client, config = open_url(uri, config)
        assert client is not None
        del agents_dir  # ADK passes it to every service it builds; nothing to do with it
        self._engine: SessionEngine[Session, Event] = SessionEngine(client, _AdkCodec(), config)
        self._client = client
        self._owns_client = uri is not None

    @property
    def config(self) -> SessionServiceConfig:
        return self._engine.config

    # ADK's DatabaseSessionService names its closer ``close``.
    close = ClientOwner.aclose

    @override
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
        ttl: int | str | timedelta | None = None,
    ) -> Session:
        """Create a session; ``app:``/``user:`` keys of ``state`` go to the shared scopes.

        ``session_id`` is stripped of surrounding whitespace; when that leaves nothing, a
        uuid is generated, as ADK's InMemory and Sqlite services do.

        ``ttl`` gives this session its own sliding expiry in place of the config's
        ``ttl_seconds``: seconds (0 = never), a ``timedelta``, or text like ``"3600s"``.
        ADK's REST API forwards it from ``POST .../sessions`` with
        ``{"options": {"ttl": "3600s"}}``, as for VertexAiSessionService.

        Raises:
            AlreadyExistsError: the id is taken (nothing is written).
            InvalidInputError: an empty or space-padded app name or user id, or a
                non-JSON state value.
        """
        sid = None if session_id is None else _session_id(session_id)
        try:
            return await self._engine.create_session(
                app_name=app_name, user_id=user_id, state=state, session_id=sid or None, ttl=ttl
            )
        except errors.AlreadyExistsError as exc:
            raise AlreadyExistsError(str(exc)) from None

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

        A padded ``session_id`` finds the session under its stripped id. With a
        :class:`CompactedReads` config, ``events`` holds only what a Runner turn with
        compaction uses (see there).
        """
        sid = _session_id(session_id)
        if _found_nothing(app_name=app_name, user_id=user_id, session_id=sid):
            return None
        if isinstance(config, CompactedReads):
            if config.num_recent_events is not None or config.after_timestamp is not None:
                raise errors.InvalidInputError(
                    "CompactedReads cannot be combined with num_recent_events or after_timestamp"
                )
            await self._engine._connected()
            keys = self._engine.keys.session(app_name, user_id, sid)
            session, done = await read_compacted(self._engine, keys, config.compaction)
            if done:
                return session
            config = None
        return await self._engine.get_session(
            app_name=app_name, user_id=user_id, session_id=sid, config=config
        )

    @override
    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """Sessions of one user, or of every user when ``user_id`` is None.

        Oldest update first, with merged state and no events. An empty or padded user id
        has no sessions, as in ADK's services.
        """
        if _found_nothing(app_name=app_name, **({} if user_id is None else {"user_id": user_id})):
            return ListSessionsResponse()
        sessions = await self._engine.list_sessions(app_name=app_name, user_id=user_id)
        return ListSessionsResponse(sessions=sessions)

    async def list_sessions_page(
        self,
        *,
        app_name: str,
        user_id: str | None = None,
        page_size: int = 100,
        page_token: str | None = None,
        order_by: Literal["updated", "created"] = "updated",
        newest_first: bool = True,
    ) -> SessionsPage[Session]:
        """One page of sessions (merged state, no events), read from an index in O(page):
        of every user of the app (``user_id=None``) or of one user, by last update
        (``order_by="updated"``, moved by every append) or by creation, newest first by
        default; at most ``page_size`` (1 to 1,000), continued by passing
        ``next_page_token`` back. Sessions that expired are skipped (and dropped from the
        indexes). On a Redis Cluster, app-wide pages are by creation only.
        """
        if _found_nothing(app_name=app_name, **({} if user_id is None else {"user_id": user_id})):
            return SessionsPage()
        return await self._engine.listing.page(
            app_name=app_name,
            user_id=user_id,
            page_size=page_size,
            page_token=page_token,
            order_by=order_by,
            newest_first=newest_first,
        )

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete a session and its events; user and app state stay. Missing: no-op.

        A padded ``session_id`` deletes the session under its stripped id.
        """
        sid = _session_id(session_id)
        if _found_nothing(app_name=app_name, user_id=user_id, session_id=sid):
            return
        await self._engine.delete_session(app_name=app_name, user_id=user_id, session_id=sid)

    @override
    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event`` and apply its state delta atomically, in one round trip.

        Follows ``BaseSessionService.append_event``: partial events are returned
        untouched; ``temp:`` keys reach ``session.state`` but are removed from the
        event's delta and never stored; the event and its delta are applied to
        ``session``. Re-appending a stored event id is a no-op returning the event.

        Raises:
            SessionNotFoundError: the session does not exist (any more).
            StaleSessionError: another writer appended since ``session`` was read
                (``reject`` policy); nothing was written and ``session`` is unchanged.
        """
        try:
            return await self._engine.append_event(session, event)
        except errors.StaleSessionError as exc:
            raise StaleSessionError(str(exc)) from None
        except errors.SessionNotFoundError as exc:
            raise SessionNotFoundError(str(exc)) from None

    async def refresh(self, session: Session) -> Session:
        """Bring ``session`` up to date in place and return it (not part of ADK's API):
        only the events appended after its newest one are read and added, and the state
        is replaced by the current one, in one round trip; see the core service's
        ``refresh``. The retry for a Runner-less worker that got StaleSessionError:
        ``await service.refresh(session)``, then append again.

        Raises:
            SessionNotFoundError: the session does not exist (any more); ``session`` is
                left as it was.
        """
        try:
            return await self._engine.refresh(session)
        except errors.SessionNotFoundError as exc:
            raise SessionNotFoundError(str(exc)) from None

    async def list_events(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        limit: int = 100,
        newest_first: bool = False,
        page_token: str | None = None,
    ) -> EventsPage[Event]:
        """One page of a session's events (not part of ADK's API): oldest first or newest
        first, at most ``limit`` (1 to 10,000), continued with ``next_page_token``; O(limit)
        whatever the history.

        Raises:
            SessionNotFoundError: no such session.
        """
        try:
            return await self._engine.events.page(
                app_name,
                user_id,
                _session_id(session_id),
                limit=limit,
                newest_first=newest_first,
                page_token=page_token,
            )
        except errors.SessionNotFoundError as exc:
            raise SessionNotFoundError(str(exc)) from None

    def watch(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        after_event_id: str | None = None,
        from_beginning: bool = False,
        block_ms: int = 5000,
    ) -> AsyncIterator[Event]:
        """Follow a session live (not part of ADK's API): yields each ADK ``Event`` any
        worker appends, in order; see the core service's ``watch`` for the semantics.

        Raises:
            SessionNotFoundError: (at the first iteration) no such session.
        """
        inner = self._engine.events.watch(
            app_name,
            user_id,
            _session_id(session_id),
            after_event_id=after_event_id,
            from_beginning=from_beginning,
            block_ms=block_ms,
        )
        return _adk_errors(inner)

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """User-scope state, keys without the ``user:`` prefix; ``{}`` when none."""
        if _found_nothing(app_name=app_name, user_id=user_id):
            return {}
        return await self._engine.get_user_state(app_name=app_name, user_id=user_id)

    async def get_app_state(self, *, app_name: str) -> dict[str, Any]:
        """App-scope state, keys without the ``app:`` prefix (not part of ADK's API)."""
        if _found_nothing(app_name=app_name):
            return {}
        return await self._engine.get_app_state(app_name=app_name)


def register(registry: ServiceRegistry | None = None) -> None:
    """Let ADK's CLI and servers take ``redis://``, ``rediss://`` and ``unix://`` URIs.

    Call it from a ``services.py`` in the agents directory (``adk web``, ``adk
    api_server``, ``adk run`` and ``get_fast_api_app`` import that file) to make
    ``--session_service_uri`` and ``--memory_service_uri`` build this module's services.
    The URI's query carries the settings: any :class:`SessionServiceConfig` field
    (``key_prefix``, ``ttl_seconds``, ``stale_policy``, ``cluster``, ...) and, for
    memory, ``memory_backend``; an unknown parameter fails with the list of valid ones.
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
