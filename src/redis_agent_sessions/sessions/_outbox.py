"""App-scope writes on a Redis Cluster: recorded in the user's slot, applied in the app's.

On a cluster one script may only touch one hash slot. Everything of one (app, user) shares
a slot, but ``app:`` state and the app-wide session index live in the app's slot. So the
user-slot scripts record app-scope writes in the user's outbox stream (atomically with the
rest of the operation), and ``app_apply.lua`` applies them to the app's slot. Applying is
idempotent and ordered (per user by outbox id, per field by version), so the worker that
wrote an entry, a retry, or any later operation of the same user may apply it, once or
several times; a worker dying between the two steps loses nothing.

Which entries are known to be applied is read from the app's slot (``app_applied``); each
engine remembers the last it saw per user so that its next user-slot script can drop them
from the outbox and report only the rest. That memory is a hint: a stale one only makes an
operation re-send entries that ``app_apply`` then skips.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import stream_id, text
from redis_agent_sessions._redis.concern import WriteConcern, run
from redis_agent_sessions._redis.session_calls import APP_APPLY, AppApply

if TYPE_CHECKING:  # imported only when telemetry is on
    from redis_agent_sessions._telemetry import Telemetry

__all__ = ["AppOutbox", "Entry"]

Entry = tuple[str, list[Any]]
"""An outbox entry: stream id and its flat field/value list."""

_REMEMBERED_USERS = 10_000


class AppOutbox:
    """Applies outbox entries and remembers, per user, how far they are known applied."""

    def __init__(self, client: Any) -> None:
        self._apply = _scripts.register(client, APP_APPLY)
        self._applied: OrderedDict[tuple[str, str], str] = OrderedDict()
        self.telemetry: Telemetry | None = None

    def first_unapplied(self, applied_key: str, user_member: str) -> str:
        """The lowest outbox id that may not be applied yet, as far as this engine knows."""
        last = self._applied.get((applied_key, user_member))
        if last is None:
            return "0-1"
        ms, seq = stream_id(last)
        return f"{ms}-{seq + 1}"

    def learn(self, applied_key: str, user_member: str, applied: bytes | str | None) -> None:
        """Record that the app's slot has applied this user's outbox up to ``applied``."""
        if not applied:
            return
        value = text(applied)
        key = (applied_key, user_member)
        known = self._applied.get(key)
        if known is None or stream_id(value) > stream_id(known):
            self._applied[key] = value
        self._applied.move_to_end(key)
        if len(self._applied) > _REMEMBERED_USERS:
            self._applied.popitem(last=False)

    @staticmethod
    def entries(reply: Sequence[Any]) -> list[Entry]:
        """Outbox entries from a script's XRANGE reply (lists, or dicts if parsed)."""
        out: list[Entry] = []
        for entry_id, fields in reply:
            if isinstance(fields, dict):
                fields = [x for kv in fields.items() for x in kv]
            out.append((text(entry_id), list(fields)))
        return out

    @staticmethod
    def pending(entries: list[Entry], applied: bytes | str | None) -> list[Entry]:
        """The entries after ``applied`` (the app's slot's record for the user)."""
        if not applied:
            return entries
        last = stream_id(text(applied))
        return [e for e in entries if stream_id(e[0]) > last]

    async def apply(
        self,
        *,
        app_state: str,
        app_versions: str,
        app_sessions: str,
        app_applied: str,
        app_expiry: str,
        user_member: str,
        entries: list[Entry],
        want_state: bool,
        concern: WriteConcern | None = None,
        shortfalls: list[str] | None = None,
        counts: list[int] | None = None,
        late: bool = False,
        due: list[Any] | None = None,
        take: int = 0,
    ) -> Any:
        """Apply ``entries`` (one user's, oldest first) in the app's slot; with a
        ``concern``, wait for it there too and add any shortfall to ``shortfalls``. With
        ``counts``, add to it how many of the entries this call applied (others, applying
        the same entries at the same time, may have applied the rest). ``late``: the
        entries are another operation's, left pending (counted by telemetry). With ``due``
        and ``take``, add to ``due`` up to ``take`` members of the app's expiry index that
        are due for a check, claimed in the same step (``expiry_due`` in ``_expiry.lua``).

        Returns the app state hash as a flat list when ``want_state``, else None.
        """
        flat: list[Any] = []
        for entry_id, fields in entries:
            flat += (entry_id, len(fields) // 2, *fields)
        call = AppApply(
            app_state=app_state,
            app_versions=app_versions,
            app_sessions=app_sessions,
            app_applied=app_applied,
            app_expiry=app_expiry,
            user_member=user_member,
            want_state="1" if want_state else "0",
            now_ms=int(time.time() * 1000),
            expiry_take=take if due is not None else 0,
            entries=flat,
        )
        short = len(shortfalls) if shortfalls is not None else 0
        applied = await run(concern, self._apply, call, shortfalls, "app step: ")
        # An application the replicas did not confirm may be lost in a failover: learned,
        # it would let the user's next script drop entries the new primary never applied,
        # and the caller's retry would then be acknowledged without them.
        if shortfalls is None or len(shortfalls) == short:
            self.learn(app_applied, user_member, applied.last_applied)
        if counts is not None:
            counts.append(applied.entries_applied)
        if late and self.telemetry is not None and applied.entries_applied:
            self.telemetry.count("cluster.app_writes_applied_late", applied.entries_applied)
        if due is not None:
            due += applied.due
        return applied.app_state if want_state else None
