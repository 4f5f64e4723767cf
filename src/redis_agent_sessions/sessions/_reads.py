"""Reading sessions: one consistent snapshot, narrowed by a get-session config, decoded, and
(with ``read_cache_bytes``) extended from the verified read cache; scoped state."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Generic

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import check_id, decode_hash, gc_paused, meta_field, text
from redis_agent_sessions.errors import (
    CorruptDataError,
    IncompleteSessionError,
    InvalidInputError,
)
from redis_agent_sessions.keys import SessionKeys
from redis_agent_sessions.sessions._cache import MEMORY_PER_JSON_BYTE, Cached, ReadCache, fits
from redis_agent_sessions.sessions._context import Context
from redis_agent_sessions.sessions._replies import (
    first_id,
    missing_parts,
    stored_events,
    stored_session,
)
from redis_agent_sessions.sessions._types import E, S, Snapshot, StoredSession
from redis_agent_sessions.state import merge_state

if TYPE_CHECKING:  # imported only when telemetry is on
    from redis_agent_sessions._telemetry import Telemetry

__all__ = ["Reads"]


class Reads(Generic[S, E]):
    """``get_session``, the snapshot every read is made of, and scoped state."""

    def __init__(self, ctx: Context[S, E]) -> None:
        self._ctx = ctx
        self._codec = ctx.codec
        self._trusting = not ctx.config.validate_reads

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: object | None = None,
    ) -> S | None:
        await self._ctx.ready()
        keys = self._ctx.keys.session(
            check_id("app_name", app_name),
            check_id("user_id", user_id),
            check_id("session_id", session_id),
        )
        num_recent_events, after_timestamp = self._codec.narrowing(config)
        if num_recent_events is not None and num_recent_events < 0:
            raise InvalidInputError("num_recent_events must be greater than or equal to 0.")
        turns = self._ctx.turns
        if turns is None or not turns.in_line(keys.meta):
            return await self._get_session(keys, num_recent_events, after_timestamp)
        # A writer that lost a race keeps its turn while it reads the session again.
        task = asyncio.current_task()
        turns.reading(keys.meta, task, done=False)
        try:
            return await self._get_session(keys, num_recent_events, after_timestamp)
        finally:
            turns.reading(keys.meta, task, done=True)

    async def _get_session(
        self, keys: SessionKeys, num_recent_events: int | None, after_timestamp: float | None
    ) -> S | None:
        cache = self._ctx.cache
        if cache is not None and num_recent_events is None and after_timestamp is None:
            return await self._read_cached(keys, cache)
        found = await self.snapshot(keys, num_recent_events, first_id(after_timestamp))
        if found is None:
            return None
        events: list[E] = []
        if num_recent_events != 0:
            events = await self._events(
                keys.events, found.entries, num_recent_events, after_timestamp
            )
        return self._codec.build_session(found.stored, events)

    async def _read_cached(self, keys: SessionKeys, cache: ReadCache[E]) -> S | None:
        """A full read through the cache: one round trip for the state and the events
        after the cached ones when the read proves the cache still fits the session, else
        (a second round trip) the whole session, which is cached in turn."""
        entry = cache.get(keys.meta)
        if entry is not None:
            start = f"({entry.last_id}" if entry.last_id else "-"
            found = await self.snapshot(keys, None, start, anchor=entry.last_event_id)
            if found is None:
                cache.drop(keys.meta)
                return None
            if fits(entry, found):
                if (telemetry := self._ctx.telemetry) is not None:
                    telemetry.count("read_cache.hits")
                if found.entries:
                    entry = self._cached(keys, entry, found)
                    cache.put(keys.meta, entry)
                return self._codec.build_session(found.stored, list(entry.events))
            cache.drop(keys.meta)
        if (telemetry := self._ctx.telemetry) is not None:
            telemetry.count("read_cache.misses")
        found = await self.snapshot(keys, None, "-")
        if found is None:
            return None
        entry = self._cached(keys, None, found)
        # A stream holding other than one entry per revision (edited by hand) is not cached.
        if len(entry.events) == found.stored.revision:
            cache.put(keys.meta, entry)
        return self._codec.build_session(found.stored, list(entry.events))

    def _cached(self, keys: SessionKeys, entry: Cached[E] | None, found: Snapshot) -> Cached[E]:
        """``entry`` (or nothing) extended by the entries ``found`` read after it."""
        raws, schemas = stored_events(keys.events, found.entries)
        decoded = self.decode_raws(keys.events, raws, schemas)
        size = sum(len(raw) for raw in raws) * MEMORY_PER_JSON_BYTE
        if entry is None:
            created = meta_field(found.meta, "create_time") or ""
            entry = Cached(created, 0, "", "", "", [], 0)
        last = found.entries[-1][0] if found.entries else None
        events = entry.events + decoded
        return Cached(
            create_time=entry.create_time,
            revision=found.stored.revision,
            first_id=entry.first_id or _first_entry(found),
            last_id=entry.last_id if last is None else text(last),
            last_event_id=events[-1].id if events else "",
            events=events,
            size=entry.size + size,
        )

    async def snapshot(
        self, keys: SessionKeys, count: int | None, start: str, *, anchor: str | None = None
    ) -> Snapshot | None:
        """One session at one instant: merged state, raw metadata and the stream entries
        from ``start`` (all of them, or the newest ``count``, newest first); None when
        there is no session. With ``anchor`` (an event id, or '' for none) it also reads
        what a copy needs to check it is up to date: see ``Snapshot``."""
        reply, app_raw = await self._ctx.layout.snapshot(keys, count, start, anchor)
        if not reply:
            return None
        meta, state, user_state, _, entries, present, *checks = reply
        found = self.found(keys, meta, (state, user_state, app_raw), entries, present)
        if anchor is not None:
            found.anchor = text(checks[0]) if checks[0] else None
            found.first_id = text(checks[1][0][0]) if checks[1] else None
        return found

    def found(
        self,
        keys: SessionKeys,
        meta: dict[Any, Any],
        hashes: tuple[Any, Any, Any],
        entries: Any,
        present: Any = None,
    ) -> Snapshot:
        """What one read returned, as a Snapshot: the metadata hash, the session, user and
        app state hashes (as HGETALL replies) and the stream entries; ``present``, whether
        the events stream and event ids hash exist (None: not read). IncompleteSessionError
        when the read shows keys the session had evicted."""
        state, user_state, app_state = hashes
        stored = stored_session(keys.meta, meta)
        missing = missing_parts(meta, state, present)
        if missing:
            who = (stored.app_name, stored.user_id, stored.id)
            raise IncompleteSessionError(*who, missing, keys.meta)
        stored.state = merge_state(
            decode_hash(keys.state, state),
            decode_hash(keys.user_state, user_state),
            decode_hash(keys.app_state, app_state),
        )
        self._ctx.catch_ups.seen(keys.meta, stored.revision)
        return Snapshot(stored, meta, entries)

    async def _events(
        self, key: str, entries: list[Any], count: int | None, after: float | None
    ) -> list[E]:
        events = self.decode(key, entries)
        if after is not None:
            events = [e for e in events if e.timestamp >= after]
        if count is None:
            return events
        # Newest first. The server range starts at the millisecond of after_timestamp, so
        # boundary events may still fall out when filtered exactly: then fetch older ones.
        start = first_id(after)
        while after is not None and len(events) < count and len(entries) == count:
            last_id = text(entries[-1][0])
            entries = await self._ctx.client.execute_command(
                "XREVRANGE", key, f"({last_id}", start, "COUNT", count
            )
            events += [e for e in self.decode(key, entries) if e.timestamp >= after]
        del events[count:]
        events.reverse()
        return events

    def decode(self, key: str, entries: list[Any]) -> list[E]:
        """The events of stream ``key``'s ``entries``; CorruptDataError for a bad one."""
        return self.decode_raws(key, *stored_events(key, entries))

    def decode_raws(
        self, key: str, raws: list[bytes | str], schemas: list[str | None] | None = None
    ) -> list[E]:
        """The events of ``raws``; with ``schemas`` (what each was stored with), those this
        worker's models wrote are rebuilt without validation unless ``validate_reads``."""
        try:
            with gc_paused():
                return self._codec.decode_events(raws, schemas if self._trusting else None)
        except Exception as exc:  # the models' own validators raise what they like
            # (genai's enums an AttributeError for a list where a name goes)
            raise CorruptDataError(key, f"an event is not valid event JSON: {exc}") from exc

    @property
    def client(self) -> Any:
        return self._ctx.client

    @property
    def telemetry(self) -> Telemetry | None:
        return self._ctx.telemetry

    def build_session(self, stored: StoredSession, events: list[E]) -> S:
        return self._codec.build_session(stored, events)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        await self._ctx.ready()
        key = self._ctx.keys.user_state(
            check_id("app_name", app_name), check_id("user_id", user_id)
        )
        return await self._read_hash(key)

    async def get_app_state(self, *, app_name: str) -> dict[str, Any]:
        await self._ctx.ready()
        return await self._read_hash(self._ctx.keys.app_state(check_id("app_name", app_name)))

    async def _read_hash(self, key: str) -> dict[str, Any]:
        pipe = self._ctx.client.pipeline(transaction=False)
        pipe.hgetall(key)
        [raw] = await _scripts.execute(pipe, [key])
        return decode_hash(key, raw)


def _first_entry(found: Snapshot) -> str:
    if found.first_id:
        return found.first_id
    return text(found.entries[0][0]) if found.entries else ""
