"""Sessions as JSON records, the one shape that ``show --json``, ``export``, ``import`` and
``migrate`` share::

    {"app_name": ..., "user_id": ..., "id": ..., "create_time": 1.7e9,
     "last_update_time": 1.7e9, "ttl": 3600 (only when the session has its own),
     "state": {"session": {...}, "user": {...}, "app": {...}},   keys without prefixes
     "events": [<each event's JSON exactly as stored>, ...]}

State keys are sorted and events kept in stored order, so exporting what an import wrote
gives the same bytes.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from redis_agent_sessions._redis.codec import check_id, session_ttl, text
from redis_agent_sessions.errors import (
    AlreadyExistsError,
    CorruptDataError,
    InvalidInputError,
)
from redis_agent_sessions.keys import SessionKeys
from redis_agent_sessions.models import Event, Session
from redis_agent_sessions.sessions._engine import SessionEngine
from redis_agent_sessions.sessions._replies import raw_events
from redis_agent_sessions.state import split_state_delta

__all__ = ["dump", "import_record", "read_record", "validate"]

_SCOPES = ("session", "user", "app")


def dump(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record)


async def read_record(
    engine: SessionEngine[Session, Event],
    app_name: str,
    user_id: str,
    session_id: str,
    *,
    last: int | None = None,
) -> dict[str, Any] | None:
    """One session as a record, read at one instant (``Reads.snapshot``); None when
    there is no such session. ``last`` keeps only the newest N events."""
    keys = engine.keys.session(app_name, user_id, session_id)
    found = await engine.reads.snapshot(keys, last, "-")
    if found is None:
        return None
    stored, meta, entries = found.stored, found.meta, found.entries
    if last is not None:
        entries = entries[::-1]  # read newest first
    m = {text(k): text(v) for k, v in meta.items()}
    try:
        record: dict[str, Any] = {
            "app_name": stored.app_name,
            "user_id": stored.user_id,
            "id": stored.id,
            "create_time": float(m["create_time"]),
            "last_update_time": stored.last_update_time,
        }
        if m.get("ttl"):
            record["ttl"] = int(m["ttl"])
    except (KeyError, ValueError) as exc:
        raise CorruptDataError(keys.meta, f"session metadata is missing or bad: {exc!r}") from None
    # The merged state splits back exactly: only user:/app: keys come from those scopes.
    scoped = split_state_delta(stored.state)
    record["state"] = {
        scope: dict(sorted(part.items())) for scope, part in zip(_SCOPES, scoped, strict=True)
    }
    record["events"] = [_event_json(keys.events, raw) for raw in raw_events(keys.events, entries)]
    return record


def _event_json(key: str, raw: bytes | str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise CorruptDataError(key, "an entry holds no event JSON") from None


def validate(engine: SessionEngine[Any, Any], record: object) -> list[Any]:
    """The record's events as models; InvalidInputError naming what is wrong."""
    if not isinstance(record, dict):
        raise InvalidInputError(f"a record must be a JSON object, got {type(record).__name__}")
    for name in ("app_name", "user_id", "id"):
        check_id(name, record.get(name))
    for name in ("create_time", "last_update_time"):
        value = record.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidInputError(f"{name} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise InvalidInputError(f"{name} must be finite, got {value!r}")
    if "ttl" in record:
        session_ttl(record["ttl"])
    state = record.get("state")
    if not isinstance(state, dict) or set(state) - set(_SCOPES):
        raise InvalidInputError("state must be an object with 'session', 'user' and 'app' parts")
    for scope in _SCOPES:
        if not isinstance(state.get(scope, {}), dict):
            raise InvalidInputError(f"state.{scope} must be an object")
    raw_events = record.get("events")
    if not isinstance(raw_events, list) or not all(isinstance(e, dict) for e in raw_events):
        raise InvalidInputError("events must be a list of event objects")
    if not raw_events and record["last_update_time"] != record["create_time"]:
        # Only an append moves last_update_time: a session without events has none other.
        raise InvalidInputError("a session without events must have last_update_time = create_time")
    try:
        events = engine.ctx.codec.decode_events([orjson.dumps(e) for e in raw_events])
    except ValueError as exc:
        raise InvalidInputError(f"bad event: {str(exc).splitlines()[0]}") from None
    seen: set[str] = set()
    for i, event in enumerate(events):
        check_id(f"events[{i}].id", event.id)
        if event.id in seen:
            raise InvalidInputError(f"events[{i}]: event id {event.id!r} appears twice")
        seen.add(event.id)
        if not math.isfinite(event.timestamp):
            raise InvalidInputError(f"events[{i}].timestamp must be finite")
        if event.partial:
            raise InvalidInputError(f"events[{i}] is partial: partial events are never stored")
    return events


async def import_record(
    engine: SessionEngine[Any, Any], record: dict[str, Any], *, replace: bool = False
) -> bool:
    """Write one validated record as a session; False (nothing written) when the session
    exists and ``replace`` is not set. A session whose import fails part way is deleted, so
    an import leaves whole sessions only."""
    events = validate(engine, record)
    app, user, sid = record["app_name"], record["user_id"], record["id"]
    keys: SessionKeys = engine.keys.session(app, user, sid)
    scoped = record["state"]
    state = {
        **scoped.get("session", {}),
        **{f"user:{k}": v for k, v in scoped.get("user", {}).items()},
        **{f"app:{k}": v for k, v in scoped.get("app", {}).items()},
    }
    if replace:
        await engine.writes.delete_session(app_name=app, user_id=user, session_id=sid)
    try:
        await engine.writes.create_session(
            app_name=app,
            user_id=user,
            session_id=sid,
            state=state,
            ttl=record.get("ttl"),
            create_time=float(record["create_time"]),
        )
    except AlreadyExistsError:
        return False
    try:
        stored = [
            (event, orjson.dumps(raw)) for event, raw in zip(events, record["events"], strict=True)
        ]
        # The last event leaves last_update_time as it was (ADK's may differ from it).
        await engine.writes.append_exported(
            keys, user, sid, stored, float(record["last_update_time"])
        )
    except BaseException:
        await engine.writes.delete_session(app_name=app, user_id=user, session_id=sid)
        raise
    return True
