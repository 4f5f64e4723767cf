"""Where the session keys live and how an operation reaches them: the topology seam.

A service picks its layout once, when it is built (``choose_layout``), and every part
of the engine asks the layout instead of testing the topology:

- ``SingleNode``: one node holds every key, so one script writes a
  session, its user's and its app's keys together, and a read is one transaction.
- ``ClusterLayout``: every script and transaction stays in one hash slot.
  A session's keys and its user's share a slot, the app's keys are in another; app-scope
  writes are recorded in the user's outbox and applied to the app's slot as a second,
  idempotent step (``._outbox``).

The scripts learn the layout from one argument, ``Layout.mode``: ``single``, or
``cluster:<id>`` with the lowest outbox id that may not be applied yet (``_layout.lua``).
On a cluster, users whose app-scope writes may be pending are registered first, for the
sweep (``._sweep``).

Expired sessions leave their index entries behind (Redis expires keys, not members of a
sorted set). So each session that expires is also in its app's expiry index
(``ras:{<app>}:sessions_expiry``, a zset), scored by when to check it, and writes take up to
``Layout.expired_per_write`` due members there (claiming them for a minute, so that
concurrent writers take different ones) and hand them to ``Layout.prune``, which drops
the index entries of those that are gone and re-schedules the others (one alive past its
time, most often expiring that instant, a second later): a score is never trusted, so no
clock needs to agree with another. On one node the write scripts keep the
scores exact (create and every append set them, from the worker's clock and the TTL they
apply); on a cluster the index is in the app's slot, which an append without ``app:`` keys
does not reach, so a create's app step sets it and a check that finds the session alive
moves it to the time its metadata says (``expires``), and the app step of every write, and
the sweep, take the due ones.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Literal

from redis.exceptions import RedisError

from redis_agent_sessions._redis.codec import text
from redis_agent_sessions._redis.lost import lost_connection
from redis_agent_sessions._redis.session_calls import Created, PruneIndex, ReadSession, Snapshot
from redis_agent_sessions._redis.topology import Topology
from redis_agent_sessions.errors import RedisSessionsError
from redis_agent_sessions.keys import KeySpace, SessionKeys, split_app_member
from redis_agent_sessions.sessions._apps import AppListing
from redis_agent_sessions.sessions._runner import ScriptRunner
from redis_agent_sessions.sessions._sweep import SweepReport

if TYPE_CHECKING:  # imported only when telemetry is on
    from redis_agent_sessions._telemetry import Telemetry

__all__ = ["Layout"]


class Layout(ABC):
    """Everything about a session operation that depends on the topology."""

    name: Literal["single", "cluster"]
    app_wide_by_update = True
    """Whether the app-wide by-update index (``sessions_updated``) is kept."""
    expired_per_write = 16
    """The most due members of the app's expiry index a write takes to check: all that are
    due, up to this many, so that a burst of sessions expiring together drains in a few
    writes, while a write that finds nothing due pays nothing more (0: none, the cleanup off,
    for benchmarks). It bounds what one write pays for the check: on one node a script, a
    few microseconds of server time per session; on a cluster a script in each session's
    user's slot, concurrently, and the app step of each."""

    def __init__(self, topology: Topology, keys: KeySpace, runner: ScriptRunner) -> None:
        self.topology = topology
        self.keys = keys
        self.runner = runner
        self.client = topology.client
        self.apps = AppListing(topology.client, keys)

    async def ready(self) -> None:
        """Before a client's first command (see ``Topology.ready``)."""
        await self.topology.ready()

    @abstractmethod
    def observe(self, telemetry: Telemetry) -> None:
        """Count what only this layout sees (telemetry on)."""

    @abstractmethod
    def mode(self, keys: SessionKeys) -> str:
        """The scripts' layout argument for an operation on ``keys``' session."""

    # -- the keys each script touches --------------------------------------------------------

    @abstractmethod
    def app_keys(self, keys: SessionKeys, first: str, *rest: str) -> tuple[str, list[str | None]]:
        """The app's keys a script of ``keys``' session names (``first``, then ``rest``), as
        this layout has it touch them: all of them on one node; on a cluster, where they
        are in another slot, the user's outbox for ``first`` and None (left out) for the
        rest."""

    def read_script(
        self,
        keys: SessionKeys,
        count: int | None,
        start: str,
        anchor: str | None,
        shared: str,
        mode: str,
    ) -> Awaitable[Snapshot | None]:
        """read_session.lua's snapshot of ``keys``' session (``shared``: the app state hash,
        or on a cluster the user's outbox; ``mode``: the layout argument)."""
        call = ReadSession(
            meta=keys.meta,
            state=keys.state,
            user_state=keys.user_state,
            events=keys.events,
            app_state=shared,
            event_ids=keys.event_ids,
            range="all" if count is None else "recent" if count else "none",
            start=start,
            recent_count=count or 0,
            layout=mode,
            anchor=anchor,
        )
        return self.runner.run(self.runner.read, call)

    @abstractmethod
    def recording(
        self, keys: SessionKeys, app_writes: bool = True
    ) -> AbstractAsyncContextManager[None]:
        """Around a write script of ``keys``' session that may record app-scope writes
        (``app_writes``): what it takes for a sweep to find them if the worker dies before
        the app step (nothing on a single node)."""

    async def listing(self, app_name: str) -> None:
        """Before a create: the registry of app names is checked (until this process finds
        the app listed), so that a registry this user may not write or of a foreign type
        fails the create with nothing written; ``created`` lists the app after."""
        await self.apps.check(app_name)

    # -- after a write ----------------------------------------------------------------------

    @abstractmethod
    async def created(
        self, keys: SessionKeys, app_name: str, now: float, reply: Created, shortfalls: list[str]
    ) -> Any:
        """The app step of a create: the app state hash as the new session sees it, or None
        when the session existed already."""

    @abstractmethod
    async def settle(
        self,
        keys: SessionKeys,
        after: Any,
        shortfalls: list[str] | None = None,
        *,
        cleanup: bool = True,
    ) -> None:
        """The app step of an append, import, delete or prune: apply the outbox entries its
        script returned (``after``: on a single node, the expiry index's due members the
        script took), then, with ``cleanup``, check those due (``drop_expired``)."""

    # -- reads ---------------------------------------------------------------------------

    @abstractmethod
    async def snapshot(
        self, keys: SessionKeys, count: int | None, start: str, anchor: str | None
    ) -> tuple[list[Any], Any]:
        """One session at one instant: ``([meta, state, user state, -, entries, *checks],
        app state)`` as replies, ``([], app state)`` when there is no session. ``checks``
        (with ``anchor``): its event_ids value and the stream's first entry."""

    @abstractmethod
    async def read_sessions(
        self,
        app_name: str,
        read_keys: list[str],
        users: list[str],
        user_keys: dict[str, SessionKeys],
        app_raw: Any,
    ) -> tuple[list[Any], Any]:
        """The hashes of ``read_keys`` (sessions' meta and state, then ``users``' state), and
        the app state to show with them (``app_raw``, or after pending app writes)."""

    # -- the indexes ---------------------------------------------------------------------

    async def prune(self, app_name: str, gone: list[tuple[str, str]]) -> int:
        """Drop index entries of (user, session) pairs found gone (each re-checked in the
        script; the expiry index re-schedules those that exist): how many were dropped. One
        script per group of pairs (on a cluster, per user: run concurrently)."""
        groups = self._prune_groups(gone)
        if len(groups) == 1:
            return await self._prune_group(app_name, groups[0])
        return sum(await asyncio.gather(*(self._prune_group(app_name, g) for g in groups)))

    async def _prune_group(self, app_name: str, group: list[tuple[str, str]]) -> int:
        first = self.keys.session(app_name, group[0][0], group[0][1])
        app_sessions, (app_updated, app_expiry) = self.app_keys(
            first, first.app_sessions, first.app_updated, first.app_expiry
        )
        session_keys: list[str] = []
        sessions: list[str] = []
        for u, s in group:
            sk = self.keys.session(app_name, u, s)
            session_keys += (sk.meta, sk.user_sessions, sk.user_updated)
            sessions += (s, sk.app_member)
        call = PruneIndex(
            app_sessions=app_sessions,
            app_updated=app_updated,
            app_expiry=app_expiry,
            session_keys=session_keys,
            layout=self.mode(first),
            now_ms=str(int(time.time() * 1000)),
            sessions=sessions,
        )
        async with self.recording(first):
            pruned = await self.runner.run(self.runner.prune, call)
        await self.settle(first, pruned.outbox, cleanup=False)
        await self._pruned(first, pruned.outbox)
        return pruned.dropped

    async def drop_expired(self, app_name: str, due: list[Any]) -> None:
        """After a write landed: check the sessions its step found due in the app's expiry
        index (``due``: app index members), dropping the index entries of those that are
        gone. Best effort: a failure is not the write's, and the members it claimed come
        due again within a minute."""
        if not due:
            return
        pairs = [split_app_member(text(member)) for member in due]
        # Raised, the write that landed would look failed; the next writer checks them.
        try:
            await self.prune(app_name, pairs)
        except (RedisError, RedisSessionsError):
            pass
        except (AttributeError, TypeError) as exc:
            if lost_connection(exc) is None:
                raise

    @abstractmethod
    async def sweep(
        self, app_name: str, older_than: float, limit: int, *, dry_run: bool
    ) -> SweepReport:
        """Apply the app-scope writes that workers left pending (checked arguments)."""

    @abstractmethod
    def _prune_groups(self, gone: list[tuple[str, str]]) -> list[list[tuple[str, str]]]: ...

    @abstractmethod
    async def _pruned(self, first: SessionKeys, outbox: Any) -> None:
        """After a prune of ``first``'s user and its app step (``outbox``: the prune's)."""
