"""Writing sessions: create, append (with its checks, the ``temp:`` split, turns and
catch-ups, and the caller's copy updated), the import path, and delete. Each is one script
in the session's slot, then the layout's app step (``Layout.settle``); a script that may
record app-scope writes runs inside ``Layout.recording`` (the cluster's registration of
the user, for the sweep)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Generic, NamedTuple

from redis_agent_sessions._redis.codec import (
    check_id,
    check_time,
    decode_hash,
    encode_fields,
    event_ms,
    session_ttl,
    text,
)
from redis_agent_sessions._redis.session_calls import (
    AppendEvent,
    CreateSession,
    DeleteSession,
    state_argv,
)
from redis_agent_sessions.errors import (
    CorruptDataError,
    InvalidInputError,
    PermissionDeniedError,
    StaleSessionError,
)
from redis_agent_sessions.keys import SessionKeys
from redis_agent_sessions.sessions._catch_up import Position
from redis_agent_sessions.sessions._context import Context
from redis_agent_sessions.sessions._reads import Reads
from redis_agent_sessions.sessions._replies import NOT_FOUND, OK, appended, pairs, stored_bytes
from redis_agent_sessions.sessions._turns import Ref, Writer
from redis_agent_sessions.sessions._types import UNKNOWN, E, S, StoredSession
from redis_agent_sessions.state import TEMP_PREFIX, ScopedDelta, merge_state, split_state_delta

__all__ = ["Exported", "Writes"]

_SCOPES = ("session", "user", "app")


class Exported(NamedTuple):
    """An imported event as ``Writes.append_exported`` stores it: its JSON exactly as
    given, and what the append script takes from its model (no model is kept: an import
    holds every event of a session at once)."""

    id: str
    timestamp: float
    raw: bytes
    hints: tuple[str, str]
    """The codec's ``read_hints`` of the event."""


class Writes(Generic[S, E]):
    """The write operations of one service."""

    catch_up_events = 100
    """A stale append's refusal carries what the copy lacks when it is at most this many
    events behind (single-node layout), for the refresh that follows (``._catch_up``)."""

    exported_batch_bytes = 8 << 20
    """Most bytes of event JSON ``append_exported`` sends in one pipeline (but at least
    one event): a large session is packed and sent a part at a time instead of held twice
    more while the whole is (the client copies each command's arguments into one buffer,
    and asyncio's transport joins the buffers of a write)."""

    def __init__(self, ctx: Context[S, E], reads: Reads[S, E]) -> None:
        self._ctx = ctx
        self._codec = ctx.codec
        self._runner = ctx.runner
        self.reads = reads

    def check_create(
        self,
        *,
        app_name: str,
        user_id: str,
        state: Mapping[str, Any] | None = None,
        session_id: str | None = None,
        ttl: object = None,
        create_time: float | None = None,
    ) -> tuple[str, int | None, ScopedDelta, list[list[bytes | str]], float | None]:
        """Everything ``create_session`` refuses, checked without a round trip (an
        import checks a record whole before it deletes the session it replaces): the
        session id, its own TTL, the state by scope and encoded, and the create time."""
        own_ttl = session_ttl(ttl)
        check_id("app_name", app_name)
        check_id("user_id", user_id)
        sid = str(uuid.uuid4()) if session_id is None else check_id("session_id", session_id)
        if create_time is not None:
            create_time = check_time("create_time", create_time)
        if state is not None and not isinstance(state, Mapping):
            raise InvalidInputError(f"state must be a mapping, got {type(state).__name__}")
        scoped = split_state_delta(state or {})
        fields = _encoded(scoped)
        self._runner.check_size("initial state", stored_bytes(fields))
        return sid, own_ttl, scoped, fields, create_time

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
        await self._ctx.ready(write=True)
        sid, own_ttl, scoped, fields, create_time = self.check_create(
            app_name=app_name,
            user_id=user_id,
            state=state,
            session_id=session_id,
            ttl=ttl,
            create_time=create_time,
        )
        now = time.time() if create_time is None else create_time
        keys = self._ctx.keys.session(app_name, user_id, sid)
        layout = self._ctx.layout
        app_writes, (app_sessions, app_updated, app_expiry) = layout.app_keys(
            keys, keys.app_state, keys.app_sessions, keys.app_updated, keys.app_expiry
        )
        call = CreateSession(
            meta=keys.meta,
            state=keys.state,
            events=keys.events,
            event_ids=keys.event_ids,
            user_state=keys.user_state,
            user_sessions=keys.user_sessions,
            user_updated=keys.user_updated,
            app_state=app_writes,
            app_sessions=app_sessions,
            app_updated=app_updated,
            app_expiry=app_expiry,
            session_id=sid,
            app_name=app_name,
            user_id=user_id,
            create_time=repr(now),
            ttl=(self._ctx.config.ttl_seconds or 0) if own_ttl is None else own_ttl,
            app_member=keys.app_member,
            layout=layout.mode(keys),
            own_ttl="" if own_ttl is None else "1",
            now_ms=int(time.time() * 1000),
            expiry_take=layout.expired_per_write,
            state_fields=state_argv(fields),
        )
        shortfalls: list[str] = []
        try:
            await layout.listing(app_name)
            async with layout.recording(keys):
                reply = await self._runner.run(self._runner.create, call, shortfalls)
        except PermissionDeniedError as exc:
            if exc.key != self._ctx.keys.apps():
                raise
            raise PermissionDeniedError(exc.command, exc.key, _unlisted(app_name)) from exc
        app_raw = await layout.created(keys, app_name, now, reply, shortfalls)
        if not reply.created:
            raise self._codec.errors.already_exists(f"Session with id {sid} already exists.")
        if not self._ctx.layout_recorded:
            await self._ctx.record_layout()
        user_state = decode_hash(keys.user_state, reply.user_state)
        self._runner.confirmed("create_session", shortfalls)
        app_state = decode_hash(keys.app_state, app_raw)
        stored = StoredSession(
            sid, app_name, user_id, merge_state(scoped.session, user_state, app_state), now, 0
        )
        return self._codec.build_session(stored, [])

    async def append_event(self, session: S, event: E) -> E:
        if not self._ctx.writable:
            await self._ctx.ready(write=True)
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
        # Out of range, the event would be refused by XADD inside the script (an invalid
        # stream id) or stored and break every reader that shows its time.
        check_time("event timestamp", event.timestamp)
        timestamp = event.timestamp
        delta = event.actions.state_delta
        if not isinstance(delta, Mapping):
            raise InvalidInputError(f"state_delta must be a mapping, got {type(delta).__name__}")
        temp = {k: v for k, v in delta.items() if isinstance(k, str) and k.startswith(TEMP_PREFIX)}
        stored_delta = {k: v for k, v in delta.items() if k not in temp} if temp else dict(delta)
        fields = _encoded(split_state_delta(stored_delta))
        revision = self._codec.revision(session)
        events = self._codec.events_of(session)
        keys = self._ctx.keys.session(session.app_name, session.user_id, session.id)
        # temp: values live only in the caller's objects, never in the stored event; on
        # failure the caller gets its event back as it was, ready to retry.
        event.actions.state_delta = stored_delta
        shortfalls: list[str] = []
        turns = self._ctx.turns
        # No coroutine when nobody is in line: the uncontended append stays lean.
        place = (
            None
            if turns is None or not turns.in_line(keys.meta)
            else await turns.take(keys.meta, _writer(session, event))
        )
        position = (keys.meta, revision or 0, events[-1].id if events else "")
        lost = False
        try:
            raw_event = self._encode_event(event, stored_bytes(fields))
            if revision is not None and self._ctx.catch_ups.get(position) is not None:
                # An append of this worker replaced this copy's revision moments ago, and
                # its reply told what the copy lacks: a refusal needs no round trip.
                raise self._codec.errors.stale()
            call = self._append_call(
                keys,
                session.id,
                revision,
                position[2],
                event.id,
                raw_event,
                timestamp,
                timestamp,
                self._codec.read_hints(event),
                state_argv(fields),
                catch_up=turns is not None and turns.waiting(keys.meta, place),
                schema=self._codec.fingerprint,
            )
            async with self._ctx.layout.recording(keys, app_writes=bool(fields[2])):
                reply = await self._runner.run(self._runner.append, call, shortfalls)
                if reply.catch_up is not None:
                    self._hold_catch_up(keys, position, reply.catch_up)
                elif reply.revision is not None:
                    self._ctx.catch_ups.seen(keys.meta, reply.revision)
                who = (session.app_name, session.user_id, session.id)
                new_revision = appended(reply, who, self._codec.errors)
            # The event is stored; if the app step fails the caller retries, and the retry
            # (a duplicate) finishes it. Nothing to apply or check: no step.
            if reply.after:
                await self._ctx.layout.settle(keys, reply.after, shortfalls)
            # Before the caller's copy takes the event: its retry (a duplicate) waits again.
            self._runner.confirmed("append_event", shortfalls)
        except StaleSessionError:
            lost = True
            if turns is not None and place is None:
                turns.owe(keys.meta, _writer(session, event))
            event.actions.state_delta = delta
            raise
        except BaseException:
            event.actions.state_delta = delta
            raise
        finally:
            if place is not None:
                assert turns is not None
                turns.taken(keys.meta, place, lost=lost)
        if not self._ctx.layout_recorded:
            await self._ctx.record_layout()
        # A duplicate whose revision follows the caller's is a retry after a lost reply:
        # the caller has not seen its own event yet.
        if reply.status == OK or revision == new_revision - 1:
            session.state.update(temp)
            session.state.update(stored_delta)
            events.append(event)
            session.last_update_time = timestamp
            if revision is None or new_revision != revision + 1:
                # A merged stale write (or an unknown copy): the copy may lack events
                # others appended before it. It no longer claims a revision, so refresh
                # reads it whole rather than trusting its last event.
                if revision is not None and (telemetry := self._ctx.telemetry) is not None:
                    telemetry.count("merges")
                new_revision = UNKNOWN if self._ctx.config.stale_policy == "merge" else new_revision
            self._codec.set_revision(session, new_revision)
        return event

    async def probe(self, app_name: str, user_id: str, session_id: str) -> str:
        """For a readiness probe: run the append script as for a session that does not
        exist, with a change in every scope. It asks for every permission an append needs
        before it reads or writes anything, then finds no session and writes nothing."""
        keys = self._ctx.keys.session(app_name, user_id, session_id)
        fields = _encoded(split_state_delta({"probe": 0, "user:probe": 0, "app:probe": 0}))
        call = self._append_call(
            keys, session_id, 0, "", "probe", b"{}", 0.0, 0.0, ("", ""), state_argv(fields)
        )
        reply = await self._runner.run(self._runner.append, call)
        if reply.status != NOT_FOUND:
            raise CorruptDataError(keys.meta, "the readiness probe's session exists")
        return "append and read scripts run"

    def _hold_catch_up(self, keys: SessionKeys, position: Position, reply: list[Any]) -> None:
        meta, state, user_state, app_state, anchor, entries = reply
        try:
            found = self.reads.found(keys, pairs(meta), (state, user_state, app_state), entries)
        except CorruptDataError:
            return  # the refresh reads, and reports it
        found.anchor = text(anchor) if anchor else None
        self._ctx.catch_ups.put(position, found)

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
        state_fields: list[Any],
        *,
        catch_up: bool = False,
        cleanup: bool = True,
        schema: str = "",
    ) -> AppendEvent:
        """append_event.lua's call (``state_fields``: ``state_argv``); with ``cleanup``,
        the script takes members of the app's expiry index due for a check (single node:
        ``Layout.settle`` checks them). ``schema`` is the fingerprint of the models that
        encoded ``raw_event`` ('' when it is not their own encoding, as for imported JSON:
        readers then validate it)."""
        layout = self._ctx.layout
        config = self._ctx.config
        app_state, (app_updated, app_expiry) = layout.app_keys(
            keys, keys.app_state, keys.app_updated, keys.app_expiry
        )
        return AppendEvent(
            meta=keys.meta,
            state=keys.state,
            events=keys.events,
            event_ids=keys.event_ids,
            user_state=keys.user_state,
            app_state=app_state,
            user_updated=keys.user_updated,
            compactions=keys.compactions,
            app_updated=app_updated,
            app_expiry=app_expiry,
            revision="" if revision is None else revision,
            last_event_id=last_event_id,
            stale_policy=config.stale_policy,
            event_id=event_id,
            event=raw_event,
            event_ms=event_ms(timestamp),
            update_time=repr(float(update_time)),
            ttl=config.ttl_seconds or 0,
            layout=layout.mode(keys),
            session_id=session_id,
            app_member=keys.app_member,
            compaction=hints[0],
            full_reads=hints[1],
            catch_up_limit=self.catch_up_events if config.stale_policy == "reject" else 0,
            catch_up_now="1" if catch_up else "",
            now_ms=int(time.time() * 1000),
            expiry_take=layout.expired_per_write if cleanup else 0,
            schema=schema,
            state_fields=state_fields,
        )

    async def append_exported(
        self,
        keys: SessionKeys,
        user_id: str,
        session_id: str,
        events: Sequence[Exported],
        update_time: float,
    ) -> None:
        """Store a new session's imported events exactly as exported (each event's JSON as
        given), in order, without applying their state deltas: an import writes each
        scope's state whole, as it was when exported. A pipeline of the append script per
        ``exported_batch_bytes`` of events (one round trip for most sessions), each
        call checking the revision the one before it made, so a gap stops the rest.
        ``update_time`` is the session's last_update_time after the last. The caller
        checked the events (``check_exported``) before writing anything."""
        if not events:
            return
        shortfalls: list[str] = []
        no_state = state_argv([[], [], []])
        last = len(events) - 1
        start = 0
        while start <= last:
            calls: list[AppendEvent] = []
            size = 0
            for revision in range(start, last + 1):
                if calls and size + len(events[revision].raw) > self.exported_batch_bytes:
                    break
                event = events[revision]
                size += len(event.raw)
                call = self._append_call(
                    keys,
                    session_id,
                    revision,
                    events[revision - 1].id if revision else "",
                    event.id,
                    event.raw,
                    event.timestamp,
                    update_time if revision == last else event.timestamp,
                    event.hints,
                    no_state,
                    cleanup=revision == last,
                )
                calls.append(call)
            replies = await self._runner.run_many(self._runner.append, calls, shortfalls)
            for reply in replies:
                appended(reply, (keys.app_name, user_id, session_id), self._codec.errors)
            start += len(calls)
        await self._ctx.layout.settle(keys, replies[-1].after, shortfalls)
        self._runner.confirmed("append_event", shortfalls)

    def check_exported(self, event: E, raw: bytes, where: str = "event") -> Exported:
        """An imported event (its model, and its JSON as it will be stored) checked as
        ``append_event`` checks an event, with the event alone counted against the size
        limit (an import applies no state delta); ``where`` names it in the errors."""
        if event.partial:
            raise InvalidInputError(f"{where} is partial: partial events are never stored")
        check_id(f"{where}.id", event.id)
        timestamp = check_time(f"{where}.timestamp", event.timestamp)
        self._runner.check_size(where, len(raw))
        try:
            hints = self._codec.read_hints(event)
        except InvalidInputError as exc:
            raise InvalidInputError(f"{where}: {exc}") from None
        return Exported(event.id, timestamp, raw, hints)

    def _encode_event(self, event: E, state_bytes: int) -> bytes:
        try:
            raw = self._codec.encode_event(event)
        except Exception as exc:
            raise InvalidInputError(f"event cannot be encoded as JSON: {exc}") from exc
        # The delta is stored twice, in the event and in the state hashes: both count.
        self._runner.check_size("event with its state changes", len(raw) + state_bytes)
        return raw

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await self._ctx.ready(write=True)
        keys = self._ctx.keys.session(
            check_id("app_name", app_name),
            check_id("user_id", user_id),
            check_id("session_id", session_id),
        )
        shortfalls: list[str] = []
        layout = self._ctx.layout
        app_sessions, (app_updated, app_expiry) = layout.app_keys(
            keys, keys.app_sessions, keys.app_updated, keys.app_expiry
        )
        call = DeleteSession(
            meta=keys.meta,
            state=keys.state,
            events=keys.events,
            event_ids=keys.event_ids,
            user_sessions=keys.user_sessions,
            app_sessions=app_sessions,
            user_updated=keys.user_updated,
            compactions=keys.compactions,
            app_updated=app_updated,
            app_expiry=app_expiry,
            session_id=session_id,
            app_member=keys.app_member,
            layout=layout.mode(keys),
        )
        async with layout.recording(keys):
            reply = await self._runner.run(self._runner.delete, call, shortfalls)
        if self._ctx.cache is not None:
            self._ctx.cache.drop(keys.meta)
        self._ctx.catch_ups.drop(keys.meta)
        await layout.settle(keys, reply.outbox, shortfalls)
        if reply.deleted:  # a retry that finds nothing to delete has nothing to confirm
            self._runner.confirmed("delete_session", shortfalls)


def _writer(session: Any, event: Any) -> Writer:
    """Who takes or owes a turn on a session (``._turns``)."""
    return Ref(session), event.id, asyncio.current_task()


def _unlisted(app_name: str) -> str:
    return (
        f"the app {app_name!r} is not in the registry of apps, and this user may not list "
        f"it (a tenant's may only read it): an operator registers the app with "
        f"`redis-agent-sessions tenant create {app_name} --url ADMIN_URL`"
    )


def _encoded(scoped: Sequence[Mapping[str, Any]]) -> list[list[bytes | str]]:
    """A state delta split by scope (session, user, app) as the scripts take it: per scope,
    field/JSON pairs."""
    return [encode_fields(part, scope) for part, scope in zip(scoped, _SCOPES, strict=True)]
