"""The session store logic, written once for any pair of session/event model classes.

The public core service runs it with this package's models; the google-adk extra runs
it with ADK's own classes. Models are reached only through :class:`ModelCodec`.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from redis_agent_sessions._redis import concern as _concern
from redis_agent_sessions._redis import lifecycle as _lifecycle
from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import (
    check_id,
    decode_hash,
    encode_fields,
    event_ms,
    gc_paused,
    meta_field,
    session_ttl,
    text,
)
from redis_agent_sessions._redis.concern import WriteConcern
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import (
    AlreadyExistsError,
    CorruptDataError,
    InvalidInputError,
    PayloadTooLargeError,
    SessionNotFoundError,
    StaleSessionError,
    WriteConcernError,
)
from redis_agent_sessions.keys import KeySpace, SessionKeys, escape, split_app_member
from redis_agent_sessions.sessions._cache import MEMORY_PER_JSON_BYTE, Cached, ReadCache, fits
from redis_agent_sessions.sessions._catch_up import CatchUps, Position
from redis_agent_sessions.sessions._event_stream import EventStream
from redis_agent_sessions.sessions._listing import SessionLister
from redis_agent_sessions.sessions._outbox import AppOutbox
from redis_agent_sessions.sessions._turns import Turns
from redis_agent_sessions.state import TEMP_PREFIX, merge_state, split_state_delta

__all__ = ["ModelCodec", "SessionEngine", "Snapshot", "StoredSession"]


class _Actions(Protocol):
    state_delta: dict[str, Any]


class _Event(Protocol):
    id: str
    timestamp: float
    partial: bool | None

    @property
    def actions(self) -> _Actions: ...


class _Session(Protocol):
    id: str
    app_name: str
    user_id: str
    state: dict[str, Any]
    last_update_time: float


S = TypeVar("S", bound=_Session)
E = TypeVar("E", bound=_Event)


@dataclass(slots=True)
class StoredSession:
    """A session as read from Redis, before it becomes a model."""

    id: str
    app_name: str
    user_id: str
    state: dict[str, Any]
    last_update_time: float
    revision: int


@dataclass(slots=True)
class Snapshot:
    """What :meth:`SessionEngine.snapshot` read at one instant."""

    stored: StoredSession
    meta: dict[Any, Any]
    """The metadata hash as read (bytes or text keys)."""
    entries: list[Any]
    """Stream entries, as the read returned them."""
    anchor: str | None = None
    """With an anchor event id: its ``'<revision> <stream id>'``, None when not stored."""
    first_id: str | None = None
    """With an anchor event id: the stream id of the session's first entry (None: none)."""


class ModelCodec(Protocol[S, E]):
    """What the engine needs to know about a pair of model classes."""

    def is_session(self, value: object) -> bool: ...
    def is_event(self, value: object) -> bool: ...
    def narrowing(self, config: object | None) -> tuple[int | None, float | None]:
        """``(num_recent_events, after_timestamp)`` of a get-session config of this model
        family; InvalidInputError for anything else."""
        ...

    def build_session(self, stored: StoredSession, events: list[E]) -> S: ...
    def events_of(self, session: S) -> list[E]: ...
    def encode_event(self, event: E) -> bytes:
        """Event JSON as stored: snake_case, None fields left out."""
        ...

    def decode_events(self, raws: Sequence[bytes | str]) -> list[E]:
        """Events from stored JSON; raises ValueError naming the bad one's index."""
        ...

    def revision(self, session: S) -> int | None: ...
    def set_revision(self, session: S, revision: int) -> None: ...
    def read_hints(self, event: E) -> tuple[str, str]:
        """What compaction-aware reads need to know of a new event: ``'<start> <end>'`` of
        the compaction summary it carries (else ``''``), and why the session's reads must
        always be full from now on (else ``''``). See append_event.lua's ARGV[12..13]."""
        ...


_OK, _DUPLICATE, _NOT_FOUND, _STALE, _WRONG_TYPE = 1, 2, -1, -2, -3
_UNKNOWN = -1
"""The revision of a copy that may lack events (a codec may store it as None)."""
_EVENT_FIELD = (b"event", "event")


class SessionEngine(Generic[S, E]):
    """Sessions, events and scoped state in Redis; see the README for the key layout."""

    optimistic_reads = 3
    """Cluster layout: pipelined snapshot attempts before get_session uses a script."""

    catch_up_events = 100
    """A stale append's refusal carries what the copy lacks when it is at most this many
    events behind (single-node layout), for the refresh that follows (:mod:`._catch_up`)."""

    def __init__(
        self, client: Any, codec: ModelCodec[S, E], config: SessionServiceConfig | None = None
    ) -> None:
        self._redis = client
        self._codec = codec
        self.config = config or SessionServiceConfig()
        self.keys = KeySpace(self.config.key_prefix)
        detected = _lifecycle.is_cluster_client(client)
        if self.config.cluster is False and detected:
            raise InvalidInputError("cluster=False, but the client is a RedisCluster")
        self.cluster = detected or bool(self.config.cluster)
        """Cluster layout: every script touches one slot; app-scope writes go via an outbox."""
        self._outbox = AppOutbox(client) if self.cluster else None
        self._concern = WriteConcern.of(self.config)
        self._cluster_client_fresh = isinstance(client, RedisCluster)
        self._read = _scripts.register(client, "read_session")
        self._create = _scripts.register(client, "create_session")
        self._append = _scripts.register(client, "append_event")
        self._delete = _scripts.register(client, "delete_session")
        self._prune = _scripts.register(client, "prune_index")
        self._read_hashes = _scripts.register(client, "read_hashes")
        self.events = EventStream(client, self.keys, self.decode, self._connected)
        """Pages of a session's events, and watches of new ones."""
        self.listing: SessionLister[S] = SessionLister(self)
        """Pages of sessions, from the indexes."""
        limit = self.config.read_cache_bytes
        self.cache: ReadCache[E] | None = ReadCache(limit) if limit else None
        """Decoded events of sessions read recently (``read_cache_bytes``), or None."""
        self.catch_ups = CatchUps()
        """What stale appends' refusals carried, for the refreshes that follow them."""
        self._turns = Turns() if self.config.stale_policy == "reject" else None

    # -- writes ---------------------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        ttl: object = None,
        create_time: float | None = None,
    ) -> S:
        """``create_time`` (default: now) is for imports, which keep the original's."""
        await self._connected(write=True)
        own_ttl = session_ttl(ttl)
        check_id("app_name", app_name)
        check_id("user_id", user_id)
        sid = str(uuid.uuid4()) if session_id is None else check_id("session_id", session_id)
        if state is not None and not isinstance(state, Mapping):
            raise InvalidInputError(f"state must be a mapping, got {type(state).__name__}")
        scoped = split_state_delta(state or {})
        fields = [encode_fields(part, scope) for part, scope in zip(scoped, _SCOPES, strict=True)]
        self._check_size("initial state", _stored_bytes(fields))
        now = time.time() if create_time is None else create_time
        keys = self.keys.session(app_name, user_id, sid)
        script_keys = _script_keys(keys)
        if self._outbox is None:
            script_keys.append(self.keys.apps())
        else:
            script_keys[7:] = [keys.app_outbox]
        shortfalls: list[str] = []
        reply = await self._run(
            self._create,
            script_keys,
            [
                sid,
                app_name,
                user_id,
                repr(now),
                (self.config.ttl_seconds or 0) if own_ttl is None else own_ttl,
                keys.app_member,
                self._first_unapplied(keys),
                "" if own_ttl is None else "1",
            ],
            fields,
            shortfalls,
            tail=[escape(app_name)] if self._outbox is None else [],
        )
        if self._outbox is not None and reply[0] in (0, 1):
            # The apps index lives in no app's slot: a separate, idempotent step, which a
            # retried create (finding the session) finishes too.
            await self._redis.zadd(self.keys.apps(), {escape(app_name): now}, nx=True)
        if reply[0] == 0:
            if self._outbox is not None and reply[1]:
                await self._apply(keys, reply[1], want_state=False)
            raise AlreadyExistsError(f"Session with id {sid} already exists.")
        user_state = decode_hash(keys.user_state, reply[1])
        app_raw = reply[2]
        if self._outbox is not None:
            app_raw = await self._apply(keys, reply[2], want_state=True, shortfalls=shortfalls)
        self._confirmed("create_session", shortfalls)
        app_state = decode_hash(keys.app_state, app_raw)
        stored = StoredSession(
            sid, app_name, user_id, merge_state(scoped.session, user_state, app_state), now, 0
        )
        return self._codec.build_session(stored, [])

    async def append_event(self, session: S, event: E) -> E:
        await self._connected(write=True)
        if not self._codec.is_session(session):
            raise InvalidInputError(f"not a session: {type(session).__name__}")
        if not self._codec.is_event(event):
            raise InvalidInputError(f"not an event: {type(event).__name__}")
        if event.partial:
            return event
        check_id("event id", event.id)
        # A session built by hand has not been through create_session's checks.
        check_id("app_name", session.app_name)
        check_id("user_id", session.user_id)
        check_id("session id", session.id)
        timestamp = event.timestamp
        if not isinstance(timestamp, (int, float)) or not math.isfinite(timestamp):
            raise InvalidInputError(f"event timestamp must be a finite number: {timestamp}")
        delta = event.actions.state_delta
        if not isinstance(delta, Mapping):
            raise InvalidInputError(f"state_delta must be a mapping, got {type(delta).__name__}")
        temp = {k: v for k, v in delta.items() if isinstance(k, str) and k.startswith(TEMP_PREFIX)}
        stored_delta = {k: v for k, v in delta.items() if k not in temp} if temp else dict(delta)
        fields = [
            encode_fields(part, scope)
            for part, scope in zip(split_state_delta(stored_delta), _SCOPES, strict=True)
        ]
        revision = self._codec.revision(session)
        events = self._codec.events_of(session)
        keys = self.keys.session(session.app_name, session.user_id, session.id)
        # temp: values live only in the caller's objects, never in the stored event; on
        # failure the caller gets its event back as it was, ready to retry.
        event.actions.state_delta = stored_delta
        shortfalls: list[str] = []
        writer = (id(session), event.id)
        turns = self._turns
        # No coroutine when nobody is in line: the uncontended append stays lean.
        place = (
            None
            if turns is None or not turns.in_line(keys.meta)
            else await turns.take(keys.meta, writer)
        )
        position = (keys.meta, revision or 0, events[-1].id if events else "")
        lost = False
        try:
            raw_event = self._encode_event(event, _stored_bytes(fields))
            if revision is not None and self.catch_ups.get(position) is not None:
                # An append of this worker replaced this copy's revision moments ago, and
                # its reply told what the copy lacks: a refusal needs no round trip.
                raise StaleSessionError()
            script_keys, args = self._append_call(
                keys,
                session.id,
                revision,
                position[2],
                event.id,
                raw_event,
                timestamp,
                timestamp,
                self._codec.read_hints(event),
                catch_up=turns is not None and turns.waiting(keys.meta, place),
            )
            reply = await self._run(self._append, script_keys, args, fields, shortfalls)
            if len(reply) > 4 or (reply[0] == _STALE and len(reply) > 2):
                self._hold_catch_up(keys, position, reply[-1])
            elif reply[0] in (_OK, _DUPLICATE, _STALE):
                self.catch_ups.seen(keys.meta, int(reply[1]))
            _appended(reply, session.id)
            if self._outbox is not None and reply[3]:
                # The event is stored; if this step fails the caller retries, and the
                # retry (a duplicate) finishes the apply.
                await self._apply(keys, reply[3], want_state=False, shortfalls=shortfalls)
            # Before the caller's copy takes the event: its retry (a duplicate) waits again.
            self._confirmed("append_event", shortfalls)
        except StaleSessionError:
            lost = True
            if turns is not None and place is None:
                turns.owe(keys.meta, writer)
            event.actions.state_delta = delta
            raise
        except BaseException:
            event.actions.state_delta = delta
            raise
        finally:
            if place is not None:
                assert turns is not None
                turns.taken(keys.meta, place, lost=lost)
        new_revision = int(reply[1])
        # A duplicate whose revision follows the caller's is a retry after a lost reply:
        # the caller has not seen its own event yet.
        if reply[0] == _OK or revision == new_revision - 1:
            session.state.update(temp)
            session.state.update(stored_delta)
            events.append(event)
            session.last_update_time = timestamp
            if revision is None or new_revision != revision + 1:
                # A merged stale write (or an unknown copy): the copy may lack events
                # others appended before it. It no longer claims a revision, so refresh
                # reads it whole rather than trusting its last event.
                new_revision = _UNKNOWN if self.config.stale_policy == "merge" else new_revision
            self._codec.set_revision(session, new_revision)
        return event

    def _hold_catch_up(self, keys: SessionKeys, position: Position, reply: list[Any]) -> None:
        meta, state, user_state, app_state, anchor, entries = reply
        try:
            found = self._found(keys, _pairs(meta), (state, user_state, app_state), entries)
        except CorruptDataError:
            return  # the refresh reads, and reports it
        found.anchor = text(anchor) if anchor else None
        self.catch_ups.put(position, found)

    def _append_call(
        self,
        keys: SessionKeys,
        session_id: str,
        revision: int | None,
        last_event_id: str,
        event_id: str,
        raw_event: bytes,
        timestamp: float,
        update_time: float,
        hints: tuple[str, str],
        *,
        catch_up: bool = False,
    ) -> tuple[list[str], list[Any]]:
        """append_event.lua's KEYS and ARGV up to (not including) the state fields."""
        script_keys = [
            keys.meta,
            keys.state,
            keys.events,
            keys.event_ids,
            keys.user_state,
            keys.app_state if self._outbox is None else keys.app_outbox,
            keys.user_updated,
            keys.compactions,
            *([keys.app_updated] if self._outbox is None else []),
        ]
        args = [
            "" if revision is None else revision,
            last_event_id,
            self.config.stale_policy,
            event_id,
            raw_event,
            event_ms(timestamp),
            repr(float(update_time)),
            self.config.ttl_seconds or 0,
            self._first_unapplied(keys),
            session_id,
            keys.app_member,
            *hints,
            self.catch_up_events if self.config.stale_policy == "reject" else 0,
            "1" if catch_up else "",
        ]
        return script_keys, args

    async def append_exported(
        self,
        keys: SessionKeys,
        session_id: str,
        events: Sequence[tuple[E, bytes]],
        update_time: float,
    ) -> None:
        """Store a new session's imported events exactly as exported (each event's JSON as
        given), in order, without applying their state deltas: an import writes each
        scope's state whole, as it was when exported. One round trip: a pipeline of the
        append script, each call checking the revision the one before it made, so a gap
        stops the rest. ``update_time`` is the session's last_update_time after the last."""
        if not events:
            return
        calls = []
        for revision, (event, raw) in enumerate(events):
            self._check_size("event", len(raw))
            script_keys, args = self._append_call(
                keys,
                session_id,
                revision,
                events[revision - 1][0].id if revision else "",
                event.id,
                raw,
                event.timestamp,
                update_time if revision == len(events) - 1 else event.timestamp,
                self._codec.read_hints(event),
            )
            calls.append((script_keys, [*args, 0, 0, 0]))  # no state fields in any scope
        shortfalls: list[str] = []
        replies = await _concern.run_many(self._concern, self._append, calls, shortfalls)
        for reply in replies:
            _appended(_typed(reply), session_id)
        if self._outbox is not None and replies[-1][3]:
            await self._apply(keys, replies[-1][3], want_state=False, shortfalls=shortfalls)
        self._confirmed("append_event", shortfalls)

    def _encode_event(self, event: E, state_bytes: int) -> bytes:
        try:
            raw = self._codec.encode_event(event)
        except Exception as exc:
            raise InvalidInputError(f"event cannot be encoded as JSON: {exc}") from exc
        # The delta is stored twice, in the event and in the state hashes: both count.
        self._check_size("event with its state changes", len(raw) + state_bytes)
        return raw

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await self._connected(write=True)
        keys = self.keys.session(
            check_id("app_name", app_name),
            check_id("user_id", user_id),
            check_id("session_id", session_id),
        )
        shortfalls: list[str] = []
        reply = await self._run(
            self._delete,
            [
                keys.meta,
                keys.state,
                keys.events,
                keys.event_ids,
                keys.user_sessions,
                keys.app_sessions if self._outbox is None else keys.app_outbox,
                keys.user_updated,
                keys.compactions,
                *([keys.app_updated] if self._outbox is None else []),
            ],
            [session_id, keys.app_member, self._first_unapplied(keys)],
            [],
            shortfalls,
        )
        if self.cache is not None:
            self.cache.drop(keys.meta)
        self.catch_ups.drop(keys.meta)
        if self._outbox is not None and reply[1]:
            await self._apply(keys, reply[1], want_state=False, shortfalls=shortfalls)
        if reply[0] == 1:  # a retry that finds nothing to delete has nothing to confirm
            self._confirmed("delete_session", shortfalls)

    # -- reads ----------------------------------------------------------------------------

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: object | None = None,
    ) -> S | None:
        await self._connected()
        keys = self.keys.session(
            check_id("app_name", app_name),
            check_id("user_id", user_id),
            check_id("session_id", session_id),
        )
        num_recent_events, after_timestamp = self._codec.narrowing(config)
        if num_recent_events is not None and num_recent_events < 0:
            raise InvalidInputError("num_recent_events must be greater than or equal to 0.")
        if self.cache is not None and num_recent_events is None and after_timestamp is None:
            return await self._read_cached(keys, self.cache)
        found = await self.snapshot(keys, num_recent_events, _first_id(after_timestamp))
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
                if found.entries:
                    entry = self._cached(keys, entry, found)
                    cache.put(keys.meta, entry)
                return self._codec.build_session(found.stored, list(entry.events))
            cache.drop(keys.meta)
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
        raws = raw_events(keys.events, found.entries)
        decoded = self.decode_raws(keys.events, raws)
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

    async def refresh(self, session: S) -> S:
        """Bring ``session`` up to date in place, reading only what it lacks: the events
        after its newest one, plus the current state, in one round trip. Falls back to a
        full read (events replaced, in the same list) when the copy cannot be vouched for.
        ``temp:`` keys are dropped from its state, as any read would."""
        await self._connected()
        if not self._codec.is_session(session):
            raise InvalidInputError(f"not a session: {type(session).__name__}")
        keys = self.keys.session(
            check_id("app_name", session.app_name),
            check_id("user_id", session.user_id),
            check_id("session id", session.id),
        )
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
            found = held = self.catch_ups.get((keys.meta, revision or 0, anchor))
            if found is None:
                found = await self.snapshot(keys, None, start, anchor=anchor)
            new = None if found is None else _after(found, anchor, revision or 0)
            if found is not None and new is not None:
                if held is not None:
                    found, new = self._chained(keys, found, new)
                events.extend(self.decode(keys.events, new))
                self._refreshed(session, found.stored)
                newest = (keys.meta, found.stored.revision, events[-1].id if events else "")
                if held is not None and (
                    self.catch_ups.get(newest) is not None
                    or not self.catch_ups.newest(keys.meta, found.stored.revision)
                ):
                    # This worker has seen a newer revision: go on from there (by a
                    # catch-up the chain could not take, or else by a read).
                    return await self.refresh(session)
                return session
        found = await self.snapshot(keys, None, "-")
        if found is None:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        events[:] = self.decode(keys.events, found.entries)
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
            following = self.catch_ups.get((keys.meta, found.stored.revision, last))
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

    def build_session(self, stored: StoredSession, events: list[E]) -> S:
        return self._codec.build_session(stored, events)

    async def snapshot(
        self, keys: SessionKeys, count: int | None, start: str, *, anchor: str | None = None
    ) -> Snapshot | None:
        """One session at one instant: merged state, raw metadata and the stream entries
        from ``start`` (all of them, or the newest ``count``, newest first); None when
        there is no session. With ``anchor`` (an event id, or '' for none) it also reads
        what a copy needs to check it is up to date: see :class:`Snapshot`."""
        if self._outbox is None:
            reply = await self._snapshot(keys, count, start, anchor)
            app_raw = reply[3] if reply else []
        else:
            reply, app_raw = await self._snapshot_cluster(keys, count, start, anchor)
        if not reply:
            return None
        meta, state, user_state, _, entries, *checks = reply
        found = self._found(keys, meta, (state, user_state, app_raw), entries)
        if anchor is not None:
            found.anchor = text(checks[0]) if checks[0] else None
            found.first_id = text(checks[1][0][0]) if checks[1] else None
        return found

    def _found(
        self, keys: SessionKeys, meta: dict[Any, Any], hashes: tuple[Any, Any, Any], entries: Any
    ) -> Snapshot:
        """What one read returned, as a Snapshot: the metadata hash, the session, user and
        app state hashes (as HGETALL replies) and the stream entries."""
        state, user_state, app_state = hashes
        stored = self._stored(keys.meta, meta)
        stored.state = merge_state(
            decode_hash(keys.state, state),
            decode_hash(keys.user_state, user_state),
            decode_hash(keys.app_state, app_state),
        )
        self.catch_ups.seen(keys.meta, stored.revision)
        return Snapshot(stored, meta, entries)

    async def _snapshot(
        self, keys: SessionKeys, count: int | None, start: str, anchor: str | None
    ) -> list[Any]:
        """Single node: [meta, state, user state, app state, events] (and with ``anchor``,
        its event_ids value and the first entry) at one instant (MULTI/EXEC), so the
        revision the session carries is exactly the one its events reflect; [] when there
        is no session."""
        pipe = self._redis.pipeline(transaction=True)
        pipe.hgetall(keys.meta)
        pipe.hgetall(keys.state)
        pipe.hgetall(keys.user_state)
        pipe.hgetall(keys.app_state)
        read_keys = [keys.meta, keys.state, keys.user_state, keys.app_state]
        if anchor is not None:
            pipe.hget(keys.event_ids, anchor)
            pipe.execute_command(b"XRANGE", keys.events, "-", "+", "COUNT", 1)
            read_keys += [keys.event_ids, keys.events]
        # A bytes command name finds no reply callback in redis-py: entries stay the
        # parser's flat lists instead of being rebuilt as dicts one by one (0.6 of 1.7 ms
        # for 1,000 events). Only here: a cluster client cannot route bytes names.
        if count is None:
            pipe.execute_command(b"XRANGE", keys.events, start, "+")
        elif count > 0:
            pipe.execute_command(b"XREVRANGE", keys.events, "+", start, "COUNT", count)
        replies = await _scripts.execute(pipe, [*read_keys, keys.events])
        if not replies[0]:
            return []
        events = replies[len(read_keys)] if len(replies) > len(read_keys) else []
        return [*replies[:4], events, *replies[4 : len(read_keys)]]

    async def _snapshot_cluster(
        self, keys: SessionKeys, count: int | None, start: str, anchor: str | None
    ) -> tuple[list[Any], Any]:
        """Cluster: the user-slot snapshot [meta, state, user state, outbox, events] (and
        with ``anchor``, its event_ids value and the first entry) and the app state, in one
        round trip to both slots' nodes.

        MULTI on redis-py's cluster client runs in threads (~25x a pipeline), so the user's
        slot is read optimistically: metadata before and after the rest, kept only if it
        did not change (every append, create and delete changes it). After
        ``optimistic_reads`` misses under heavy writing, a read-only script takes the
        snapshot instead. This user's app writes that are not applied yet (a worker died
        between the two steps) are applied now, so a user always reads their own writes.
        """
        assert self._outbox is not None
        first = self._first_unapplied(keys)
        read_keys = [keys.meta, keys.state, keys.user_state, keys.events, keys.app_outbox]
        checked = [keys.event_ids, keys.events] if anchor is not None else []
        reply: list[Any] = []
        outbox: Any = []
        for _ in range(self.optimistic_reads):
            pipe = self._redis.pipeline(transaction=False)
            pipe.hgetall(keys.meta)
            pipe.hgetall(keys.state)
            pipe.hgetall(keys.user_state)
            if count is None:
                pipe.xrange(keys.events, start, "+")
            else:
                pipe.xrevrange(keys.events, "+", start, count=max(count, 1))
            pipe.xrange(keys.app_outbox, first, "+")
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
                reply = [meta, state, user, outbox, events, *replies[5:-3]] if meta else []
                break
        else:
            pipe = self._redis.pipeline(transaction=False)
            pipe.hgetall(keys.app_state)
            pipe.hget(keys.app_applied, keys.user_member)
            mode = "all" if count is None else "recent" if count else "none"
            args = [mode, start, count or 0, first, *([anchor] if anchor is not None else [])]
            script = self._run(self._read, [*read_keys, *checked[:1]], args, [])
            flat, (app_raw, applied) = await asyncio.gather(
                script, _scripts.execute(pipe, [keys.app_state, keys.app_applied])
            )
            reply = [_pairs(flat[0]), *flat[1:]] if flat else []
            if not flat:
                return [], app_raw
        # The outbox was read even for a missing session: a user's pending writes (say, the
        # index removal of a delete whose app step failed) are finished by any read.
        if reply:
            outbox = reply[3]
        return reply, await self._finish_pending(keys, outbox, applied, app_raw)

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
        start = _first_id(after)
        while after is not None and len(events) < count and len(entries) == count:
            last_id = text(entries[-1][0])
            entries = await self._redis.execute_command(
                "XREVRANGE", key, f"({last_id}", start, "COUNT", count
            )
            events += [e for e in self.decode(key, entries) if e.timestamp >= after]
        del events[count:]
        events.reverse()
        return events

    def decode(self, key: str, entries: list[Any]) -> list[E]:
        return self.decode_raws(key, raw_events(key, entries))

    def decode_raws(self, key: str, raws: list[bytes | str]) -> list[E]:
        try:
            with gc_paused():
                return self._codec.decode_events(raws)
        except (ValueError, TypeError) as exc:
            raise CorruptDataError(key, f"an event is not valid event JSON: {exc}") from exc

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> list[S]:
        await self._connected()
        check_id("app_name", app_name)
        if user_id is not None:
            check_id("user_id", user_id)
        app_key = self.keys.app_state(app_name)
        index = (
            self.keys.app_sessions(app_name)
            if user_id is None
            else self.keys.user_sessions(app_name, user_id)
        )
        pipe = self._redis.pipeline(transaction=False)
        pipe.zrange(index, 0, -1)
        pipe.hgetall(app_key)
        members, app_raw = await _scripts.execute(pipe, [index, app_key])
        pairs = [self._pair(app_name, user_id, m) for m in members]
        found, gone = await self.load_sessions(app_name, pairs, app_raw)
        if gone:
            await self.prune_index(app_name, gone)
        stored = sorted(
            (st for st in found if st is not None),
            key=lambda st: (st.last_update_time, st.user_id, st.id),
        )
        return [self._codec.build_session(st, []) for st in stored]

    @staticmethod
    def _pair(app_name: str, user_id: str | None, member: Any) -> tuple[str, str]:
        """(user, session) of a member of the app-wide index, or of ``user_id``'s."""
        return split_app_member(text(member)) if user_id is None else (user_id, text(member))

    async def load_sessions(
        self, app_name: str, pairs: list[tuple[str, str]], app_raw: Any
    ) -> tuple[list[StoredSession | None], list[tuple[str, str]]]:
        """Sessions (merged state, no events) for (user, session) pairs, in their order: one
        round trip, plus the apply of any pending app writes on a cluster. A session that
        is gone (expired, deleted) is None in the list and named in the second one."""
        if not pairs:
            return [], []
        app_key = self.keys.app_state(app_name)
        users = sorted({u for u, _ in pairs})
        session_keys = [self.keys.session(app_name, u, s) for u, s in pairs]
        user_keys = {u: self.keys.session(app_name, u, "-") for u in users}
        read_keys = [k for sk in session_keys for k in (sk.meta, sk.state)]
        read_keys += [user_keys[u].user_state for u in users]
        if self._outbox is None:
            # One script: its single reply is far cheaper for the client to read than as many
            # pipelined HGETALL replies. (A cluster page spans slots: pipelined there.)
            # Chunked, so that listing a whole large app never blocks the server for long.
            replies = []
            for at in range(0, len(read_keys), _HASHES_PER_SCRIPT):
                chunk = read_keys[at : at + _HASHES_PER_SCRIPT]
                replies += await self._run(self._read_hashes, chunk, [], [])
        else:
            replies = await self._pipelined_hashes(app_name, read_keys, users, user_keys)
        n = 2 * len(pairs)
        user_states = {
            u: decode_hash(user_keys[u].user_state, raw)
            for u, raw in zip(users, replies[n : n + len(users)], strict=True)
        }
        if self._outbox is not None:
            outboxes = replies[n + len(users) : n + 2 * len(users)]
            for u, outbox, applied in zip(users, outboxes, replies[-1], strict=True):
                app_raw = await self._finish_pending(user_keys[u], outbox, applied, app_raw)
        app_state = decode_hash(app_key, app_raw)
        found: list[StoredSession | None] = []
        gone: list[tuple[str, str]] = []
        for (u, s), keys, meta, state in zip(
            pairs, session_keys, replies[0:n:2], replies[1:n:2], strict=True
        ):
            if not meta:
                gone.append((u, s))
                found.append(None)
                continue
            stored = self._stored(keys.meta, meta if isinstance(meta, dict) else _pairs(meta))
            stored.state = merge_state(decode_hash(keys.state, state), user_states[u], app_state)
            found.append(stored)
        return found, gone

    async def _pipelined_hashes(
        self,
        app_name: str,
        read_keys: list[str],
        users: list[str],
        user_keys: dict[str, SessionKeys],
    ) -> list[Any]:
        """Cluster layout: the hashes of ``read_keys``, then each user's outbox entries and
        the app's applied-outbox record of each user, in one pipeline."""
        pipe = self._redis.pipeline(transaction=False)
        for key in read_keys:
            pipe.hgetall(key)
        for u in users:
            pipe.xrange(user_keys[u].app_outbox, self._first_unapplied(user_keys[u]), "+")
        pipe.hmget(self.keys.app_applied(app_name), [user_keys[u].user_member for u in users])
        read_keys = [*read_keys, *(user_keys[u].app_outbox for u in users)]
        return await _scripts.execute(pipe, [*read_keys, self.keys.app_applied(app_name)])

    async def prune_index(self, app_name: str, gone: list[tuple[str, str]]) -> None:
        """Drop index entries of sessions found gone (each re-checked in the script)."""
        if self._outbox is None:
            groups = [gone]
        else:  # one script per user: each touches only that user's slot
            by_user: dict[str, list[tuple[str, str]]] = {}
            for u, s in gone:
                by_user.setdefault(u, []).append((u, s))
            groups = list(by_user.values())
        for group in groups:
            first = self.keys.session(app_name, group[0][0], group[0][1])
            keys: list[str] = (
                [first.app_sessions, first.app_updated]
                if self._outbox is None
                else [first.app_outbox, first.user_updated]
            )
            args: list[str] = [self._first_unapplied(first)]
            for u, s in group:
                sk = self.keys.session(app_name, u, s)
                keys += (sk.meta, sk.user_sessions, sk.user_updated)
                args += (s, sk.app_member)
            reply = await self._run(self._prune, keys, args, [])
            if self._outbox is not None and reply[1]:
                await self._apply(first, reply[1], want_state=False)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        await self._connected()
        key = self.keys.user_state(check_id("app_name", app_name), check_id("user_id", user_id))
        return await self._read_hash(key)

    async def get_app_state(self, *, app_name: str) -> dict[str, Any]:
        await self._connected()
        return await self._read_hash(self.keys.app_state(check_id("app_name", app_name)))

    async def _read_hash(self, key: str) -> dict[str, Any]:
        pipe = self._redis.pipeline(transaction=False)
        pipe.hgetall(key)
        [raw] = await _scripts.execute(pipe, [key])
        return decode_hash(key, raw)

    # -- helpers --------------------------------------------------------------------------

    async def _connected(self, *, write: bool = False) -> None:
        """Initialize a fresh cluster client once: redis-py 8.1's RedisCluster fails when its
        very first commands run concurrently (redis-py issue #3032). Before the first write,
        check that the server can confirm writes as the write concern asks."""
        if self._cluster_client_fresh:
            await self._redis.initialize()
            self._cluster_client_fresh = False
        if write and self._concern is not None:
            await self._concern.check_server(self._redis)

    def _confirmed(self, operation: str, shortfalls: list[str]) -> None:
        if shortfalls:
            raise WriteConcernError(
                f"{operation} landed on the primary, but write_concern="
                f"{self.config.write_concern!r} was not met: {'; '.join(shortfalls)}. It may "
                "be lost if the primary fails before its replicas have it; retrying is safe.",
                written=True,
            )

    def _first_unapplied(self, keys: SessionKeys) -> str:
        """ARGV that selects the layout: '' on a single node, else the outbox cursor."""
        if self._outbox is None:
            return ""
        return self._outbox.first_unapplied(keys.app_applied, keys.user_member)

    async def _finish_pending(
        self, keys: SessionKeys, outbox: Any, applied: bytes | str | None, app_raw: Any
    ) -> Any:
        """The app state to show a reader of this user: ``app_raw`` as read, or, when the
        user's ``outbox`` (an XRANGE reply) holds entries after ``applied`` (the app's
        record for the user), the state after applying them now."""
        assert self._outbox is not None
        self._outbox.learn(keys.app_applied, keys.user_member, applied)
        pending = AppOutbox.pending(AppOutbox.entries(outbox), applied)
        if not pending:
            return app_raw
        return await self._apply(keys, pending, want_state=True)

    async def _apply(
        self,
        keys: SessionKeys,
        raw_entries: Any,
        *,
        want_state: bool,
        shortfalls: list[str] | None = None,
    ) -> Any:
        """Apply a user's outbox entries (an XRANGE reply, or parsed) in the app's slot."""
        assert self._outbox is not None
        return await self._outbox.apply(
            app_state=keys.app_state,
            app_versions=keys.app_versions,
            app_sessions=keys.app_sessions,
            app_applied=keys.app_applied,
            user_member=keys.user_member,
            entries=AppOutbox.entries(raw_entries),
            want_state=want_state,
            concern=self._concern,
            shortfalls=shortfalls,
        )

    def _check_size(self, what: str, size: int) -> None:
        if size > self.config.max_payload_bytes:
            raise PayloadTooLargeError(what, size, self.config.max_payload_bytes)

    @staticmethod
    def _stored(key: str, meta: Mapping[Any, Any]) -> StoredSession:
        m = {text(k): text(v) for k, v in meta.items()}
        try:
            return StoredSession(
                m["id"],
                m["app_name"],
                m["user_id"],
                {},
                float(m["last_update_time"]),
                int(m["rev"]),
            )
        except (KeyError, ValueError) as exc:
            raise CorruptDataError(key, f"session metadata is missing or bad: {exc!r}") from exc

    async def _run(
        self,
        script: Any,
        keys: list[str],
        args: list[Any],
        fields: list[list[bytes | str]],
        shortfalls: list[str] | None = None,
        tail: Sequence[Any] = (),
    ) -> Any:
        """Run a script; with a write concern and ``shortfalls`` (a write operation), wait
        for it in the same round trip and add any shortfall to ``shortfalls``. ``tail``
        goes after the fields."""
        counts = [len(f) // 2 for f in fields] if fields else []
        flat = [v for f in fields for v in f]
        argv = [*args, *counts, *flat, *tail]
        try:
            reply = await _concern.run(self._concern, script, keys, argv, shortfalls)
        except ResponseError as exc:
            if "WRONGTYPE" in str(exc):
                raise CorruptDataError(
                    keys[0], f"a key of this session has a foreign type: {exc}"
                ) from exc
            raise
        return _typed(reply)


def raw_events(key: str, entries: list[Any]) -> list[bytes | str]:
    """The stored event JSON of stream ``entries`` (as XRANGE returns them, parsed into
    dicts or left flat), in order."""
    raws = []
    for stream_id, fields in entries:
        if isinstance(fields, dict):
            raw = fields.get(b"event", fields.get("event"))
        else:
            raw = fields[1] if len(fields) == 2 and fields[0] in _EVENT_FIELD else None
        if raw is None:
            raise CorruptDataError(key, f"entry {text(stream_id)} has no 'event' field")
        raws.append(raw)
    return raws


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


def _first_entry(found: Snapshot) -> str:
    if found.first_id:
        return found.first_id
    return text(found.entries[0][0]) if found.entries else ""


def _typed(reply: Any) -> Any:
    """A script's reply, or its report of a key holding a foreign type raised."""
    if isinstance(reply, list) and reply and reply[0] == _WRONG_TYPE:
        raise CorruptDataError(text(reply[1]), f"expected another type, found {text(reply[2])}")
    return reply


def _appended(reply: Any, session_id: str) -> None:
    """append_event.lua's refusals raised: no such session, or a stale writer."""
    if reply[0] == _NOT_FOUND:
        raise SessionNotFoundError(f"Session {session_id} not found.")
    if reply[0] == _STALE:
        raise StaleSessionError()


_SCOPES = ("session", "user", "app")
_HASHES_PER_SCRIPT = 1024


def _stored_bytes(fields: list[list[bytes | str]]) -> int:
    """Bytes of the state fields and values a write stores (field names are UTF-8 text)."""
    return sum(len(v.encode() if isinstance(v, str) else v) for f in fields for v in f)


def _pairs(flat: list[Any]) -> dict[Any, Any]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _first_id(after: float | None) -> str:
    """The first stream id an ``after_timestamp`` read can need (ids are event-time ms)."""
    return "-" if after is None else str(event_ms(after))


def _script_keys(keys: SessionKeys) -> list[str]:
    return [
        keys.meta,
        keys.state,
        keys.events,
        keys.event_ids,
        keys.user_state,
        keys.user_sessions,
        keys.user_updated,
        keys.app_state,
        keys.app_sessions,
        keys.app_updated,
    ]
