"""Search filters: what a search may be limited to (`MemoryFilter`), checked and
turned into what both backends match inside the search (`Compiled`), and the filter
tokens each entry is written with.

An entry's tokens (``entry_tokens``) are short hex digests of its kind, author, session,
fact topics and declared ``custom_metadata`` values: the same words for the search module's
``fx`` TAG field and the plain backend's context hash, so both match them alike, and no
input is ever query syntax. Time ranges match the entry's ``ts`` (a NUMERIC field; the
context hash's first field).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, Literal

import orjson

from redis_agent_sessions.errors import InvalidFilterError

__all__ = [
    "NO_FILTER",
    "Compiled",
    "MemoryFilter",
    "MetadataValue",
    "compile_filter",
    "entry_tokens",
    "half_life_seconds",
]

MetadataValue = str | int | bool
"""A ``custom_metadata`` value a filter compares (equality of type and value: ``1`` is not
``True``, and other types are never matched)."""
Instant = datetime | int | float


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """What a memory search is limited to; every field given must hold (None: any). A field
    taking a sequence matches any of its values.

    Attributes:
        author: the entry's author (exactly), or any of several.
        session_ids: the sessions the entries came from (events added without a session
            id are ADK's ``__unknown_session_id__``; ``add_memory`` entries and facts have
            none, so never match).
        since: entries at or after this time: an aware datetime, a naive one (local time,
            as ``datetime.timestamp`` reads it), or epoch seconds. An event's time is its
            timestamp; an ``add_memory`` entry's its ``timestamp`` (else when it was
            added); a learned fact's when it last changed.
        until: entries at or before this time (as ``since``).
        topics: learned facts on any of these topics (so only facts).
        kind: ``"fact"`` for learned facts only, ``"event"`` for every other entry
            (session turns and ``add_memory`` entries).
        metadata: ``custom_metadata`` field -> value (or values, any of): only fields
            declared in the service's ``indexed_metadata`` setting; values str, int or
            bool, compared with their type.
    """

    author: str | Sequence[str] | None = None
    session_ids: Sequence[str] | None = None
    since: Instant | None = None
    until: Instant | None = None
    topics: Sequence[str] | None = None
    kind: Literal["fact", "event"] | None = None
    metadata: Mapping[str, MetadataValue | Sequence[MetadataValue]] | None = None


FILTER_FIELDS = tuple(f.name for f in fields(MemoryFilter))


@dataclass(frozen=True, slots=True)
class Compiled:
    """A checked filter: each clause is tokens of which an entry must hold one."""

    clauses: tuple[tuple[str, ...], ...] = ()
    since: float | None = None
    until: float | None = None
    recency: tuple[float, float] | None = None
    """(now, half-life in seconds): a score is halved for each half-life of its entry's age."""

    def __bool__(self) -> bool:
        return bool(self.clauses) or self.since is not None or self.until is not None

    def with_recency(self, now: float, half_life: float | None) -> Compiled:
        if half_life is None:
            return self
        return Compiled(self.clauses, self.since, self.until, (now, half_life))

    def lua(self) -> str:
        """How the scripts take it: ``since<TAB>until<TAB>now<TAB>half-life<TAB>clause...``
        (a clause's tokens space-separated; an open end, or no recency, empty), or '' for
        none."""
        if not self and self.recency is None:
            return ""
        ends = ["" if t is None else repr(t) for t in (self.since, self.until)]
        ends += ["", ""] if self.recency is None else [repr(x) for x in self.recency]
        return "\t".join([*ends, *(" ".join(c) for c in self.clauses)])

    def matches(self, tokens: Sequence[str], ts: float) -> bool:
        """Whether an entry of these tokens and time is within the filter."""
        if (self.since is not None and ts < self.since) or (
            self.until is not None and ts > self.until
        ):
            return False
        held = set(tokens)
        return all(any(t in held for t in clause) for clause in self.clauses)

    def query(self) -> str:
        """The search module's query clauses (tokens are hex words: nothing to escape)."""
        parts = [f"@fx:{{{' | '.join(c)}}}" for c in self.clauses]
        if self.since is not None or self.until is not None:
            low = "-inf" if self.since is None else repr(self.since)
            high = "+inf" if self.until is None else repr(self.until)
            parts.append(f"@ts:[{low} {high}]")
        return " ".join(parts)


NO_FILTER = Compiled()


@functools.lru_cache(maxsize=65536)
def _digest(kind: str, value: str) -> str:
    return kind + hashlib.blake2b(value.encode(), digest_size=8).hexdigest()


def _meta_token(name: str, value: object) -> str | None:
    if not isinstance(value, (str, int)):
        return None
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return None  # JSON (orjson) holds 64-bit integers
    return _digest("m", name + "\0" + orjson.dumps(value).decode())


def entry_tokens(
    *,
    kind: str,
    author: str | None,
    session: str,
    topics: Sequence[str],
    meta: Mapping[str, Any],
    indexed: Sequence[str],
) -> list[str]:
    """The filter tokens of an entry (``kind``: ``fact`` or ``event``)."""
    out = ["kf" if kind == "fact" else "ke"]
    if author is not None:
        out.append(_digest("a", author))
    if session:
        out.append(_digest("s", session))
    out += sorted({_digest("t", t) for t in topics if isinstance(t, str)})
    for name in indexed:
        token = _meta_token(name, meta.get(name)) if name in meta else None
        if token is not None:
            out.append(token)
    return out


def compile_filter(
    given: MemoryFilter | Mapping[str, object] | None,
    indexed: Sequence[str],
    **extra: object,
) -> Compiled:
    """``given`` (a MemoryFilter or a mapping of its fields) with ``extra`` fields (the
    search's keyword arguments; a field given in both must agree), checked; raises
    InvalidFilterError."""
    values: dict[str, object] = {}
    if isinstance(given, MemoryFilter):
        values = {name: getattr(given, name) for name in FILTER_FIELDS}
    elif isinstance(given, Mapping):
        for name, value in given.items():
            if name not in FILTER_FIELDS:
                raise InvalidFilterError(
                    f"unknown filter field {name!r} (fields: {', '.join(FILTER_FIELDS)})"
                )
            values[name] = value
    elif given is not None:
        raise InvalidFilterError(
            f"filters must be a MemoryFilter or a mapping, got {type(given).__name__}"
        )
    for name, value in extra.items():
        if value is None:
            continue
        if values.get(name) is not None and values[name] != value:
            raise InvalidFilterError(f"filter field {name!r} given twice, with two values")
        values[name] = value
    clauses: list[tuple[str, ...]] = []
    author = values.get("author")
    if author is not None:
        clauses.append(tuple(_digest("a", a) for a in _strings("author", author, one=True)))
    if values.get("session_ids") is not None:
        sessions = _strings("session_ids", values["session_ids"])
        clauses.append(tuple(_digest("s", s) for s in sessions))
    kind = values.get("kind")
    if kind is not None:
        if kind not in ("fact", "event"):
            raise InvalidFilterError(f"filter kind must be 'fact' or 'event': {kind!r}")
        clauses.append(("kf" if kind == "fact" else "ke",))
    if values.get("topics") is not None:
        topics = _strings("topics", values["topics"])
        clauses.append(tuple(_digest("t", t) for t in topics))
    metadata = values.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            raise InvalidFilterError(
                f"filter metadata must be a mapping, got {type(metadata).__name__}"
            )
        for name, wanted in metadata.items():
            if name not in indexed:
                raise InvalidFilterError(
                    f"custom_metadata field {name!r} is not declared indexable (the "
                    f"indexed_metadata setting: {', '.join(indexed) or 'none'})"
                )
            options = wanted if isinstance(wanted, (list, tuple)) else [wanted]
            tokens = [_meta_token(str(name), v) for v in options]
            if not options or any(t is None for t in tokens):
                raise InvalidFilterError(
                    f"filter metadata {name!r} must be a str, int or bool, or a non-empty "
                    f"list of them: {wanted!r}"
                )
            clauses.append(tuple(dict.fromkeys(t for t in tokens if t is not None)))
    since = _instant("since", values.get("since"))
    until = _instant("until", values.get("until"))
    if since is not None and until is not None and since > until:
        raise InvalidFilterError(f"filter since ({since}) is after until ({until})")
    return Compiled(tuple(clauses), since, until)


def _strings(name: str, value: object, *, one: bool = False) -> list[str]:
    if one and isinstance(value, str):
        return [value]
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        raise InvalidFilterError(
            f"filter {name} must be a list of strings, got {type(value).__name__}"
        )
    items = list(value)
    if not items or not all(isinstance(v, str) for v in items):
        raise InvalidFilterError(f"filter {name} must be a non-empty list of strings: {value!r}")
    return sorted(set(items))


def _instant(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidFilterError(
            f"filter {name} must be a datetime or epoch seconds, got {value!r}"
        )
    return float(value)


def half_life_seconds(value: object) -> float | None:
    """The recency option (seconds or a timedelta, > 0), or InvalidFilterError."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidFilterError(
            f"recency_half_life must be seconds or a timedelta, got {type(value).__name__}"
        )
    if not math.isfinite(value) or value <= 0:
        raise InvalidFilterError(f"recency_half_life must be positive: {value!r}")
    return float(value)
