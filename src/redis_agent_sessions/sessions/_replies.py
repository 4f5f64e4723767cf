"""The scripts' reply format: status codes, and the checks that turn replies into errors.

What each script returns is written in its ``.lua`` header; this module is the Python side
of those headers, shared by every part of the engine and both layouts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from redis_agent_sessions._redis.codec import event_ms, text
from redis_agent_sessions._redis.session_calls import Appended
from redis_agent_sessions.errors import CorruptDataError, IncompleteSessionError
from redis_agent_sessions.sessions._types import ErrorTypes, StoredSession

__all__ = [
    "DUPLICATE",
    "INCOMPLETE",
    "NOT_FOUND",
    "OK",
    "STALE",
    "appended",
    "first_id",
    "missing_parts",
    "pairs",
    "raw_events",
    "stored_bytes",
    "stored_events",
    "stored_session",
]

OK, DUPLICATE, NOT_FOUND, STALE, INCOMPLETE = 1, 2, -1, -2, -5
_EVENT_FIELD = (b"event", "event")
_SCHEMA_FIELD = (b"schema", "schema")


def appended(reply: Appended, who: tuple[str, str, str], errors: ErrorTypes) -> int:
    """The revision an append made (or, already stored, found), or append_event.lua's
    refusals raised: no such session, a stale writer, or a session whose keys were evicted
    apart. ``who``: the session's app, user and id."""
    if reply.status == NOT_FOUND:
        raise errors.not_found(f"Session {who[2]} not found.")
    if reply.status == STALE:
        raise errors.stale()
    if reply.revision is None:  # INCOMPLETE
        raise IncompleteSessionError(*who, [text(m) for m in reply.missing], text(reply.key))
    return reply.revision


def missing_parts(meta: Mapping[Any, Any], state: Any, present: Any) -> list[str]:
    """What a session's read shows to be gone though its metadata says it was stored:
    ``meta`` as read, ``state`` its session state hash as read or whether it exists (a
    hash is never emptied once written, so an empty reply where the metadata says
    ``has_state`` means it is gone), ``present`` whether its events stream and event ids
    hash exist (two EXISTS replies). None for what the read did not ask. Sessions stored
    before ``has_state`` was kept are checked for their events only."""
    rev = meta.get(b"rev", meta.get("rev"))
    missing = []
    if present is not None and rev not in (b"0", "0", None):
        if not int(present[0]):
            missing.append("events")
        if not int(present[1]):
            missing.append("event ids")
    if state is not None and not state and meta.get(b"has_state", meta.get("has_state")):
        missing.append("session state")
    return missing


def raw_events(key: str, entries: list[Any]) -> list[bytes | str]:
    """The stored event JSON of stream ``entries`` (as XRANGE returns them, parsed into
    dicts or left flat), in order."""
    return stored_events(key, entries)[0]


def stored_events(key: str, entries: list[Any]) -> tuple[list[bytes | str], list[str | None]]:
    """The stored event JSON of stream ``entries`` (as XRANGE returns them, parsed into
    dicts or left flat), in order, and beside each the fingerprint of the models that
    wrote it (None when the entry has none: it is validated when read)."""
    raws: list[bytes | str] = []
    schemas: list[str | None] = []
    for stream_id, fields in entries:
        schema = None
        if isinstance(fields, dict):
            raw = fields.get(b"event", fields.get("event"))
            schema = fields.get(b"schema", fields.get("schema"))
        elif len(fields) == 2 and fields[0] in _EVENT_FIELD:
            raw = fields[1]
        elif len(fields) == 4 and fields[0] in _EVENT_FIELD and fields[2] in _SCHEMA_FIELD:
            raw, schema = fields[1], fields[3]
        else:
            raw = None
        if raw is None:
            raise CorruptDataError(key, f"entry {text(stream_id)} has no 'event' field")
        raws.append(raw)
        schemas.append(None if schema is None else text(schema))
    return raws, schemas


def stored_session(key: str, meta: Mapping[Any, Any]) -> StoredSession:
    """A session's metadata hash (``key``) as read, before its state is merged in."""
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


def stored_bytes(fields: list[list[bytes | str]]) -> int:
    """Bytes of the state fields and values a write stores (field names are UTF-8 text)."""
    return sum(len(v.encode() if isinstance(v, str) else v) for f in fields for v in f)


def pairs(flat: list[Any]) -> dict[Any, Any]:
    """A flat field/value reply (a script's HGETALL) as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def first_id(after: float | None) -> str:
    """The first stream id an ``after_timestamp`` read can need (ids are event-time ms)."""
    return "-" if after is None else str(event_ms(after))
