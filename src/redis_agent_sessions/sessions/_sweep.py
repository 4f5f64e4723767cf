"""App-scope writes a dead worker left half done on a cluster: the registry, and the sweep.

On a cluster an app-scope write takes two steps (``._outbox``): a user-slot script records
it in the user's outbox, then ``app_apply.lua`` applies it in the app's slot. A worker dying
between them leaves the write visible to that user only, until the user operates again. To
find such users without scanning the keyspace, a worker registers the user in the app's
slot (``ras:{<app>}:app_pending``, a zset: escaped user id -> ms time of the latest
registration) *before* a user-slot script that records app-scope writes, and the sweep
applies what registered users left pending, then takes them off the registry.

Registering costs a round trip, so each engine remembers whom it registered and trusts that
for ``REGISTER_EVERY`` seconds: only the first app-scope write of a user per minute and
worker pays it. A registration whose operation was refused before writing (stale copy,
missing session, ACL, foreign type) is undone, so a refused write still leaves the database
as it was.

Why the sweep cannot miss a write: it only examines users whose latest registration is more
than ``older_than`` (at least twice ``REGISTER_EVERY``) old, and takes one off only if
its score is still the one it read after applying every entry it found. A write it did not
find was recorded after the sweep read that user's outbox; the worker that recorded it had
either registered afresh (the score changed: the user stays) or trusted a registration it
made less than ``REGISTER_EVERY`` before, which would be younger than the bound. So a
miss needs a user-slot script landing more than ``older_than - REGISTER_EVERY`` (at least a
minute) after its worker's check, or worker clocks that far apart (scores are workers'
``time.time()``; registrations never lower a score, so a fast clock only delays a sweep).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import check_id, text
from redis_agent_sessions._redis.session_calls import APP_PENDING, AppPending, PendingReply
from redis_agent_sessions.errors import InvalidInputError, RedisSessionsError
from redis_agent_sessions.keys import KeySpace, SessionKeys, unescape
from redis_agent_sessions.sessions._apps import AppListing
from redis_agent_sessions.sessions._outbox import AppOutbox, Entry
from redis_agent_sessions.sessions._runner import ScriptRunner

__all__ = [
    "DEFAULT_OLDER_THAN",
    "MAX_SWEEP_LIMIT",
    "REGISTER_EVERY",
    "AppRegistry",
    "SweepReport",
    "check_sweep",
]

REGISTER_EVERY = 60.0
"""Seconds an engine trusts its registration of a user before registering again."""

DEFAULT_OLDER_THAN = 300.0
MAX_SWEEP_LIMIT = 10_000
_BATCH = 100  # users read and cleared per pipeline / script call
_REMEMBERED_USERS = 10_000
_UNREGISTERED: AbstractAsyncContextManager[None] = contextlib.nullcontext()


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one ``sweep_app_writes`` call found and did."""

    users_examined: int = 0
    """Registered users, registered longer ago than ``older_than``, that it looked at."""
    users_pending: int = 0
    """Of those, the users with app-scope writes not applied yet."""
    entries_pending: int = 0
    """Their outbox entries (one per operation) not applied yet."""
    entries_applied: int = 0
    """Entries this call applied (0 in a dry run; a concurrent sweep or reader may have
    applied some of the pending ones first)."""
    users_cleared: int = 0
    """Users taken off the registry (0 in a dry run)."""
    more: bool = False
    """More users (or expiry index members) are due than ``limit``: call again."""
    expired_due: int = 0
    """Cluster: members of the app's expiry index due for a check (sessions that may have
    expired; at most ``limit``)."""
    expired_dropped: int = 0
    """Of those, the sessions found gone, whose index entries this call dropped (0 in a dry
    run)."""


def check_sweep(app_name: object, older_than: object, limit: object) -> None:
    """InvalidInputError for sweep arguments that cannot be used (before anything runs)."""
    check_id("app_name", app_name)
    least = 2 * REGISTER_EVERY
    if (
        isinstance(older_than, bool)
        or not isinstance(older_than, (int, float))
        or not math.isfinite(older_than)
        or older_than < least
    ):
        raise InvalidInputError(
            f"older_than must be a number of seconds, at least {least:g} (twice the "
            f"{REGISTER_EVERY:g} s a worker trusts its registration of a user): {older_than!r}"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SWEEP_LIMIT:
        raise InvalidInputError(
            f"limit must be a whole number from 1 to {MAX_SWEEP_LIMIT}: {limit!r}"
        )


@dataclass(slots=True)
class _Registration:
    at: float
    """time.monotonic() just before it was sent: trusted until at + REGISTER_EVERY."""
    score: str
    previous: str
    relied: bool = False
    """Another operation of this engine skipped registering because of it."""


@dataclass(slots=True)
class _Tally:
    examined: int = 0
    pending_users: int = 0
    pending: int = 0
    applied: int = 0
    cleared: int = 0


class AppRegistry:
    """One engine's registrations, and the sweep of one app's registry."""

    def __init__(
        self, runner: ScriptRunner, keys: KeySpace, outbox: AppOutbox, apps: AppListing
    ) -> None:
        self._runner = runner
        self._apps = apps
        self._client = runner.client
        self._keys = keys
        self._outbox = outbox
        self._script = _scripts.register(runner.client, APP_PENDING)
        self._held: OrderedDict[tuple[str, str], _Registration] = OrderedDict()

    def recording(self, keys: SessionKeys) -> AbstractAsyncContextManager[None]:
        """Around a user-slot script that records app-scope writes of ``keys``' user: the user
        is registered before it (unless this engine did so recently), and the registration
        undone if the script is refused before writing (a RedisSessionsError inside)."""
        slot = (keys.app_pending, keys.user_member)
        held = self._held.get(slot)
        if held is not None and time.monotonic() - held.at < REGISTER_EVERY:
            held.relied = True
            self._held.move_to_end(slot)
            return _UNREGISTERED
        return self._registered(keys)

    @asynccontextmanager
    async def _registered(self, keys: SessionKeys) -> AsyncIterator[None]:
        at = time.monotonic()
        member = keys.user_member
        added = await self._call(keys.app_pending, "add", member, _ms(time.time()))
        mine = _Registration(at, text(added.score), text(added.previous))
        slot = (keys.app_pending, member)
        self._held[slot] = mine
        self._held.move_to_end(slot)
        if len(self._held) > _REMEMBERED_USERS:
            self._held.popitem(last=False)
        try:
            yield
        except RedisSessionsError:
            # Refused before writing: nothing of this operation waits in the outbox. Undone
            # unless another operation trusted it meanwhile (it may have written).
            if not mine.relied and self._held.get(slot) is mine:
                del self._held[slot]
                # A failed undo leaves a registration with nothing pending: the sweep
                # clears it; the caller gets the refusal, not this.
                with contextlib.suppress(RedisError, RedisSessionsError):
                    await self._call(keys.app_pending, "undo", member, mine.score, mine.previous)
            raise

    async def sweep(
        self, app_name: str, older_than: float, limit: int, *, dry_run: bool
    ) -> SweepReport:
        """Apply what the ``limit`` users registered longest ago (more than ``older_than``
        seconds) left pending, oldest first, and take them off the registry."""
        registry = self._keys.app_pending(app_name)
        due = await self._call(registry, "due", _ms(time.time() - older_than), limit + 1)
        found = list(due.members)
        tally = _Tally()
        shortfalls: list[str] = []
        for at in range(0, min(len(found), limit), _BATCH):
            batch = found[at : min(at + _BATCH, limit)]
            await self._sweep_batch(app_name, registry, batch, dry_run, tally, shortfalls)
        self._runner.confirmed("sweep_app_writes", shortfalls)
        return SweepReport(
            users_examined=tally.examined,
            users_pending=tally.pending_users,
            entries_pending=tally.pending,
            entries_applied=tally.applied,
            users_cleared=tally.cleared,
            more=len(found) > limit,
        )

    async def _sweep_batch(
        self,
        app_name: str,
        registry: str,
        batch: list[tuple[Any, Any]],
        dry_run: bool,
        tally: _Tally,
        shortfalls: list[str],
    ) -> None:
        users = [text(member) for member, _ in batch]
        applied_key = self._keys.app_applied(app_name)
        outboxes = [self._keys.app_outbox(app_name, unescape(u)) for u in users]
        pipe = self._client.pipeline(transaction=False)
        for user, outbox in zip(users, outboxes, strict=True):
            pipe.xrange(outbox, self._outbox.first_unapplied(applied_key, user), "+")
        pipe.hmget(applied_key, users)
        replies = await _scripts.execute(pipe, [*outboxes, applied_key])
        tally.examined += len(users)
        created: list[float] = []
        for user, outbox, applied in zip(users, replies[:-1], replies[-1], strict=True):
            self._outbox.learn(applied_key, user, applied)
            pending = AppOutbox.pending(AppOutbox.entries(outbox), applied)
            if not pending:
                continue
            tally.pending_users += 1
            tally.pending += len(pending)
            if dry_run:
                continue
            counts: list[int] = []
            await self._outbox.apply(
                app_state=self._keys.app_state(app_name),
                app_versions=self._keys.app_versions(app_name),
                app_sessions=self._keys.app_sessions(app_name),
                app_applied=applied_key,
                app_expiry=self._keys.app_expiry(app_name),
                user_member=user,
                entries=pending,
                want_state=False,
                concern=self._runner.concern,
                shortfalls=shortfalls,
                counts=counts,
                late=True,
            )
            tally.applied += counts[0]
            created += _creation_times(pending)
        if dry_run:
            return
        if created:
            # Creates list their app before their user-slot step; this is for sessions
            # written before that rule (idempotent: a listed app is not written again).
            await self._apps.list(app_name, min(created))
        scored = [x for member, score in batch for x in (member, score)]
        tally.cleared += (await self._call(registry, "clear", *scored)).cleared

    async def _call(self, registry: str, operation: str, *operands: Any) -> PendingReply:
        return await _scripts.run(self._script, AppPending(registry, operation, operands))


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


def _creation_times(entries: list[Entry]) -> list[float]:
    """The creation times that the entries' app index additions carry."""
    times = []
    for _, fields in entries:
        named = {text(k): v for k, v in zip(fields[::2], fields[1::2], strict=True)}
        if "index_add" in named and "score" in named:
            times.append(float(text(named["score"])))
    return times
