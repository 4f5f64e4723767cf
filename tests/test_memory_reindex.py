"""Moving a memory store written by 0.1 to the ranking: its entries are found by the old rule
until `reindex` has run, after the ranked ones; `reindex` is resumable, `--dry-run` writes
nothing, and afterwards the store finds what one written fresh finds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis

from _cli import Cli
from _legacy import make_v1_index, write_v1
from _servers import skip_without
from redis_agent_sessions import RedisMemoryService, RedisSessionService, SessionServiceConfig
from redis_agent_sessions.keys import KeySpace
from test_memory import event, session

APP, USER = "app", "u"
KEYS = KeySpace("ras")
# Two sessions of three turns, as (id, text, ts, session, author).
TURNS = [
    ("a1", "Which scarf should I wear to the wedding?", 1.0, "s1", "user"),
    ("a2", "Yes, the blue one!", 2.0, "s1", "model"),
    ("a3", "I booked two flights to Lisbon", 3.0, "s1", "user"),
    ("b1", "My sister adopted a puppy", 4.0, "s2", "user"),
    ("b2", "The puppy is called Biscuit", 5.0, "s2", "user"),
    ("b3", "私は東京に住んでいます", 6.0, "s2", "user"),
]
QUERIES = ["wedding scarf", "book a flight", "puppy name", "東京", "blue", "Lisbon trip"]


@pytest.fixture(
    params=[
        pytest.param("fake", marks=pytest.mark.fake),
        pytest.param("real", marks=pytest.mark.real),
        pytest.param("search", marks=[pytest.mark.real, pytest.mark.search]),
    ]
)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, bool]]:
    """A client whose db holds the 0.1 store, and whether it is the search backend."""
    if request.param == "fake":
        client: Any = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    else:
        url = skip_without("REDIS_URL" if request.param == "real" else "REDIS_SEARCH_URL")
        client = Redis.from_url(url)
        await client.flushdb()
    search = request.param == "search"
    await client.set(KEYS.memory_backend(), "search" if search else "plain")
    if search:
        await make_v1_index(client, KEYS)
    await write_v1(client, KEYS, APP, USER, TURNS, postings=not search)
    yield client, search
    await client.flushdb()
    await client.aclose()


async def ids(memory: RedisMemoryService, query: str, user: str = USER) -> list[str]:
    found = await memory.search_memory(app_name=APP, user_id=user, query=query)
    return [m.id or "" for m in found.memories]


async def fresh_ranking(client: Any, search: bool) -> dict[str, list[str]]:
    """What a store written by this version ranks, for the same turns (another user)."""
    memory = RedisMemoryService(client, backend="search" if search else "plain")
    for sid in ("s1", "s2"):
        turns = [t for t in TURNS if t[3] == sid]
        await memory.add_session_to_memory(
            session(
                sid,
                *(event(t[1], ts=t[2], id=t[0], author=t[4]) for t in turns),
                app=APP,
                user="fresh",
            )
        )
    return {q: await ids(memory, q, "fresh") for q in QUERIES}


async def snapshot(client: Any) -> dict[bytes, Any]:
    out = {}
    for key in sorted([k async for k in client.scan_iter("ras:mem:*")]):
        kind = await client.type(key)
        if kind == b"hash":
            out[key] = await client.hgetall(key)
        elif kind == b"zset":
            out[key] = await client.zrange(key, 0, -1, withscores=True)
        elif kind == b"set":
            out[key] = await client.smembers(key)
        else:
            out[key] = await client.get(key)
    return out


async def test_old_entries_found_until_reindexed(store: tuple[Any, bool]) -> None:
    client, search = store
    memory = RedisMemoryService(client)
    # Found by 0.1's rule (any query word, newest first): a query of more than six words
    # and a CJK one take its other paths on RediSearch.
    assert await ids(memory, "puppy") == ["b2", "b1"]
    assert await ids(memory, "東京") == ["b3"]
    assert await ids(memory, "alpha bravo charlie delta echo foxtrot puppy") == ["b2", "b1"]
    # A new entry is ranked, and comes before the old ones.
    await memory.add_session_to_memory(
        session("s3", event("puppy training", ts=9, id="c1"), app=APP, user=USER)
    )
    assert await ids(memory, "puppy") == ["c1", "b2", "b1"]

    before = await snapshot(client)
    plan = await memory.reindex(dry_run=True)
    assert (plan.users, plan.entries, plan.current, plan.reindexed) == (1, 7, 1, 6)
    assert await snapshot(client) == before

    # Stopped after the first page, then run again: it finishes what is left.
    pages: list[int] = []

    def stop(done: int, total: int) -> None:
        pages.append(done)
        raise KeyboardInterrupt

    from redis_agent_sessions.memory import _reindex

    _reindex._PAGE = 2  # type: ignore[attr-defined]
    try:
        with pytest.raises(KeyboardInterrupt):
            await memory.reindex(on_progress=stop)
        done = await memory.reindex()
    finally:
        _reindex._PAGE = 500  # type: ignore[attr-defined]
    assert 0 < done.reindexed < 6
    assert done.current + done.reindexed == 7
    again = await memory.reindex(dry_run=True)
    assert (again.current, again.reindexed) == (7, 0)

    # No 0.1 index is left, and it finds what a fresh store finds. (Weights are computed
    # against the average entry length when written, so orders may differ among near ties.)
    assert [k async for k in client.scan_iter("ras:mem:{*}:word:*")] == []
    stats = await client.hget(KEYS.memory_stats(APP, USER), "n")
    assert int(stats) == 7
    await memory.delete_memory(app_name=APP, user_id=USER, memory_id="c1")
    fresh = await fresh_ranking(client, search)
    for query in QUERIES:
        ours = await ids(memory, query)
        assert sorted(ours) == sorted(fresh[query]), query
        assert ours[:1] == fresh[query][:1], query


@pytest.mark.cli
@pytest.mark.real
async def test_reindex_command(cli: Cli) -> None:
    client: Any = cli.client()
    keys = KeySpace(cli.prefix)
    await client.set(keys.memory_backend(), "plain")
    await write_v1(client, keys, APP, USER, TURNS, postings=True)
    try:
        config = SessionServiceConfig(key_prefix=cli.prefix)
        await RedisSessionService(client, config=config).create_session(app_name=APP, user_id=USER)
        (row,) = cli.json("stats")["apps"]
        assert (row["memory_entries"], row["memory_to_reindex"]) == (6, 6)
        assert "(6 to reindex)" in cli.run("stats").stdout
        plan = cli.json("reindex", "--dry-run")
        assert plan == {"dry_run": True, "users": 1, "entries": 6, "current": 0, "reindexed": 6}
        done = cli.run("reindex", "--app", APP)
        assert done.returncode == 0, done.stderr
        assert "6 reindexed" in done.stderr
        assert cli.json("reindex")["current"] == 6
        (row,) = cli.json("stats")["apps"]
        assert row["memory_to_reindex"] == 0
        assert cli.run("reindex", "--app", "nobody").returncode != 0
        memory = RedisMemoryService(client, config=config)
        assert (await ids(memory, "wedding scarf"))[:2] == ["a1", "a2"]
    finally:
        await client.delete(*[k async for k in client.scan_iter(f"{cli.prefix}:*")])
        await client.aclose()
