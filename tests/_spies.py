"""Counting what a service's engine parses, to prove a read's cost follows the new events."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def decoded(service: Any, method: str = "decode") -> Iterator[list[int]]:
    """The number of events each call of the engine's reads' ``method`` (``decode``: stream entries;
    ``decode_raws``: stored JSON) parsed, while inside."""
    engine = service._engine.reads
    counts: list[int] = []
    original = getattr(engine, method)

    def counting(key: str, items: list[Any], *more: Any) -> Any:
        counts.append(len(items))
        return original(key, items, *more)

    setattr(engine, method, counting)
    try:
        yield counts
    finally:
        delattr(engine, method)
