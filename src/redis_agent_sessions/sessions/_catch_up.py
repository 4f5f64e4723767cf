"""What appends' replies carried about a session's newer revisions, for refreshes.

Under the reject policy a writer whose copy is behind gets StaleSessionError, refreshes
and retries. The refusal already read, in the same atomic step, what that refresh would
read (append_event.lua's catch-up), so the refresh costs no round trip and the retry one,
as much as the winner's next append: without that, the writer that lost a race needs two
round trips to the winner's one and keeps losing. When writers of this worker wait their
turn (``._turns``), an append's own reply carries the catch-up for the copies at the
revision it replaced, so theirs need no round trip either.

Each catch-up says that a copy position (session, revision, newest event id) was
superseded, and what a copy there lacks. It is kept for ``SECONDS`` only: a refresh
later than that reads, so no refresh returns a view older than that. Nor one older than
what this worker has seen since: a refresh whose catch-ups end below the newest revision
this worker wrote or read of the session reads instead. Keys are positions, not copy
objects: every copy at one position lacks exactly the same events.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from redis_agent_sessions.sessions._types import Snapshot

__all__ = ["SECONDS", "CatchUps", "Position"]

SECONDS = 0.1
"""How long a catch-up may serve a refresh: the retry recipe refreshes at once."""

Position = tuple[str, int, str]
"""(session meta key, revision, newest event id or '')."""


class CatchUps:
    """Recent catch-ups, by the copy position they start from."""

    def __init__(self, limit: int = 256) -> None:
        self._limit = limit
        self._held: OrderedDict[Position, tuple[float, Snapshot]] = OrderedDict()
        self._newest: dict[str, int] = {}
        """Per session with catch-ups held: the newest revision this worker has seen."""

    def put(self, position: Position, found: Snapshot) -> None:
        self._held[position] = (time.monotonic() + SECONDS, found)
        self._held.move_to_end(position)
        self.seen(position[0], found.stored.revision, hold=True)
        while len(self._held) > self._limit:
            self._held.popitem(last=False)
        if len(self._newest) > 2 * self._limit:
            held = {key for key, _, _ in self._held}
            self._newest = {k: r for k, r in self._newest.items() if k in held}

    def get(self, position: Position) -> Snapshot | None:
        """The catch-up for a copy at ``position``, if one is recent enough."""
        held = self._held.get(position)
        if held is None:
            return None
        until, found = held
        if time.monotonic() < until:
            return found
        del self._held[position]
        return None

    def seen(self, key: str, revision: int, *, hold: bool = False) -> None:
        """This worker wrote or read revision ``revision`` of session ``key``."""
        if hold or key in self._newest:
            self._newest[key] = max(revision, self._newest.get(key, revision))

    def newest(self, key: str, revision: int) -> bool:
        """Whether ``revision`` of session ``key`` is the newest this worker has seen."""
        return self._newest.get(key, revision) <= revision

    def drop(self, key: str) -> None:
        """Session ``key`` was deleted: what was held of it describes nothing."""
        for position in [p for p in self._held if p[0] == key]:
            del self._held[position]
        self._newest.pop(key, None)

    def __len__(self) -> int:
        return len(self._held)
