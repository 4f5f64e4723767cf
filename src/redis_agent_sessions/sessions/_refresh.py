"""Bringing a held session copy up to date in place, reading only what it lacks."""

from __future__ import annotations

import math
from typing import Any, Generic

from redis_agent_sessions._redis.codec import check_id, event_ms, meta_field, text
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.keys import SessionKeys
from redis_agent_sessions.sessions._context import Context
from redis_agent_sessions.sessions._reads import Reads
from redis_agent_sessions.sessions._types import E, S, Snapshot, StoredSession

__all__ = ["Refresher"]


class Refresher(Generic[S, E]):
    """``refresh``: from a catch-up this worker holds (``._catch_up``), from a read of
    the events after the copy's newest one, or, for a copy it cannot vouch for, whole."""

    def __init__(self, ctx: Context[S, E], reads: Reads[S, E]) -> None:
        self._ctx = ctx
        self._codec = ctx.codec
        self.reads = reads

    async def refresh(self, session: S) -> S:
        """Bring ``session`` up to date in place, reading only what it lacks: the events
        after its newest one, plus the current state, in one round trip. Falls back to a
        full read (events replaced, in the same list) when the copy cannot be vouched for.
        ``temp:`` keys are dropped from its state, as any read would."""
        await self._ctx.ready()
        if not self._codec.is_session(session):
            raise InvalidInputError(f"not a session: {type(session).__name__}")
        keys = self._ctx.keys.session(
            check_id("app_name", session.app_name),
            check_id("user_id", session.user_id),
            check_id("session id", session.id),
        )
        catch_ups = self._ctx.catch_ups
        events = self._codec.events_of(session)
        revision = self._codec.revision(session)
        last = events[-1] if events else None
        anchor = start = None
        if revision == 0 and last is None:
            anchor, start = "", "-"
        elif revision is not None and revision > 0 and last is not None:
            timestamp = last.timestamp
            if isinstance(timestamp, (int, float)) and math.isfinite(timestamp):
                # Stream ids are event-time ms, never going backwards: the copy's newest
                # event is at or after this id, and every event after it follows it.
                anchor, start = last.id, f"{event_ms(timestamp)}-0"
        if anchor is not None and start is not None:
            found = held = catch_ups.get((keys.meta, revision or 0, anchor))
            if found is None:
                found = await self.reads.snapshot(keys, None, start, anchor=anchor)
            new = None if found is None else _after(found, anchor, revision or 0)
            if found is not None and new is not None:
                if held is not None:
                    found, new = self._chained(keys, found, new)
                events.extend(self.reads.decode(keys.events, new))
                self._refreshed(session, found.stored)
                newest = (keys.meta, found.stored.revision, events[-1].id if events else "")
                if held is not None and (
                    catch_ups.get(newest) is not None
                    or not catch_ups.newest(keys.meta, found.stored.revision)
                ):
                    # This worker has seen a newer revision: go on from there (by a
                    # catch-up the chain could not take, or else by a read).
                    return await self.refresh(session)
                return session
        found = await self.reads.snapshot(keys, None, "-")
        if found is None:
            raise self._codec.errors.not_found(f"Session {session.id} not found.")
        events[:] = self.reads.decode(keys.events, found.entries)
        return self._refreshed(session, found.stored)

    def _chained(
        self, keys: SessionKeys, found: Snapshot, new: list[Any]
    ) -> tuple[Snapshot, list[Any]]:
        """A held catch-up ``found`` and the ``new`` entries it gives a copy, extended by
        the catch-ups held for the positions that follow it, as far as they go: the last
        snapshot and every entry, to decode in one call. (With several writers of this
        worker in line, each waiter is one catch-up behind per writer ahead of it.) The
        newest event id is the metadata's, from the same atomic step as its entries."""
        entries = list(new)
        while new:
            last = meta_field(found.meta, "last_event_id") or ""
            following = self._ctx.catch_ups.get((keys.meta, found.stored.revision, last))
            if following is None:
                break
            after = _after(following, last, found.stored.revision)
            if after is None:
                break
            found, new = following, after
            entries += new
        return found, entries

    def _refreshed(self, session: S, stored: StoredSession) -> S:
        state = session.state
        if isinstance(state, dict):
            state.clear()
            state.update(stored.state)
        else:
            session.state = stored.state
        session.last_update_time = stored.last_update_time
        self._codec.set_revision(session, stored.revision)
        return session


def _after(found: Snapshot, anchor: str, revision: int) -> list[Any] | None:
    """The entries of ``found`` after the copy's newest event ``anchor`` (at
    ``revision``; '' = the copy has none), or None when the read does not prove that
    they are exactly what the copy lacks: the anchor at another revision or not stored
    (a rewritten or re-created session), or a count that does not add up."""
    entries = found.entries
    if anchor:
        if found.anchor is None:
            return None
        stored_revision, _, stream_id = found.anchor.partition(" ")
        if stored_revision != str(revision):
            return None
        for i, (entry_id, _) in enumerate(entries):
            if text(entry_id) == stream_id:
                entries = entries[i + 1 :]
                break
        else:
            return None
    if len(entries) != found.stored.revision - revision:
        return None
    return entries
