"""The verified read cache: decoded events of sessions this worker read recently.

A cached session is never returned as it is: each read takes the current metadata and
state from Redis, with the events after the cached ones, and the read proves the cache
still describes the stored session (see ``fits``) or is done again in full. What
the cache saves is re-reading and re-parsing the history, which dominates reads of long
conversations.

Events are shared between the cache and every session built from it (copying them
costs as much as parsing them); sessions get lists of their own.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from redis_agent_sessions._redis.codec import meta_field

if TYPE_CHECKING:
    from redis_agent_sessions.sessions._types import Snapshot

__all__ = ["MEMORY_PER_JSON_BYTE", "Cached", "ReadCache", "fits"]

E = TypeVar("E")

MEMORY_PER_JSON_BYTE = 12
"""Python memory of decoded events per byte of their stored JSON, rounded up from what
``benchmarks/reads.py`` measures (about 9 for this package's events, 12 for ADK's)."""


@dataclass(frozen=True, slots=True)
class Cached(Generic[E]):
    """One session's decoded events, as of one revision. Replaced, never changed."""

    create_time: str
    revision: int
    first_id: str
    """Stream id of the first event ('' = none): a stream trimmed at the head differs."""
    last_id: str
    """Stream id of the newest event ('' = none): the next read starts after it."""
    last_event_id: str
    events: list[E]
    size: int
    """Estimated bytes of memory."""


class ReadCache(Generic[E]):
    """Least recently used entries, by session metadata key, within ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: OrderedDict[str, Cached[E]] = OrderedDict()
        self._size = 0

    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Cached[E] | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: str, entry: Cached[E]) -> None:
        old = self._entries.get(key)
        if old is not None:
            # Concurrent reads may finish out of order: keep the newer one.
            if old.create_time == entry.create_time and old.revision > entry.revision:
                return
            self.drop(key)
        if entry.size > self.limit:
            return
        self._entries[key] = entry
        self._size += entry.size
        while self._size > self.limit:
            _, evicted = self._entries.popitem(last=False)
            self._size -= evicted.size

    def drop(self, key: str) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._size -= old.size


def fits(entry: Cached[Any], found: Snapshot) -> bool:
    """Whether ``found``, a read from after ``entry.last_id`` anchored at its newest event,
    extends ``entry`` exactly: the same session (its creation time), its newest cached event
    still where it was (same revision and entry), its first entry unchanged (not trimmed),
    and as many new entries as revisions."""
    expected_anchor = f"{entry.revision} {entry.last_id}" if entry.last_event_id else None
    return (
        meta_field(found.meta, "create_time") == entry.create_time
        and found.anchor == expected_anchor
        and (not entry.first_id or found.first_id == entry.first_id)
        and len(found.entries) == found.stored.revision - entry.revision
    )
