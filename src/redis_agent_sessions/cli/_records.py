"""Sessions as JSON records, the one shape that ``show --json``, ``export``, ``import`` and
``migrate`` share:

    {"app_name": ..., "user_id": ..., "id": ..., "create_time": 1.7e9,
     "last_update_time": 1.7e9, "ttl": 3600 (only when the session has its own),
     "state": {"session": {...}, "user": {...}, "app": {...}},   keys without prefixes
     "events": [<each event's JSON exactly as stored>, ...]}

State keys are sorted and events kept in stored order, so exporting what an import wrote
gives the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from redis_agent_sessions._redis.codec import check_id, check_time, text
from redis_agent_sessions.cli._context import first_line
from redis_agent_sessions.cli._jsonl import dumps, loads
from redis_agent_sessions.errors import (
    AlreadyExistsError,
    CorruptDataError,
    InvalidInputError,
)
from redis_agent_sessions.keys import SessionKeys
from redis_agent_sessions.models import Event, Session
from redis_agent_sessions.sessions._engine import SessionEngine
from redis_agent_sessions.sessions._replies import raw_events
from redis_agent_sessions.sessions._writes import Exported
from redis_agent_sessions.state import APP_PREFIX, TEMP_PREFIX, USER_PREFIX, split_state_delta

__all__ = ["Checked", "check", "dump", "import_record", "read_record"]

_SCOPES = ("session", "user", "app")
_FIELDS = {"app_name", "user_id", "id", "create_time", "last_update_time", "ttl", "state", "events"}


def dump(record: dict[str, Any]) -> bytes:
    """A record as one line (without its newline), exact as ``read_record`` read it."""
    return dumps(record)


async def read_record(
    engine: SessionEngine[Session, Event],
    app_name: str,
    user_id: str,
    session_id: str,
    *,
    last: int | None = None,
    exact: bool = False,
) -> dict[str, Any] | None:
    """One session as a record, read at one instant (``Reads.snapshot``); None when
    there is no such session. ``last`` keeps only the newest N events. With ``exact``,
    integers of the events beyond 64 bits (the API stores them) stay ints, for
    ``dump``; without, orjson reads them as floats."""
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
    decode = _exact_json if exact else _event_json
    record["events"] = [decode(keys.events, raw) for raw in raw_events(keys.events, entries)]
    return record


def _event_json(key: str, raw: bytes | str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise CorruptDataError(key, "an entry holds no event JSON") from None


def _exact_json(key: str, raw: bytes | str) -> Any:
    try:
        return loads(raw.encode() if isinstance(raw, str) else raw)
    except (orjson.JSONDecodeError, InvalidInputError):
        raise CorruptDataError(key, "an entry holds no event JSON") from None


@dataclass
class Checked:
    """A record that passed every check an import makes before it writes."""

    app_name: str
    user_id: str
    id: str
    create_time: float
    last_update_time: float
    ttl: int | None
    state: dict[str, Any]
    """As ``create_session`` takes it: user and app keys with their prefixes."""
    events: list[Exported]


def check(engine: SessionEngine[Any, Any], record: object, *, spend: bool = False) -> Checked:
    """Everything an import of ``record`` could refuse, checked before anything is written
    (so that a refusal leaves every key as it was, and ``--replace`` deletes only for a
    record known good): InvalidInputError naming what is wrong. The checks are the API's,
    ``create_session``'s and ``append_event``'s, and more where the API's models fill a
    gap that stored JSON would leave open. With ``spend``, each event object of the record
    is replaced by None once it is checked and encoded, so that a large session is not held
    twice."""
    if not isinstance(record, dict):
        raise InvalidInputError(f"a record must be a JSON object, got {type(record).__name__}")
    unknown = sorted(set(record) - _FIELDS)
    if unknown:
        raise InvalidInputError(f"unknown field {unknown[0]!r}: an import would drop it")
    app, user, sid = (check_id(name, record.get(name)) for name in ("app_name", "user_id", "id"))
    created = check_time("create_time", record.get("create_time"))
    updated = check_time("last_update_time", record.get("last_update_time"))
    state = _state(record.get("state"))
    raw_events = record.get("events")
    if not isinstance(raw_events, list) or not all(isinstance(e, dict) for e in raw_events):
        raise InvalidInputError("events must be a list of event objects")
    if not raw_events and updated != created:
        # Only an append moves last_update_time: a session without events has none other.
        raise InvalidInputError("a session without events must have last_update_time = create_time")
    _, ttl, _, _, _ = engine.writes.check_create(
        app_name=app,
        user_id=user,
        session_id=sid,
        state=state,
        ttl=record.get("ttl"),
        create_time=created,
    )
    seen: set[str] = set()
    events = []
    for i, raw in enumerate(raw_events):
        event = _event(engine, f"events[{i}]", raw)
        if spend:
            raw_events[i] = None
        if event.id in seen:
            raise InvalidInputError(f"events[{i}]: event id {event.id!r} appears twice")
        seen.add(event.id)
        events.append(event)
    return Checked(app, user, sid, created, updated, ttl, state, events)


def _state(state: object) -> dict[str, Any]:
    """The record's state parts as one state with scope prefixes, keys checked to land in
    the scope they are given in."""
    if not isinstance(state, dict) or set(state) - set(_SCOPES):
        raise InvalidInputError("state must be an object with 'session', 'user' and 'app' parts")
    for scope in _SCOPES:
        if not isinstance(state.get(scope, {}), dict):
            raise InvalidInputError(f"state.{scope} must be an object")
    session, user, app = (state.get(scope, {}) for scope in _SCOPES)
    for key in session:
        if key.startswith((USER_PREFIX, APP_PREFIX, TEMP_PREFIX)):
            # Given to create_session, it would land in another scope (or none, temp:).
            raise InvalidInputError(
                f"state.session key {key!r} has a scope prefix: keys of the user and app "
                "scopes go in state.user and state.app, without it; temp: keys are not stored"
            )
    return {
        **session,
        **{USER_PREFIX + k: v for k, v in user.items()},
        **{APP_PREFIX + k: v for k, v in app.items()},
    }


def _event(engine: SessionEngine[Any, Any], where: str, raw: dict[str, Any]) -> Exported:
    # The API's models draw an id and a time for an event that has none (ADK's for an empty
    # id too): stored without them, the event would read back different on every read.
    if not isinstance(raw.get("id"), str) or not raw["id"]:
        raise InvalidInputError(f"{where}.id must be a non-empty string, got {raw.get('id')!r}")
    stamp = raw.get("timestamp")
    if isinstance(stamp, bool) or not isinstance(stamp, (int, float)):
        raise InvalidInputError(f"{where}.timestamp must be a number, got {stamp!r}")
    try:
        data = dumps(raw)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where} {exc}") from None
    try:
        [event] = engine.ctx.codec.decode_events([data])
    except Exception as exc:  # pydantic's ValidationError, or whatever a model's validator raises
        raise InvalidInputError(f"{where} is not a valid event: {first_line(exc)}") from None
    return engine.writes.check_exported(event, data, where)


async def import_record(
    engine: SessionEngine[Any, Any],
    record: dict[str, Any],
    *,
    replace: bool = False,
    spend: bool = False,
) -> bool:
    """Write one record as a session; False (nothing written) when the session exists and
    ``replace`` is not set. Every check comes first (``check``, which ``spend`` is
    passed to), so a refused record writes nothing and replaces nothing. A session whose
    import fails part way (the server or the connection failing) is deleted, so an import
    leaves whole sessions only."""
    checked = check(engine, record, spend=spend)
    app, user, sid = checked.app_name, checked.user_id, checked.id
    writes = engine.writes
    if replace:
        await writes.delete_session(app_name=app, user_id=user, session_id=sid)
    try:
        await writes.create_session(
            app_name=app,
            user_id=user,
            session_id=sid,
            state=checked.state,
            ttl=checked.ttl,
            create_time=checked.create_time,
        )
    except AlreadyExistsError:
        return False
    try:
        keys: SessionKeys = engine.keys.session(app, user, sid)
        # The last event leaves last_update_time as it was (ADK's may differ from it).
        await writes.append_exported(keys, user, sid, checked.events, checked.last_update_time)
    except BaseException:
        await writes.delete_session(app_name=app, user_id=user, session_id=sid)
        raise
    return True
