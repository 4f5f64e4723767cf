"""Memory entries from the core models: events and their conversational context, metadata
and content encoded for the write scripts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from redis_agent_sessions._redis.codec import check_id
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.memory._analysis import analyse, text_terms, with_context
from redis_agent_sessions.memory._store import Doc, iso_timestamp, make_doc
from redis_agent_sessions.models import Content, Event

__all__ = ["content_json", "event_docs", "metadata"]


def event_docs(
    app: str, user: str, sid: str, events: Sequence[Event], meta: dict[str, Any]
) -> list[Doc]:
    """The entries of events in conversation order: each found by its own words and by
    those of the turns around it (events with no text are not turns)."""
    turns: list[tuple[Event, str]] = []
    for event in events:
        if not isinstance(event, Event):
            raise InvalidInputError(f"not an event: {type(event).__name__}")
        if event.content is None or not event.content.parts:
            continue
        check_id("event id", event.id)
        ts = event.timestamp
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts != ts:
            raise InvalidInputError(f"event timestamp must be a number: {ts!r}")
        said = event.content.text
        if said:
            turns.append((event, said))
    own = [text_terms(said) for _, said in turns]
    docs: dict[str, Doc] = {}
    for (event, said), terms, around in zip(
        turns, own, with_context(own, [sid] * len(own)), strict=True
    ):
        assert event.content is not None
        doc = make_doc(
            app_name=app,
            user_id=user,
            memory_id=event.id,
            session_id=sid,
            author=event.author,
            ts=float(event.timestamp),
            iso=iso_timestamp(event.timestamp),
            text_=said,
            content_json=content_json(event.content),
            meta=meta,
            analysed=analyse(terms, around, event.author),
        )
        if doc is not None:
            docs.setdefault(event.id, doc)
    return list(docs.values())


def metadata(value: Mapping[str, object] | None) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"custom_metadata must be a mapping, got {type(value).__name__}")
    return dict(value)


def content_json(content: Content) -> bytes:
    try:
        return content.__pydantic_serializer__.to_json(content, exclude_none=True)
    except Exception as exc:
        raise InvalidInputError(f"content cannot be encoded as JSON: {exc}") from exc
