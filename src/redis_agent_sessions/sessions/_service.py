"""The public session API, written once: the core service and the google-adk drop-in bind
it to their own model classes (``S`` sessions, ``E`` events, ``C`` get-session configs, ``L``
list responses). What differs between them is a codec (models, where a copy keeps its
revision, which errors to raise) and three hooks for ids, which the drop-in overrides to
behave as ADK's own services do."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import Any, Generic, Literal, TypeVar

from redis_agent_sessions._health import Readiness, probe_app
from redis_agent_sessions._redis.lifecycle import AnyRedis, ClientOwner
from redis_agent_sessions._redis.lost import type_losses, typed_stream
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.sessions._engine import SessionEngine
from redis_agent_sessions.sessions._pages import EventsPage, SessionsPage
from redis_agent_sessions.sessions._sweep import DEFAULT_OLDER_THAN, SweepReport
from redis_agent_sessions.sessions._types import E, ModelCodec, S

__all__ = ["SessionServiceBase"]

C = TypeVar("C")
L = TypeVar("L")


class SessionServiceBase(ClientOwner, Generic[S, E, C, L]):
    """Sessions, events and scoped state stored in Redis, shared by every worker.

    Args:
        client: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster`` client
            (the key layout follows); it stays open when this service closes.
        config: key prefix, TTL, stale-writer policy, size limit, write concern and read
            cache. Every service sharing the data must use the same key prefix.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # An override (the ADK drop-in's get_session reads by itself) is public too.
        type_losses(cls, OPERATIONS)

    def __init__(self, client: AnyRedis, *, config: SessionServiceConfig | None = None) -> None:
        self._engine: SessionEngine[S, E] = SessionEngine(client, self._codec(), config)
        self._client = client
        self._owns_client = False
        if self._engine.config.telemetry:
            self._engine.instrument(self, OPERATIONS)

    @abstractmethod
    def _codec(self) -> ModelCodec[S, E]:
        """The model classes this service takes and returns."""

    @abstractmethod
    def _list_response(self, sessions: list[S]) -> L:
        """``list_sessions``' answer holding ``sessions``."""

    def _new_session_id(self, session_id: str | None) -> str | None:
        """The id to create a session under (None: a new uuid)."""
        return session_id

    def _session_id(self, session_id: str) -> str:
        """The id of an existing session, as the caller named it."""
        return session_id

    def _finds_nothing(self, **ids: object) -> bool:
        """Whether ids that no session can be stored under find nothing (True) instead of
        raising InvalidInputError (False)."""
        return False

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
    ) -> S:
        """Create a session; ``app:``/``user:`` keys of ``state`` go to the shared scopes.

        ``ttl`` gives this session its own sliding expiry, refreshed by each append, in
        place of ``config.ttl_seconds``: seconds (``0`` = never expires), a ``timedelta``,
        or text such as ``"3600s"``.

        Raises:
            AlreadyExistsError: the id is taken (nothing is written).
            InvalidInputError: an empty or space-padded app name or user id, or a
                non-JSON state value.
        """
        return await self._engine.writes.create_session(
            app_name=app_name,
            user_id=user_id,
            state=state,
            session_id=self._new_session_id(session_id),
            ttl=ttl,
        )

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: C | None = None,
    ) -> S | None:
        """The session with merged state and its events (in append order), or None."""
        session_id = self._session_id(session_id)
        if self._finds_nothing(app_name=app_name, user_id=user_id, session_id=session_id):
            return None
        return await self._engine.reads.get_session(
            app_name=app_name, user_id=user_id, session_id=session_id, config=config
        )

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> L:
        """Sessions of one user, or of every user when ``user_id`` is None: oldest update
        first, with merged state and no events."""
        if self._finds_nothing(app_name=app_name, **_user(user_id)):
            return self._list_response([])
        sessions = await self._engine.listing.list_sessions(app_name=app_name, user_id=user_id)
        return self._list_response(sessions)

    async def list_sessions_page(
        self,
        *,
        app_name: str,
        user_id: str | None = None,
        page_size: int = 100,
        page_token: str | None = None,
        order_by: Literal["updated", "created"] = "updated",
        newest_first: bool = True,
    ) -> SessionsPage[S]:
        """One page of sessions (merged state, no events), read from an index in O(page):
        of every user of the app (``user_id=None``) or of one user, by last update
        (``order_by="updated"``, moved by every append) or by creation, newest first by
        default; at most ``page_size`` (1 to 1,000), continued by passing
        ``next_page_token`` back. Sessions that expired are skipped (and dropped from the
        indexes). On a Redis Cluster, app-wide pages are by creation only.
        """
        if self._finds_nothing(app_name=app_name, **_user(user_id)):
            return SessionsPage()
        return await self._engine.listing.page(
            app_name=app_name,
            user_id=user_id,
            page_size=page_size,
            page_token=page_token,
            order_by=order_by,
            newest_first=newest_first,
        )

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete a session and its events; user and app state stay. Missing: no-op."""
        session_id = self._session_id(session_id)
        if self._finds_nothing(app_name=app_name, user_id=user_id, session_id=session_id):
            return
        await self._engine.writes.delete_session(
            app_name=app_name, user_id=user_id, session_id=session_id
        )

    async def append_event(self, session: S, event: E) -> E:
        """Store ``event`` and apply its state delta, atomically, in one round trip.

        Partial events are returned untouched. ``temp:`` keys reach ``session.state``
        only: they are removed from the event's delta and never stored. The event and its
        delta are applied to ``session``. Re-appending a stored event id is a no-op that
        returns the event.

        Raises:
            SessionNotFoundError: the session does not exist (any more).
            StaleSessionError: another writer appended since ``session`` was read
                (under the default ``reject`` policy); nothing was written and
                ``session`` is unchanged.
        """
        return await self._engine.writes.append_event(session, event)

    async def refresh(self, session: S) -> S:
        """Bring ``session`` (a copy read or created earlier) up to date in place, and
        return it: one round trip reads only the events appended after its newest one,
        which are added to ``session.events``, and the current state, which replaces
        ``session.state`` (``temp:`` keys go, as in any read). The cost grows with what the
        copy lacks, not with the history. A copy that cannot be vouched for (built by hand,
        or one whose newest event was rewritten, or a session deleted and created again)
        is read whole instead, its ``events`` list refilled.

        The retry for StaleSessionError:

        ```python
        try:
            await service.append_event(session, event)
        except StaleSessionError:
            await service.refresh(session)  # now holds what the other writer added
            await service.append_event(session, event)
        ```

        Raises:
            SessionNotFoundError: the session does not exist (any more); ``session`` is
                left as it was.
        """
        return await self._engine.refresher.refresh(session)

    async def list_events(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        limit: int = 100,
        newest_first: bool = False,
        page_token: str | None = None,
    ) -> EventsPage[E]:
        """One page of a session's events, oldest first (or newest first), at most ``limit``
        (1 to 10,000); pass ``next_page_token`` back for the next page. O(limit) whatever
        the history.

        Raises:
            SessionNotFoundError: no such session.
        """
        return await self._engine.events.page(
            app_name,
            user_id,
            self._session_id(session_id),
            limit=limit,
            newest_first=newest_first,
            page_token=page_token,
        )

    def watch(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        after_event_id: str | None = None,
        from_beginning: bool = False,
        block_ms: int = 5000,
    ) -> AsyncIterator[E]:
        """Follow a session live: ``async for event in service.watch(...)`` yields each event
        any worker appends, in order, blocking in Redis (``XREAD BLOCK``) in between.

        Starts after the newest event at the first iteration, after ``after_event_id``
        (resume after the last event seen, e.g. after a disconnect: nothing lost, nothing
        twice), or at the first event with ``from_beginning``. Connection drops are retried
        from the same position. Ends when the session is deleted or expires; stop it by
        breaking out of the loop or cancelling the task. ``block_ms`` is how long one read
        blocks before re-checking that the session exists, at most half the socket timeout
        of the client's connections (a longer block would time out on the client; redis-py
        applies 5 s when the client names none), so a quiet session is watched for ever and
        a deletion is noticed within that time.

        Raises:
            SessionNotFoundError: (at the first iteration) no such session.
            InvalidInputError: ``after_event_id`` is not an event of this session.
        """
        return typed_stream(
            self._engine.events.watch(
                app_name,
                user_id,
                self._session_id(session_id),
                after_event_id=after_event_id,
                from_beginning=from_beginning,
                block_ms=block_ms,
            )
        )

    async def check_ready(self, *, timeout: float = 5.0, app_name: str | None = None) -> Readiness:
        """Whether this service can work now, for an orchestrator's readiness probe: every
        Redis node answers, the scripts run with this user's permissions (on a session
        that does not exist: nothing is written), and under a ``replicas``/``aof`` write
        concern, that the replicas confirm in time. Never raises for what it finds: the
        result is falsy, and each ``Check`` says what failed and why. ``timeout``
        bounds the whole probe (seconds). The probe's session is in an app of its own,
        unless ``app_name`` names one: a Redis user limited to one app's keys (see
        docs/security.md, "Tenants") passes its app."""
        return await self._engine.check_ready(timeout, probe_app(app_name))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """User-scope state, keys without the ``user:`` prefix; ``{}`` when none."""
        if self._finds_nothing(app_name=app_name, user_id=user_id):
            return {}
        return await self._engine.reads.get_user_state(app_name=app_name, user_id=user_id)

    async def get_app_state(self, *, app_name: str) -> dict[str, Any]:
        """App-scope state, keys without the ``app:`` prefix; ``{}`` when none."""
        if self._finds_nothing(app_name=app_name):
            return {}
        return await self._engine.reads.get_app_state(app_name=app_name)

    async def sweep_app_writes(
        self,
        *,
        app_name: str,
        older_than: float = DEFAULT_OLDER_THAN,
        limit: int = 1000,
        dry_run: bool = False,
    ) -> SweepReport:
        """On a Redis Cluster, finish the app-scope writes (``app:`` state, the app-wide
        session index) that a worker left half done by dying between their two steps, which
        only their user sees until that user operates again. Run it every few minutes from
        one worker (or ``redis-agent-sessions sweep APP``): it also keeps the registry of
        users it reads (``ras:{<app>}:app_pending``) small.

        Looks at up to ``limit`` (1 to 10,000) users registered more than ``older_than``
        seconds ago (at least 120), oldest first, applies what they left pending and takes
        them off the registry; then checks up to ``limit`` sessions that the app's expiry
        index says are due, and drops the index entries of those that are gone (appends
        without ``app:`` keys never reach the app's slot, where that index is). ``more``
        says that others are due: call again. Idempotent, safe to run concurrently.
        ``dry_run`` only counts. On a single node nothing is ever pending, and every write
        checks the expiry index itself: it returns zeros without a command.

        Raises:
            InvalidInputError: a bad app name, ``older_than`` or ``limit``.
        """
        return await self._engine.sweep_app_writes(
            app_name=app_name, older_than=older_than, limit=limit, dry_run=dry_run
        )


OPERATIONS = (
    "create_session",
    "get_session",
    "list_sessions",
    "list_sessions_page",
    "delete_session",
    "append_event",
    "refresh",
    "list_events",
    "get_user_state",
    "get_app_state",
    "check_ready",
    "sweep_app_writes",
)
"""What telemetry traces (``watch`` is not a call but a stream that may last for hours),
and what raises a connection redis-py lost without saying so as ConnectionLostError (as
``watch`` does, through its stream)."""

type_losses(SessionServiceBase, OPERATIONS)


def _user(user_id: str | None) -> dict[str, str]:
    """``user_id`` as an id to check, unless it is None (every user)."""
    return {} if user_id is None else {"user_id": user_id}
