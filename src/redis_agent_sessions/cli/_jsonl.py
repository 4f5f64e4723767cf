"""JSON Lines in, for ``import``: the file read as a stream, one line at a time and never
more than a line's limit of it, and each line's JSON read exactly as written."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import IO, Any

import orjson
import pydantic_core

from redis_agent_sessions.errors import InvalidInputError

__all__ = ["MAX_LINE_BYTES", "count_lines", "dumps", "lines", "loads"]

MAX_LINE_BYTES = 64 << 20
"""The default limit of one line (one session), ``import --max-line-bytes``. Decoding and
sending a line takes a few times its size in memory."""

_CHUNK = 1 << 20

# A JSON integer of 19 digits or more: the shortest that may not fit 64 bits. Anything else
# orjson reads exactly.
_LONG_INTEGER = re.compile(rb"[\[:,]\s*-?\d{19}")


def lines(stream: IO[bytes], limit: int) -> Iterator[tuple[int, list[bytearray]]]:
    """The non-blank lines of ``stream`` with their numbers (from 1), each in a list of one
    for the caller to pop: then only the caller holds the line, and can let it go as soon
    as it is decoded. A line of over ``limit`` bytes (its newline aside) ends the walk with
    InvalidInputError, having read at most a chunk more than ``limit`` of it."""
    number = 0
    while True:
        # Grown in place a chunk at a time: readline() of a whole line would hold it twice
        # while joining its parts.
        line = bytearray()
        while not line.endswith(b"\n"):
            chunk = stream.readline(_CHUNK)
            if not chunk:
                break
            line += chunk
            if len(line) - line.endswith(b"\n") > limit:
                raise LineTooLong(number + 1, limit)
        if not line:
            return
        number += 1
        if not line.isspace():  # strip() would copy it
            box = [line]
            del line
            yield number, box


class LineTooLong(InvalidInputError):
    """A line over the limit: its number, for the message that names file and line."""

    def __init__(self, number: int, limit: int) -> None:
        super().__init__(
            f"the line is longer than {limit:,} bytes (--max-line-bytes); it was not read whole"
        )
        self.number = number


def count_lines(stream: IO[bytes]) -> int:
    """How many non-blank lines ``stream`` has, read a chunk at a time (for the progress
    bar: a line may be far larger than is worth holding)."""
    count = 0
    pending = False  # the line the last chunk ended in has something on it
    for chunk in iter(lambda: stream.read(_CHUNK), b""):
        parts = chunk.split(b"\n")
        for part in parts[:-1]:
            count += pending or bool(part.strip())
            pending = False
        pending = pending or bool(parts[-1].strip())
    return count + pending


def loads(line: bytes | bytearray) -> Any:
    """The JSON value of ``line``, integers exact: orjson reads one beyond 64 bits as a
    float, which would change the value silently, so a line that may hold one is read
    again by the standard library, which keeps it an int."""
    value = orjson.loads(line)
    if _LONG_INTEGER.search(line) is None:
        return value
    del value
    try:
        return json.loads(line)
    except (ValueError, RecursionError) as exc:
        # orjson reads arrays and objects nested up to 1,024 deep; Python's own recursion
        # may end before that.
        raise InvalidInputError(f"cannot read the line's JSON: {exc}") from None


def dumps(value: Any) -> bytes:
    """``value`` as compact JSON, as orjson writes it; one holding an integer beyond 64 bits
    (which only ``loads`` makes) as pydantic writes it, which writes the same bytes
    for everything else."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        pass
    try:
        return pydantic_core.to_json(value)
    except pydantic_core.PydanticSerializationError as exc:
        raise InvalidInputError(f"cannot be written as JSON: {exc}") from None
