"""Turning Python values into what the scripts store, and stored bytes back into values."""

from __future__ import annotations

import gc
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import orjson

from redis_agent_sessions.config import MAX_TTL_SECONDS
from redis_agent_sessions.errors import CorruptDataError, InvalidInputError

__all__ = [
    "MAX_TIME",
    "MIN_TIME",
    "check_id",
    "check_sequence",
    "check_time",
    "decode_hash",
    "encode_fields",
    "gc_paused",
    "meta_field",
    "session_ttl",
    "text",
]

_MAX_ID_LENGTH = 1024

MIN_TIME = -62135596800.0
"""0001-01-01T00:00:00Z: with ``MAX_TIME``, the times a ``datetime`` can show. A time
outside them would be stored, and then break every listing that shows it."""
MAX_TIME = 253402300799.0
"""9999-12-31T23:59:59Z. Its milliseconds (a stream id's first part) are exact in the
scripts' floating point, where 2e16 s would not even fit a stream id."""


def text(value: bytes | str) -> str:
    """A reply item as text, whether or not the client decodes responses."""
    return value.decode() if isinstance(value, bytes) else value


def meta_field(meta: dict[Any, Any], name: str) -> str | None:
    """A field of a hash as HGETALL returned it (bytes or text keys), as text; None if absent."""
    value = meta.get(name, meta.get(name.encode()))
    return None if value is None else text(value)


def stream_id(value: str) -> tuple[int, int]:
    """A stream id (``<ms>-<seq>``, or ``<ms>``) as numbers that compare in stream order."""
    ms, _, seq = value.partition("-")
    return int(ms), int(seq or 0)


def event_ms(timestamp: float) -> int:
    """The millisecond an event time gives its stream id (append_event.lua's ARGV[6])."""
    return max(0, math.floor(timestamp * 1000))


def _encodable(value: str) -> bool:
    """Whether ``value`` has a UTF-8 encoding (no lone surrogate such as ``"\\ud800"``).

    redis-py encodes every str argument as strict UTF-8 only while sending the command,
    where a lone surrogate raises a bare UnicodeEncodeError; checking first turns that into
    InvalidInputError before anything is sent.
    """
    if value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_id(name: str, value: object) -> str:
    """``value`` if it is a usable identifier, else InvalidInputError."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, got {type(value).__name__}")
    if not value or value != value.strip():
        raise InvalidInputError(f"{name} must be non-empty without surrounding spaces: {value!r}")
    if len(value) > _MAX_ID_LENGTH:
        raise InvalidInputError(f"{name} is longer than {_MAX_ID_LENGTH} characters")
    if not _encodable(value):
        raise InvalidInputError(
            f"{name} has a lone surrogate, which UTF-8 cannot encode: {value!r}"
        )
    return value


def check_time(name: str, value: object) -> float:
    """``value`` (epoch seconds) as a float if it is a number between ``MIN_TIME`` and
    ``MAX_TIME``, else InvalidInputError."""
    # Compared, not math.isfinite'd: that raises OverflowError for an int beyond a float's
    # range, and NaN fails the comparison as it should.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(f"{name} must be a number of epoch seconds, got {value!r}")
    if not MIN_TIME <= value <= MAX_TIME:
        raise InvalidInputError(
            f"{name} must be epoch seconds from {MIN_TIME:.0f} to {MAX_TIME:.0f} "
            f"(years 1 to 9999), got {value!r}"
        )
    return float(value)


def session_ttl(value: object) -> int | None:
    """A per-session TTL in whole seconds (0 = never expires, at most
    ``MAX_TTL_SECONDS``), or None for the default.

    Takes an int, a whole float, a ``timedelta``, or text: ``"3600"`` or the protobuf
    duration ``"3600s"`` that ADK's REST clients send for VertexAiSessionService.
    """
    if value is None:
        return None
    seconds: object = value
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str):
        digits = value.strip().removesuffix("s")
        seconds = None
        if digits.isascii() and digits.isdigit():
            # Over 20 digits is over the limit anyway, and int() raises ValueError for text
            # of over 4,300.
            seconds = int(digits) if len(digits) <= 20 else MAX_TTL_SECONDS + 1
    if isinstance(seconds, float) and seconds.is_integer():
        seconds = int(seconds)
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
        raise InvalidInputError(
            f"ttl must be whole seconds >= 0 (an int, a timedelta, or text like '3600s'), "
            f"got {value!r}"
        )
    if seconds > MAX_TTL_SECONDS:
        raise InvalidInputError(
            f"ttl must be at most {MAX_TTL_SECONDS} seconds (100 years; 0 never expires), "
            f"got {value!r}"
        )
    return seconds


def check_sequence(name: str, value: object) -> None:
    """InvalidInputError unless ``value`` is a list-like sequence of items.

    Iterating a str would yield characters, and a generator could be half consumed before a
    bad item is found; both are refused up front.
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidInputError(f"{name} must be a sequence, got {type(value).__name__}")


MAX_DEPTH = 100
"""Most levels of lists and objects one state value (or memory metadata) may nest, its
outermost one included. Every reader takes it: an event holds a state value 4 levels down,
and pydantic's JSON parser, which reads events back, stops at 201 levels."""


def _check_json(value: object, where: str, depth: int = 0) -> None:
    # orjson would quietly write NaN as null and datetimes as strings; state must
    # read back exactly as written, so only plain JSON types get through.
    if value is None or isinstance(value, (bool, int)):
        return
    if isinstance(value, str):
        # orjson refuses it as well, but with a TypeError that callers encoding memory
        # metadata do not catch; the check names the value instead. (ASCII is asked
        # first, in place: this runs for every state value written.)
        if not value.isascii() and not _encodable(value):
            raise InvalidInputError(f"state value {where} has a lone surrogate: {value!r}")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(f"state value {where} is {value}, which JSON cannot hold")
        return
    if isinstance(value, (list, tuple, dict)) and depth >= MAX_DEPTH:
        # Checked on the way down, so no input reaches Python's recursion limit.
        raise InvalidInputError(
            f"state value {where} nests lists and objects more than {MAX_DEPTH} levels deep"
        )
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_json(item, where, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInputError(f"state value {where} has a non-string key {key!r}")
            if not key.isascii() and not _encodable(key):
                raise InvalidInputError(f"state value {where} has a lone surrogate in key {key!r}")
            _check_json(item, where, depth + 1)
        return
    raise InvalidInputError(f"state value {where} is not JSON-serializable: {type(value).__name__}")


def encode_fields(values: Mapping[str, Any], scope: str) -> list[bytes | str]:
    """``[field, json, field, json, ...]`` for HSET, checking every value first."""
    flat: list[bytes | str] = []
    for key, value in values.items():
        if not isinstance(key, str):
            raise InvalidInputError(f"state keys must be strings, got {key!r} in {scope} scope")
        if not key.isascii() and not _encodable(key):
            # The key becomes a hash field: HSET would fail inside redis-py, not in here.
            raise InvalidInputError(f"state key {key!r} ({scope} scope) has a lone surrogate")
        # ASCII text, ints and None are what most deltas hold: taken as they are, without
        # the walk (or its message, made for every value it checks).
        kind = type(value)
        if not (kind is int or value is None or (kind is str and value.isascii())):
            _check_json(value, f"{key!r} ({scope} scope)")
        try:
            encoded = orjson.dumps(value)
        except orjson.JSONEncodeError as exc:
            raise InvalidInputError(f"state value {key!r} ({scope} scope): {exc}") from exc
        flat += (key, encoded)
    return flat


def decode_hash(key: str, raw: Mapping[Any, Any] | Iterable[Any]) -> dict[str, Any]:
    """A state hash (HGETALL reply, as a dict or a flat list) as field -> value."""
    items: Iterable[tuple[Any, Any]]
    if isinstance(raw, Mapping):
        items = raw.items()
    else:
        flat = list(raw)
        items = zip(flat[::2], flat[1::2], strict=True)
    out: dict[str, Any] = {}
    for field, value in items:
        name = text(field)
        try:
            out[name] = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise CorruptDataError(key, f"field {name!r} is not JSON: {exc}") from exc
    return out


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector around a large batch decode.

    Decoding 1,000 events allocates some 10,000 acyclic objects, which triggers several
    collections that traverse everything the process holds: in benchmarks/append/ that cost
    ~0.6 ms at the median and up to 15 ms at p90 per 1,000-event read. Reference counting
    still frees everything; the previous GC state is restored.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
