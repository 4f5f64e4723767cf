"""Fair turns between the writers of one session inside one worker (reject policy).

When writers race on one session, Redis runs their appends in arrival order; the winner
learns first that it won and sends its next append first, so in a tight loop it wins
again and a loser can fail try after try. Here a writer that just lost a race is owed
a turn: this worker's other appends to that session wait while writers are owed, and the
owed go one at a time, in the order they lost, each until its retry is done (a retry is
recognised by the same session object or the same event). A writer keeps its place for
at most :data:`GRACE` seconds after it lost, so one that retries later, or differently,
holds nobody up for long. Writers in other processes are not affected.
"""

from __future__ import annotations

import asyncio
import time

__all__ = ["GRACE", "Turns"]

GRACE = 0.01
"""How long a lost race keeps its writer's priority: the recipe retries at once."""

Writer = tuple[int, str]
"""(id of the session object, event id) of an append."""


class Turns:
    def __init__(self) -> None:
        self._owed: dict[str, dict[Writer, float]] = {}
        """Per session key, the owed writers in the order they lost, each with the time
        its place lapses (infinite while its retry runs)."""
        self._changed: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}
        """Per session key, how many writers are waiting in :meth:`take`."""

    async def take(self, key: str, writer: Writer) -> Writer | None:
        """Wait while writers of session ``key`` are owed a turn, until ``writer`` is the
        first of them or none is left. Returns ``writer``'s place when it is owed the turn
        it now takes: pass it to :meth:`taken` once the append is done."""
        while (owed := self._owed.get(key)) is not None:
            now = time.monotonic()
            for other in [o for o, until in owed.items() if until <= now]:
                del owed[other]
            if not owed:
                self._done(key)
                return None
            first = next(iter(owed))
            if first[0] == writer[0] or first[1] == writer[1]:
                owed[first] = _RUNNING
                return first
            lapses = [until for until in owed.values() if until != _RUNNING]
            changed = self._changed.setdefault(key, asyncio.Event())
            self._waiting[key] = self._waiting.get(key, 0) + 1
            try:
                await asyncio.wait_for(changed.wait(), min(lapses) - now if lapses else None)
            except TimeoutError:
                pass
            finally:
                if self._waiting[key] == 1:
                    del self._waiting[key]
                else:
                    self._waiting[key] -= 1
        return None

    def owed(self, key: str) -> bool:
        """Whether any writer of session ``key`` is owed a turn (else :meth:`take` would
        return None at once)."""
        return key in self._owed

    def waiting(self, key: str, place: Writer | None) -> bool:
        """Whether writers other than the one at ``place`` wait for a turn on ``key``."""
        if key in self._waiting:
            return True
        owed = self._owed.get(key)
        return owed is not None and any(other != place for other in owed)

    def owe(self, key: str, writer: Writer) -> None:
        """``writer`` lost a race on session ``key``: it is owed a turn, after those
        already owed one."""
        self._owed.setdefault(key, {}).setdefault(writer, time.monotonic() + GRACE)

    def taken(self, key: str, place: Writer, *, lost: bool) -> None:
        """The owed writer at ``place`` is done; when it ``lost`` again it keeps its place."""
        owed = self._owed.get(key)
        if owed is None or place not in owed:
            return
        if lost:
            owed[place] = time.monotonic() + GRACE
        else:
            del owed[place]
        self._done(key)

    def _done(self, key: str) -> None:
        """Wake the writers waiting on ``key`` to look again."""
        if not self._owed.get(key):
            self._owed.pop(key, None)
        changed = self._changed.pop(key, None)
        if changed is not None:
            changed.set()


_RUNNING = float("inf")
