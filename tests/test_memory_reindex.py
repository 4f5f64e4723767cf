"""`reindex` after a change of the analysis: entries indexed by another version are found by
their old terms until it has run, then as a store written fresh finds them; it is
resumable, and `--dry-run` writes nothing.

The earlier analysis is played by this one without stemming, recorded as version 1: a
query's "booked" is the term ``book``, which such an entry does not have.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from _backends import backend, pick
from _cli import Cli
from _snapshot import snapshot
from redis_agent_sessions import RedisMemoryService, RedisSessionService, SessionServiceConfig
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory import _analysis, _reindex
from test_memory import event, session

APP, USER = "app", "u"
KEYS = KeySpace("ras")
# Two sessions of three turns, as (id, text, ts, session, author).
TURNS = [
    ("a1", "Which scarf should I wear to the wedding?", 1.0, "s1", "user"),
    ("a2", "Yes, the blue one!", 2.0, "s1", "model"),
    ("a3", "I booked two flights to Lisbon", 3.0, "s1", "user"),
    ("b1", "My sister adopted a puppy", 4.0, "s2", "user"),
    ("b2", "The puppies are called Biscuit and Crumb", 5.0, "s2", "user"),
    ("b3", "私は東京に住んでいます", 6.0, "s2", "user"),
]
QUERIES = ["wedding scarf", "book a flight", "puppy name", "東京", "blue", "Lisbon trip"]


@pytest.fixture
def earlier(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Entries written until ``undo()`` are analysed by the "earlier" version (no
    stemming, recorded as 1)."""
    with monkeypatch.context() as patch:
        patch.setattr(_analysis, "_stem", lambda token: token)
        patch.setattr(_analysis, "ANALYSIS", 1)
        yield patch


@pytest.fixture(params=pick("fake", "real", "search"))
async def client(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Any, bool]]:
    """An empty database, and whether it is the search backend's."""
    async with backend(request.param, monkeypatch) as redis:
        yield redis, request.param == "search"


async def write(memory: RedisMemoryService, user: str) -> None:
    for sid in ("s1", "s2"):
        turns = [t for t in TURNS if t[3] == sid]
        await memory.add_session_to_memory(
            session(
                sid,
                *(event(t[1], ts=t[2], id=t[0], author=t[4]) for t in turns),
                app=APP,
                user=user,
            )
        )


async def ids(memory: RedisMemoryService, query: str, user: str = USER) -> list[str]:
    found = await memory.search_memory(app_name=APP, user_id=user, query=query)
    return [m.id or "" for m in found.memories]


async def test_entries_of_another_analysis_are_analysed_again(
    client: tuple[Any, bool], earlier: pytest.MonkeyPatch
) -> None:
    redis, search = client
    memory = RedisMemoryService(redis, backend="search" if search else "plain")
    await write(memory, USER)
    earlier.undo()
    # Found by the terms they were indexed with: "booked" and "puppies" were not stemmed
    # then, so neither "booked" nor "puppy" (the term ``puppi``) finds them.
    assert await ids(memory, "booked") == []
    assert await ids(memory, "puppy") == []
    # A new entry is analysed as this version does.
    await memory.add_session_to_memory(
        session("s3", event("puppies in training", ts=9, id="c1"), app=APP, user=USER)
    )
    assert await ids(memory, "puppy") == ["c1"]

    before = await snapshot(redis)
    plan = await memory.reindex(dry_run=True)
    assert (plan.users, plan.entries, plan.current, plan.reindexed) == (1, 7, 1, 6)
    assert await snapshot(redis) == before

    # Stopped after the first page, then run again: it finishes what is left.
    def stop(done: int, total: int) -> None:
        raise KeyboardInterrupt

    earlier.setattr(_reindex, "_PAGE", 2)
    with pytest.raises(KeyboardInterrupt):
        await memory.reindex(on_progress=stop)
    done = await memory.reindex()
    assert 0 < done.reindexed < 6
    assert done.current + done.reindexed == 7
    again = await memory.reindex(dry_run=True)
    assert (again.current, again.reindexed) == (7, 0)

    # It finds what a store written fresh finds. (Weights are computed against the average
    # entry length when written, so orders may differ among near ties.)
    assert (await ids(memory, "booked"))[:1] == ["a3"]
    assert int(await redis.hget(KEYS.memory_stats(APP, USER), "n")) == 7
    await memory.delete_memory(app_name=APP, user_id=USER, memory_id="c1")
    await write(memory, "fresh")
    for query in QUERIES:
        ours, fresh = await ids(memory, query), await ids(memory, query, "fresh")
        assert sorted(ours) == sorted(fresh), query
        assert ours[:1] == fresh[:1], query


@pytest.mark.cli
@pytest.mark.real
async def test_reindex_command(cli: Cli, earlier: pytest.MonkeyPatch) -> None:
    client: Any = cli.client()
    config = SessionServiceConfig(key_prefix=cli.prefix)
    memory = RedisMemoryService(client, config=config, backend="plain")
    try:
        await write(memory, USER)
        earlier.undo()
        await RedisSessionService(client, config=config).create_session(app_name=APP, user_id=USER)
        (row,) = cli.json("stats")["apps"]
        assert row["memory_entries"] == 6
        plan = cli.json("reindex", "--dry-run")
        assert plan == {"dry_run": True, "users": 1, "entries": 6, "current": 0, "reindexed": 6}
        done = cli.run("reindex", "--app", APP)
        assert done.returncode == 0, done.stderr
        assert "6 reindexed" in done.stderr
        assert cli.json("reindex")["current"] == 6
        assert cli.run("reindex", "--app", "nobody").returncode != 0
        assert (await ids(memory, "booked flights"))[:1] == ["a3"]
    finally:
        await client.delete(*[k async for k in client.scan_iter(f"{cli.prefix}:*")])
        await client.aclose()
