"""Fair turns between the writers of one session inside one worker (reject policy).

When writers race on one session, Redis runs their appends in arrival order; the winner
learns first that it won and sends its next append first, so in a tight loop it wins
again and a loser can fail try after try. Here a writer that just lost a race is owed
a turn: this worker's other appends to that session wait while writers are owed, and the
owed go one at a time, in the order they lost, each until its retry is done. A retry is
recognised by the same session object, the same event, or the same asyncio task: callers
retry the way ADK's users do (read the session again, build a new event, append again) in
the task that lost, and while that task reads the session its place is held.

A writer that waits is in line too, behind those before it. So the writer whose turn
just ended queues behind the waiters instead of sending its next append at once, which
would leave the next waiter's copy stale again and cost it a refused round trip: under
contention this worker's writers of a session go one at a time, one round trip each.

A lost writer keeps its place for at most ``GRACE`` seconds after its refusal or
after its last read of the session, so one that retries later, or not at all, holds
nobody up for long. Only the writer at the head of the line
is woken when it moves. Writers in other processes are not affected.
"""

from __future__ import annotations

import asyncio
import time

__all__ = ["GRACE", "Ref", "Turns", "Writer"]

GRACE = 0.01
"""How long a lost race keeps its writer's priority: the recipe retries at once."""


class Ref:
    """An object, equal only to itself, kept alive while referenced: a copy freed after a
    refusal would otherwise leave its ``id()`` to another writer's new copy."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ref) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


Writer = tuple[Ref, str, object]
"""(session object, event id, asyncio task) of an append."""

_HELD = float("inf")
"""The lapse time of a place whose writer waits in line, or whose append runs."""


class Turns:
    def __init__(self) -> None:
        self._line: dict[str, dict[Writer, float]] = {}
        """Per session key, the writers in line, in order, each with the time its place
        lapses (``_HELD`` while its writer waits or its append runs)."""
        self._wakers: dict[str, dict[Writer, asyncio.Future[None]]] = {}
        """Per session key, the futures the writers waiting in ``take`` sleep on."""

    async def take(self, key: str, writer: Writer) -> Writer | None:
        """Wait in line while writers of session ``key`` are in line, until ``writer`` is
        the first or none is left. Returns ``writer``'s place when it takes a turn in line:
        pass it to ``taken`` once the append is done."""
        queued: Writer | None = None
        try:
            while (line := self._line.get(key)) is not None:
                now = time.monotonic()
                for other in [o for o, until in line.items() if until <= now]:
                    del line[other]
                if not line:
                    del self._line[key]
                    return None
                first = next(iter(line))
                if first == queued or (
                    _same(first, writer) and first not in self._wakers.get(key, ())
                ):
                    line[first] = _HELD
                    queued = None
                    return first
                if queued is None or queued not in line:
                    # A lost writer retrying holds its place while it waits; others join
                    # (again, if another writer of the same session object took theirs).
                    queued = next((o for o in line if _same(o, writer)), writer)
                    line[queued] = _HELD
                lapses = []
                for other, until in line.items():
                    if other == queued:
                        break
                    if until != _HELD:
                        lapses.append(until)
                waker = asyncio.get_running_loop().create_future()
                self._wakers.setdefault(key, {})[queued] = waker
                try:
                    await asyncio.wait_for(waker, min(lapses) - now if lapses else None)
                except asyncio.TimeoutError:  # not yet the builtin TimeoutError on 3.10
                    pass
                finally:
                    wakers = self._wakers.get(key)
                    if wakers is not None and wakers.get(queued) is waker:
                        del wakers[queued]
                        if not wakers:
                            del self._wakers[key]
            return None
        finally:
            if queued is not None:
                # Left the line without a turn (cancelled): let the others move up.
                line = self._line.get(key)
                if line is not None and line.pop(queued, None) is not None:
                    self._moved(key)

    def in_line(self, key: str) -> bool:
        """Whether any writer of session ``key`` is in line (else ``take`` would
        return None at once)."""
        return key in self._line

    def waiting(self, key: str, place: Writer | None) -> bool:
        """Whether writers other than the one at ``place`` are in line for ``key``."""
        line = self._line.get(key)
        return line is not None and any(other != place for other in line)

    def reading(self, key: str, task: object, *, done: bool) -> None:
        """The task ``task`` starts (or is ``done`` with) a read of session ``key``: if it
        lost a race there, its place is held while it reads and for ``GRACE`` after."""
        line = self._line.get(key)
        if line is None:
            return
        for place, until in line.items():
            if place[2] is task:
                if done and until == _HELD and place not in self._wakers.get(key, ()):
                    line[place] = time.monotonic() + GRACE
                    self._moved(key)  # waiters behind it learn when it lapses
                elif not done and until != _HELD:
                    line[place] = _HELD
                return

    def owe(self, key: str, writer: Writer) -> None:
        """``writer`` lost a race on session ``key``: it is owed a turn, after those
        already in line."""
        self._line.setdefault(key, {}).setdefault(writer, time.monotonic() + GRACE)

    def taken(self, key: str, place: Writer, *, lost: bool) -> None:
        """The writer at ``place`` is done; when it ``lost`` again it keeps its place."""
        line = self._line.get(key)
        if line is None or place not in line:
            return
        if lost:
            line[place] = time.monotonic() + GRACE
        else:
            del line[place]
        self._moved(key)

    def _moved(self, key: str) -> None:
        """The head of ``key``'s line changed: wake the first writer waiting in it, to
        take its turn or wait again (until the places before it lapse)."""
        line = self._line.get(key)
        if not line:
            self._line.pop(key, None)
            return
        wakers = self._wakers.get(key)
        if not wakers:
            return
        for other in line:
            waker = wakers.get(other)
            if waker is not None:
                if not waker.done():
                    waker.set_result(None)
                return


def _same(place: Writer, writer: Writer) -> bool:
    """Whether ``writer`` is the one at ``place``: the same session object, event or task."""
    return place[0] == writer[0] or place[1] == writer[1] or place[2] is writer[2]
