"""RedisSessionService: the session store with this package's own models."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from ._engine import SessionEngine
from ._lifecycle import AnyRedis, ClientOwner
from ._pydantic_codec import PydanticCodec
from .config import SessionServiceConfig
from .models import Event, GetSessionConfig, ListSessionsResponse, Session

__all__ = ["RedisSessionService"]


class _Codec(PydanticCodec[Session, Event]):
    """Maps the engine onto :mod:`redis_agent_sessions.models`."""

    def __init__(self) -> None:
        super().__init__(Session, Event, GetSessionConfig, validate_dicts=False)

    def revision(self, session: Session) -> int | None:
        return session._revision

    def set_revision(self, session: Session, revision: int) -> None:
        session._revision = revision


class RedisSessionService(ClientOwner):
    """Sessions, events and scoped state stored in Redis, shared by every worker.

    Args:
        client: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster`` client
            (the key layout follows); it stays open when this service closes.
        config: key prefix, TTL, stale-writer policy and size limit.
    """

    def __init__(self, client: AnyRedis, *, config: SessionServiceConfig | None = None) -> None:
        self._engine: SessionEngine[Session, Event] = SessionEngine(client, _Codec(), config)
        self._client = client
        self._owns_client = False

    @property
    def config(self) -> SessionServiceConfig:
        return self._engine.config

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        ttl: int | str | timedelta | None = None,
    ) -> Session:
        """Create a session; ``app:``/``user:`` keys of ``state`` go to the shared scopes.

        ``ttl`` gives this session its own sliding expiry, refreshed by each append, in
        place of ``config.ttl_seconds``: seconds (``0`` = never expires), a ``timedelta``,
        or text such as ``"3600s"``.

        Raises:
            AlreadyExistsError: the id is taken (nothing is written).
        """
        return await self._engine.create_session(
            app_name=app_name, user_id=user_id, state=state, session_id=session_id, ttl=ttl
        )

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with merged state and its events (in append order), or None."""
        return await self._engine.get_session(
            app_name=app_name, user_id=user_id, session_id=session_id, config=config
        )

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """Sessions of one user, or of every user when ``user_id`` is None; oldest first."""
        sessions = await self._engine.list_sessions(app_name=app_name, user_id=user_id)
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete a session and its events; user and app state stay. Missing: no-op."""
        await self._engine.delete_session(app_name=app_name, user_id=user_id, session_id=session_id)

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store ``event`` and apply its state delta, atomically, in one round trip.

        Partial events are returned untouched. ``temp:`` keys reach ``session.state``
        only. Re-appending a stored event id is a no-op that returns the event.

        Raises:
            SessionNotFoundError: the session does not exist (any more).
            StaleSessionError: another writer appended since ``session`` was read
                (under the default ``reject`` policy); nothing was written.
        """
        return await self._engine.append_event(session, event)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """User-scope state, keys without the ``user:`` prefix."""
        return await self._engine.get_user_state(app_name=app_name, user_id=user_id)

    async def get_app_state(self, *, app_name: str) -> dict[str, Any]:
        """App-scope state, keys without the ``app:`` prefix."""
        return await self._engine.get_app_state(app_name=app_name)
