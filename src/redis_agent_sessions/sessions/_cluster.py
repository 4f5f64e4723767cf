"""The cluster layout: each script stays in its user's slot; app writes are a second step."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import text
from redis_agent_sessions._redis.session_calls import Created, ExpiryDue
from redis_agent_sessions._redis.topology import Topology
from redis_agent_sessions.keys import KeySpace, SessionKeys, split_app_member
from redis_agent_sessions.sessions._layout import Layout
from redis_agent_sessions.sessions._outbox import AppOutbox
from redis_agent_sessions.sessions._replies import pairs
from redis_agent_sessions.sessions._runner import ScriptRunner
from redis_agent_sessions.sessions._sweep import AppRegistry, SweepReport

if TYPE_CHECKING:  # imported only when telemetry is on
    from redis_agent_sessions._telemetry import Telemetry

__all__ = ["ClusterLayout"]

_NO_APP_WRITES: AbstractAsyncContextManager[None] = nullcontext()
_EXPIRY_BATCH = 100  # due members of the expiry index a sweep checks per script call


class ClusterLayout(Layout):
    """A Redis Cluster: a session's and its user's keys share a slot, the app's keys have
    their own. App-scope writes go through the user's outbox (``._outbox``); their
    users are registered for the sweep first (``._sweep``)."""

    name = "cluster"
    app_wide_by_update = False
    """An app-wide by-update index would make every append write to the app's slot."""

    optimistic_reads = 3
    """Pipelined snapshot attempts before a read falls back to a script."""

    def __init__(self, topology: Topology, keys: KeySpace, runner: ScriptRunner) -> None:
        super().__init__(topology, keys, runner)
        self.outbox = AppOutbox(topology.client)
        self.registry = AppRegistry(runner, keys, self.outbox, self.apps)

    def observe(self, telemetry: Telemetry) -> None:
        self.outbox.telemetry = telemetry

    def mode(self, keys: SessionKeys) -> str:
        return f"cluster:{self._first_unapplied(keys)}"

    def _first_unapplied(self, keys: SessionKeys) -> str:
        """The lowest outbox id of this user that may not be applied yet, as far as this
        worker knows: older entries are dropped by the next script, newer ones returned."""
        return self.outbox.first_unapplied(keys.app_applied, keys.user_member)

    def app_keys(self, keys: SessionKeys, first: str, *rest: str) -> tuple[str, list[str | None]]:
        return keys.app_outbox, [None for _ in rest]

    def recording(
        self, keys: SessionKeys, app_writes: bool = True
    ) -> AbstractAsyncContextManager[None]:
        return self.registry.recording(keys) if app_writes else _NO_APP_WRITES

    async def created(
        self, keys: SessionKeys, app_name: str, now: float, reply: Created, shortfalls: list[str]
    ) -> Any:
        # Alongside the app step: it needs no order (a retried create lists it too).
        listed = self.apps.list(app_name, now)
        if not reply.created:
            if reply.outbox:
                await asyncio.gather(listed, self._apply(keys, reply.outbox, want_state=False))
            else:
                await listed
            return None
        due: list[Any] = []
        outbox = reply.outbox
        applied = self._apply(keys, outbox, want_state=True, shortfalls=shortfalls, due=due)
        app_raw = (await asyncio.gather(listed, applied))[1]
        await self.drop_expired(app_name, due)
        return app_raw

    async def settle(
        self,
        keys: SessionKeys,
        after: Any,
        shortfalls: list[str] | None = None,
        *,
        cleanup: bool = True,
    ) -> None:
        # The user-slot step is done; if this one fails the caller retries, and the retry
        # (finding its write done) finishes the apply.
        if after:
            due: list[Any] | None = [] if cleanup else None
            await self._apply(keys, after, want_state=False, shortfalls=shortfalls, due=due)
            if due:
                await self.drop_expired(keys.app_name, due)

    async def snapshot(
        self, keys: SessionKeys, count: int | None, start: str, anchor: str | None
    ) -> tuple[list[Any], Any]:
        """The user-slot snapshot [meta, state, user state, outbox, events, presence of the
        events and event ids] (and with ``anchor``, its event_ids value and the first
        entry) and the app state, in one round trip to both slots' nodes.

        MULTI on redis-py's cluster client runs in threads (~25x a pipeline), so the user's
        slot is read optimistically: metadata before and after the rest, kept only if it
        did not change (every append, create and delete changes it). After
        ``optimistic_reads`` misses under heavy writing, a read-only script takes the
        snapshot instead. This user's app writes that are not applied yet (a worker died
        between the two steps) are applied now, so a user always reads their own writes.
        """
        first = self._first_unapplied(keys)
        read_keys = [keys.meta, keys.state, keys.user_state, keys.events, keys.app_outbox]
        checked = [keys.events, keys.event_ids]
        if anchor is not None:
            checked += [keys.event_ids, keys.events]
        reply: list[Any] = []
        outbox: Any = []
        for _ in range(self.optimistic_reads):
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(keys.meta)
            pipe.hgetall(keys.state)
            pipe.hgetall(keys.user_state)
            if count is None:
                pipe.xrange(keys.events, start, "+")
            else:
                pipe.xrevrange(keys.events, "+", start, count=max(count, 1))
            pipe.xrange(keys.app_outbox, first, "+")
            pipe.exists(keys.events)
            pipe.exists(keys.event_ids)
            if anchor is not None:
                pipe.hget(keys.event_ids, anchor)
                pipe.xrange(keys.events, "-", "+", count=1)
            pipe.hgetall(keys.meta)
            pipe.hgetall(keys.app_state)
            pipe.hget(keys.app_applied, keys.user_member)
            replies = await _scripts.execute(
                pipe, [*read_keys, *checked, keys.meta, keys.app_state, keys.app_applied]
            )
            meta, state, user, events, outbox = replies[:5]
            again, app_raw, applied = replies[-3:]
            if meta == again:
                present = replies[5:7]
                reply = [meta, state, user, outbox, events, present, *replies[7:-3]] if meta else []
                break
        else:
            pipe = self.client.pipeline(transaction=False)
            pipe.hgetall(keys.app_state)
            pipe.hget(keys.app_applied, keys.user_member)
            outbox_key, mode = keys.app_outbox, f"cluster:{first}"
            script = self.read_script(keys, count, start, anchor, outbox_key, mode)
            read, (app_raw, applied) = await asyncio.gather(
                script, _scripts.execute(pipe, [keys.app_state, keys.app_applied])
            )
            if read is None:
                return [], app_raw
            checks = [] if anchor is None else [read.anchor, read.first]
            meta, state, user = pairs(read.meta), read.state, read.user_state
            reply = [meta, state, user, read.shared, read.events, read.present, *checks]
        # The outbox was read even for a missing session: a user's pending writes (say, the
        # index removal of a delete whose app step failed) are finished by any read.
        if reply:
            outbox = reply[3]
        return reply, await self._finish_pending(keys, outbox, applied, app_raw)

    async def read_sessions(
        self,
        app_name: str,
        read_keys: list[str],
        users: list[str],
        user_keys: dict[str, SessionKeys],
        app_raw: Any,
    ) -> tuple[list[Any], Any]:
        """The hashes, then each user's outbox entries and the app's applied-outbox record
        of each user, in one pipeline (a page spans slots); then any of those users' app
        writes still pending are applied, so that the app state shown includes them."""
        pipe = self.client.pipeline(transaction=False)
        for key in read_keys:
            pipe.hgetall(key)
        for u in users:
            pipe.xrange(user_keys[u].app_outbox, self._first_unapplied(user_keys[u]), "+")
        applied_key = self.keys.app_applied(app_name)
        pipe.hmget(applied_key, [user_keys[u].user_member for u in users])
        outbox_keys = [user_keys[u].app_outbox for u in users]
        replies = await _scripts.execute(pipe, [*read_keys, *outbox_keys, applied_key])
        n = len(read_keys)
        outboxes = replies[n : n + len(users)]
        for u, outbox, applied in zip(users, outboxes, replies[-1], strict=True):
            app_raw = await self._finish_pending(user_keys[u], outbox, applied, app_raw)
        return replies[:n], app_raw

    async def sweep(
        self, app_name: str, older_than: float, limit: int, *, dry_run: bool
    ) -> SweepReport:
        """The registry's sweep, then up to ``limit`` due members of the app's expiry
        index checked (appends without ``app:`` keys never reach the app's slot, so an app
        whose sessions are rarely created relies on this)."""
        report = await self.registry.sweep(app_name, older_than, limit, dry_run=dry_run)
        due, dropped, more = await self._sweep_expired(app_name, limit, dry_run)
        return dataclasses.replace(
            report, expired_due=due, expired_dropped=dropped, more=report.more or more
        )

    async def _sweep_expired(
        self, app_name: str, limit: int, dry_run: bool
    ) -> tuple[int, int, bool]:
        """(members due, sessions found gone and dropped, more due than ``limit``)."""
        key = self.keys.app_expiry(app_name)

        async def take(n: int, claim: bool) -> list[Any]:
            now = int(time.time() * 1000)
            call = ExpiryDue(expiry=key, now_ms=now, at_most=n, claim="1" if claim else "")
            return await self.runner.run(self.runner.expiry_due, call)

        if dry_run:
            found = await take(limit + 1, claim=False)
            return min(len(found), limit), 0, len(found) > limit
        seen = dropped = 0
        while seen < limit:
            batch = await take(min(_EXPIRY_BATCH, limit - seen), claim=True)
            seen += len(batch)
            if batch:
                pairs = [split_app_member(text(member)) for member in batch]
                dropped += await self.prune(app_name, pairs)
            if len(batch) < _EXPIRY_BATCH:
                return seen, dropped, False
        return seen, dropped, bool(await take(1, claim=False))

    def _prune_groups(self, gone: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
        # One script per user: each touches only that user's slot.
        by_user: dict[str, list[tuple[str, str]]] = {}
        for u, s in gone:
            by_user.setdefault(u, []).append((u, s))
        return list(by_user.values())

    async def _pruned(self, first: SessionKeys, outbox: Any) -> None:
        # The user's next script would drop the entries just applied; a user whose sessions
        # expired may never write again, and a stream holding entries keeps a whole node
        # (~4 KB) where an empty one takes a few hundred bytes.
        if outbox:
            minid = self._first_unapplied(first)
            await self.client.xtrim(first.app_outbox, minid=minid, approximate=False)

    async def _finish_pending(
        self, keys: SessionKeys, outbox: Any, applied: bytes | str | None, app_raw: Any
    ) -> Any:
        """The app state to show a reader of this user: ``app_raw`` as read, or, when the
        user's ``outbox`` (an XRANGE reply) holds entries after ``applied`` (the app's
        record for the user), the state after applying them now."""
        self.outbox.learn(keys.app_applied, keys.user_member, applied)
        pending = AppOutbox.pending(AppOutbox.entries(outbox), applied)
        if not pending:
            return app_raw
        return await self._apply(keys, pending, want_state=True, late=True)

    async def _apply(
        self,
        keys: SessionKeys,
        raw_entries: Any,
        *,
        want_state: bool,
        shortfalls: list[str] | None = None,
        late: bool = False,
        due: list[Any] | None = None,
    ) -> Any:
        """Apply a user's outbox entries (an XRANGE reply, or parsed) in the app's slot;
        with ``due``, take members of the app's expiry index due for a check there too."""
        return await self.outbox.apply(
            app_state=keys.app_state,
            app_versions=keys.app_versions,
            app_sessions=keys.app_sessions,
            app_applied=keys.app_applied,
            app_expiry=keys.app_expiry,
            user_member=keys.user_member,
            entries=AppOutbox.entries(raw_entries),
            want_state=want_state,
            concern=self.runner.concern,
            shortfalls=shortfalls,
            late=late,
            due=due,
            take=self.expired_per_write,
        )
