"""Memory entries from the core models: turns with their conversational context, metadata
and content encoded for the write scripts.

Every path that writes a session's entries (adding events or a session, ``reindex``, the
turns around a deleted one) builds them here, so they are analysed alike.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from redis_agent_sessions._redis.codec import _check_json, check_id
from redis_agent_sessions.errors import InvalidInputError, PayloadTooLargeError
from redis_agent_sessions.memory._analysis import (
    CONTEXT,
    analyse,
    analyse_counted,
    analysis_id,
    neighbours,
    text_terms,
)
from redis_agent_sessions.memory._encoding import (
    UNKNOWN_SESSION_ID,
    Doc,
    iso_timestamp,
    make_doc,
    parse_iso,
)
from redis_agent_sessions.memory._models import MemoryEntry, SearchMemoryResponse
from redis_agent_sessions.memory._store import StoredEntry
from redis_agent_sessions.memory._text import query_words, term_count
from redis_agent_sessions.memory._vectors import RETRIEVAL_KEY, vector_texts
from redis_agent_sessions.models import Content, Event

__all__ = [
    "MAX_ENTRY_TERMS",
    "Turn",
    "check_entry",
    "content_json",
    "entry_doc",
    "event_turns",
    "iter_turn_docs",
    "metadata",
    "response",
    "turn_docs",
]

MAX_ENTRY_TERMS = 10_000
"""Most distinct terms one entry added may have: its words and its author's, and outside
ASCII their characters and pairs of characters (``term_count``). The plain backend keeps a
posting key for each, all written by one script that holds Redis meanwhile."""


@dataclass(slots=True)
class Turn:
    """One turn of a session, as it is (or will be) stored."""

    id: str
    session: str
    author: str | None
    ts: float
    iso: str | None
    content: bytes
    """The content as JSON."""
    text: str
    meta: dict[str, Any]


def turn_docs(
    app: str,
    user: str,
    turns: Sequence[Turn],
    todo: Collection[str] | None = None,
    *,
    reach: int = len(CONTEXT),
) -> list[Doc]:
    """The entries of turns in conversation order (of ``todo`` only, when given): each found
    by its own words and scored with those of the turns around it in its session, up to
    ``reach`` turns away (``context_turns``). Turns without a session (``add_memory``,
    events added without a session id) have no context."""
    return list(iter_turn_docs(app, user, turns, todo, reach=reach))


def iter_turn_docs(
    app: str,
    user: str,
    turns: Sequence[Turn],
    todo: Collection[str] | None = None,
    *,
    reach: int = len(CONTEXT),
) -> Iterator[Doc]:
    """``turn_docs``, each entry analysed when it is asked for (a write analyses the
    next batch while Redis stores the one before)."""
    own: list[tuple[Counter[str], int]] = []

    def terms(j: int) -> tuple[Counter[str], int]:
        """Turn j's terms counted, and how many: once, however many turns it is near."""
        while len(own) <= j:
            found = text_terms(turns[len(own)].text)
            own.append((Counter(found), len(found)))
        return own[j]

    around = neighbours([t.session for t in turns], reach)
    # A turn without a session has no context, whatever its reach: its analysis is the same.
    analysis = analysis_id(reach)
    seen: set[str] = set()
    for i, turn in enumerate(turns):
        if (todo is not None and turn.id not in todo) or turn.id in seen:
            continue
        alone = turn.session in ("", UNKNOWN_SESSION_ID)
        near = [] if alone else around[i]
        doc = make_doc(
            app_name=app,
            user_id=user,
            memory_id=turn.id,
            session_id=turn.session,
            author=turn.author,
            ts=turn.ts,
            iso=turn.iso,
            text_=turn.text,
            content_json=turn.content,
            meta=turn.meta,
            analysed=analyse_counted(*terms(i), [(d, *terms(j)) for d, j in near], turn.author),
            neighbours=[turns[j].id for _, j in near if turns[j].id != turn.id],
            analysis=analysis_id() if alone else analysis,
        )
        if doc is not None:
            # Its vector's pairs: the turns right before and after it in its session.
            beside = {j - i: turns[j] for d, j in near if d == 1}
            said = (turn.author, turn.text)
            doc.vtexts = vector_texts(said, _said(beside.get(-1)), _said(beside.get(1)))
            seen.add(turn.id)
            yield doc


def _said(turn: Turn | None) -> tuple[str | None, str] | None:
    return None if turn is None else (turn.author, turn.text)


def entry_doc(
    app: str, user: str, entry: MemoryEntry, shared: dict[str, Any], max_bytes: int
) -> Doc | None:
    """An entry given to ``add_memory`` (its metadata over ``shared``), within the limits
    (``check_entry``); None when it has no term to be found by."""
    if not isinstance(entry, MemoryEntry):
        raise InvalidInputError(f"not a MemoryEntry: {type(entry).__name__}")
    memory_id = str(uuid.uuid4()) if entry.id is None else check_id("memory id", entry.id)
    if entry.timestamp is not None and not isinstance(entry.timestamp, str):
        raise InvalidInputError("memory timestamp must be an ISO-8601 string")
    ts = time.time() if entry.timestamp is None else parse_iso(entry.timestamp)
    said, content = entry.content.text, content_json(entry.content)
    meta = {**shared, **metadata(entry.custom_metadata)}
    check_entry(memory_id, said, content, meta_size(meta), entry.author, max_bytes)
    return make_doc(
        app_name=app,
        user_id=user,
        memory_id=memory_id,
        session_id="",
        author=entry.author,
        ts=ts,
        iso=entry.timestamp,
        text_=said,
        content_json=content,
        meta=meta,
        analysed=analyse(text_terms(said), (), entry.author),
    )


def event_turns(
    sid: str, events: Sequence[Event], meta: dict[str, Any], max_bytes: int
) -> list[Turn]:
    """The turns of events in conversation order (events with no text are none), each
    within the limits (``check_entry``): their entries are ``iter_turn_docs``'."""
    turns: list[Turn] = []
    size = -1  # the metadata's, every event's: checked with the first text
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
            content = content_json(event.content)
            size = meta_size(meta) if size < 0 else size
            check_entry(event.id, said, content, size, event.author, max_bytes)
            turns.append(
                Turn(event.id, sid, event.author, float(ts), iso_timestamp(ts), content, said, meta)
            )
    return turns


def meta_size(meta: dict[str, Any]) -> int:
    """The bytes of an entry's metadata as JSON, once JSON can hold it."""
    _check_json(meta, "in custom_metadata")
    return len(orjson.dumps(meta))


def check_entry(
    memory_id: str,
    said: str,
    content: bytes,
    meta_bytes: int,
    author: str | None,
    max_bytes: int,
) -> None:
    """PayloadTooLargeError when an entry's content and metadata (``meta_bytes`` of JSON:
    ``meta_size``) and author come to more than ``max_bytes``, InvalidInputError when
    it has more than ``MAX_ENTRY_TERMS`` terms. Asked before the entry is analysed: stemming
    a megabyte of distinct words takes seconds."""
    if author is not None and not isinstance(author, str):
        raise InvalidInputError(f"author must be a string, got {type(author).__name__}")
    _check_json(author, "of the author")  # a lone surrogate cannot be encoded
    size = len(content) + meta_bytes + len((author or "").encode())
    if size > max_bytes:
        raise PayloadTooLargeError(f"memory entry {memory_id!r}", size, max_bytes)
    terms = term_count(said) + _author_words(author or "")
    if terms > MAX_ENTRY_TERMS:
        raise InvalidInputError(
            f"memory entry {memory_id!r} has {terms} distinct terms, over the limit of "
            f"{MAX_ENTRY_TERMS} (its words and its author's, and outside ASCII their "
            "characters and pairs of characters)"
        )


@functools.lru_cache(maxsize=4096)
def _author_words(author: str) -> int:
    return len(query_words(author))


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


def response(
    entries: Sequence[StoredEntry], found: Mapping[str, dict[str, Any]]
) -> SearchMemoryResponse:
    """Search results: the stored entries, each saying how it was found (``found``) beside
    what it already says about itself (a learned fact's revision, topics and sources)."""
    memories = []
    for e in entries:
        meta = e.meta
        if e.id in found:
            meta = {**meta, RETRIEVAL_KEY: {**meta.get(RETRIEVAL_KEY, {}), **found[e.id]}}
        memories.append(
            MemoryEntry(
                content=Content.model_validate(e.content),
                custom_metadata=meta,
                id=e.id,
                author=e.author,
                timestamp=e.timestamp,
            )
        )
    return SearchMemoryResponse(memories=memories)
