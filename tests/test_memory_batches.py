"""How a long memory write is cut into batches and sent: Redis runs one batch's script while
the client makes the next, and every few entries the event loop gets a turn, in which the
call before is sent (Redis starts a call only once it has all of it: a call over 64 KiB
takes several turns) and the worker's other tasks go on. An ingestion's last batch is told
it is last (it removes the session's entries no longer in it) without making one ahead.

On fakeredis, a real Redis (where redis-py sends a large call in turns of the loop, as it
did when the batches did not overlap) and the search backend."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from _backends import backend, pick
from redis_agent_sessions import Event, RedisMemoryService, Session
from redis_agent_sessions.memory import _store, _writes
from test_memory import APP, USER, event, session


def numbered(count: int, word: str = "lemon") -> Session:
    """Session "s" of ``count`` turns (ids ``e<i>``) that all say ``word``."""
    turns: list[Event] = [
        event(f"{word} number{i} of the batch", ts=1_700_000_000 + i, id=f"e{i}")
        for i in range(count)
    ]
    return session("s", *turns)


@pytest.fixture(params=pick("fake", "real", "search"))
async def memory(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[RedisMemoryService]:
    async with backend(request.param, monkeypatch) as client:
        kind = "search" if str(request.param).startswith("search") else "plain"
        yield RedisMemoryService(client, backend=kind)


class Turns:
    """Counts the event loop's turns, and the turn each entry was analysed in."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.analysed: list[int] = []
        real = _writes.iter_turn_docs

        def counted(*args: Any, **kwargs: Any) -> Iterator[Any]:
            for doc in real(*args, **kwargs):
                self.analysed.append(self.count)
                yield doc

        monkeypatch.setattr(_writes, "iter_turn_docs", counted)

    async def tick(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)

    def longest_run(self) -> int:
        """Most entries analysed with no turn of the loop between them."""
        return max(len(list(run)) for _, run in itertools.groupby(self.analysed))


@pytest.mark.parametrize("kind", ["add_session", "add_events"])
async def test_a_long_write_gives_the_event_loop_a_turn_every_few_entries(
    memory: RedisMemoryService, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    turns = Turns(monkeypatch)
    ticker = asyncio.create_task(turns.tick())
    try:
        if kind == "add_session":
            await memory.add_session_to_memory(numbered(1000))
        else:
            events = numbered(1000).events
            await memory.add_events_to_memory(
                app_name=APP, user_id=USER, events=events, session_id="s"
            )
    finally:
        ticker.cancel()
    assert len(turns.analysed) == 1000
    # Before, a whole batch (200 entries) was analysed and encoded in one go, and the call
    # before it sent only after that.
    assert turns.longest_run() <= _store._TURN_EVERY
    found = await memory.search_memory(app_name=APP, user_id=USER, query="lemon", limit=2000)
    assert len(found.memories) == 1000


# Batch edges: batches hold 200 entries, and a write of more starts with one of 32.
@pytest.mark.parametrize("count", [0, 1, 200, 201, 232, 233, 432])
async def test_an_ingestion_ends_with_one_last_batch_at_every_batch_edge(
    memory: RedisMemoryService, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    await memory.add_session_to_memory(numbered(count + 5, "melon"))
    finals: list[int] = []
    real = _store.MemoryStore._put

    async def put(self: Any, write: Any, docs: Any, call: Any) -> list[str]:
        finals.append(call.final)
        return await real(self, write, docs, call)

    monkeypatch.setattr(_store.MemoryStore, "_put", put)
    # The same ids with other words, and 5 entries fewer: those are removed after the last.
    await memory.add_session_to_memory(numbered(count))
    calls = 1 if count <= 200 else 1 + -(-(count - 32) // 200)
    # Then the stale entries are deleted, and a last call confirms none is left.
    assert finals == [0] * (calls - 1) + [1, 1]
    assert (await memory.search_memory(app_name=APP, user_id=USER, query="melon")).memories == []
    found = await memory.search_memory(app_name=APP, user_id=USER, query="lemon", limit=1000)
    assert len(found.memories) == count
