"""The verified read cache (``read_cache_bytes``): reads that parse only new events, and
never return stale or foreign data.

The contract suites all run with the cache on as well (conftest.py's ``read_cache``); this
module checks what is particular to it: that a warm read decodes only the new events, that a
caller's changes to what it got never reach the cache, that every kind of change another
process makes between two reads (append, delete, re-create, TTL expiry, a trimmed stream) is
seen, and the memory bound.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from _processes import ADK, run_helper
from _servers import skip_without
from _spies import decoded
from redis_agent_sessions import (
    GetSessionConfig,
    RedisSessionService,
    Session,
    SessionServiceConfig,
)
from redis_agent_sessions.sessions._cache import MEMORY_PER_JSON_BYTE
from test_sessions import delta_event

try:  # the [adk] extra: the tests that use it are marked, and skip without it
    from google.adk.events import Event as AdkEvent
    from google.adk.events import EventActions as AdkActions

    from redis_agent_sessions.adk import RedisSessionService as AdkService
except ImportError:
    pass

APP, USER = "cache_app", "cache_user"
WRITER = Path(__file__).with_name("cache_writer.py")
BIG = 64 << 20


async def get(service: Any, sid: str, **kw: Any) -> Any:
    return await service.get_session(app_name=APP, user_id=USER, session_id=sid, **kw)


async def _session(service: Any, n: int) -> Session:
    s = await service.create_session(app_name=APP, user_id=USER, state={"n": 0})
    for i in range(n):
        await service.append_event(s, delta_event({"n": i + 1, "user:last": i}))
    return s  # type: ignore[no-any-return]


@pytest.fixture
def pair(make_service: Any) -> tuple[RedisSessionService, RedisSessionService]:
    """A caching service, and one without a cache on the same data (another worker)."""
    return make_service(read_cache_bytes=BIG), make_service(read_cache_bytes=0)


@pytest.mark.parametrize("optimistic_reads", [3, 0])
async def test_warm_read_decodes_only_new_events(pair: Any, optimistic_reads: int) -> None:
    cached, other = pair
    cached._engine.layout.optimistic_reads = optimistic_reads  # type: ignore[attr-defined]
    s = await _session(other, 5)
    with decoded(cached, "decode_raws") as counts:
        first = await get(cached, s.id)
        again = await get(cached, s.id)
        await other.append_event(s, delta_event({"n": 6, "app:v": 1}))
        await other.append_event(s, delta_event({"n": 7, "user:last": "x"}))
        third = await get(cached, s.id)
    assert counts == [5, 2]
    assert first == again
    assert third == await get(other, s.id)
    assert third.state == {"n": 7, "user:last": "x", "app:v": 1}
    assert third._revision == 7


async def test_a_callers_changes_never_reach_the_cache(pair: Any) -> None:
    cached, other = pair
    s = await _session(other, 3)
    got = await get(cached, s.id)
    got.events.pop()
    got.events.append(delta_event({"not": "stored"}))
    got.events.reverse()
    got.state["not"] = "stored"
    got.state.pop("n")
    got.last_update_time = 0.0
    assert await get(cached, s.id) == await get(other, s.id)
    # What the caller may do with its copy: append through the service, as usual.
    mine = await get(cached, s.id)
    await cached.append_event(mine, delta_event({"n": 4}))
    assert await get(cached, s.id) == await get(other, s.id) == mine


async def test_cached_events_are_shared_not_copied(pair: Any) -> None:
    """The documented contract: lists and state are the caller's; events are shared."""
    cached, other = pair
    s = await _session(other, 2)
    a, b = await get(cached, s.id), await get(cached, s.id)
    assert a.events is not b.events
    assert a.state is not b.state
    assert all(x is y for x, y in zip(a.events, b.events, strict=True))


async def test_narrowed_reads_bypass_the_cache(pair: Any) -> None:
    cached, other = pair
    s = await _session(other, 4)
    await get(cached, s.id)
    recent = await get(cached, s.id, config=GetSessionConfig(num_recent_events=2))
    assert [e.id for e in recent.events] == [e.id for e in s.events[-2:]]
    assert len(cached._engine.cache) == 1


async def test_deleted_and_recreated_sessions_are_read_anew(pair: Any) -> None:
    cached, other = pair
    s = await _session(other, 3)
    await get(cached, s.id)
    await other.delete_session(app_name=APP, user_id=USER, session_id=s.id)
    assert await get(cached, s.id) is None
    assert len(cached._engine.cache) == 0
    await get(cached, s.id)
    again = await other.create_session(app_name=APP, user_id=USER, session_id=s.id)
    await other.append_event(again, delta_event({"second": "life"}))
    assert await get(cached, s.id) == await get(other, s.id)
    await get(cached, s.id)
    # Deleted and created again with as many events: the first check (the newest event's
    # revision and entry) or the creation time tells them apart.
    await other.delete_session(app_name=APP, user_id=USER, session_id=s.id)
    third = await other.create_session(app_name=APP, user_id=USER, session_id=s.id)
    await other.append_event(third, delta_event({"third": "life"}))
    assert await get(cached, s.id) == await get(other, s.id)


async def test_expired_session_is_gone_from_the_cache(pair: Any, redis_client: Any) -> None:
    cached, other = pair
    s = await other.create_session(app_name=APP, user_id=USER, ttl=60)
    await other.append_event(s, delta_event({"n": 1}))
    assert await get(cached, s.id) is not None
    # The server expires the session, at a time the test picks: with a 1 s TTL, a loaded
    # runner could reach the first read above only after the session had expired.
    keys = other._engine.keys.session(APP, USER, s.id)
    for key in (keys.meta, keys.state, keys.events, keys.event_ids, keys.compactions):
        await redis_client.pexpire(key, 1)
    await asyncio.sleep(0.05)
    assert await get(cached, s.id) is None
    assert len(cached._engine.cache) == 0


async def test_a_trimmed_or_edited_stream_is_read_whole(pair: Any, redis_client: Any) -> None:
    cached, other = pair
    s = await _session(other, 4)
    keys = other._engine.keys.session(APP, USER, s.id)
    await get(cached, s.id)
    await redis_client.xtrim(keys.events, maxlen=3, approximate=False)  # by hand
    with decoded(cached, "decode_raws") as counts:
        got = await get(cached, s.id)
    assert counts == [3]
    assert [e.id for e in got.events] == [e.id for e in s.events[1:]]
    # A stream that no longer holds one entry per revision is served, but never cached.
    assert len(cached._engine.cache) == 0
    await other.append_event(s, delta_event({"n": 5}))
    with decoded(cached, "decode_raws") as counts:
        await get(cached, s.id)
        await get(cached, s.id)
    assert counts == [4, 4]


async def test_the_memory_bound(make_service: Any) -> None:
    probe = make_service(read_cache_bytes=BIG)
    s = await _session(probe, 10)
    await get(probe, s.id)
    one = probe._engine.cache.size
    assert one > 0
    assert one % MEMORY_PER_JSON_BYTE == 0
    service = make_service(read_cache_bytes=2 * one + one // 2)  # room for two
    sessions = [s, *[await _session(probe, 10) for _ in range(2)]]
    for x in sessions:
        await get(service, x.id)
    cache = service._engine.cache
    assert len(cache) == 2
    assert cache.size <= cache.limit
    assert cache.get(service._engine.keys.session(APP, USER, s.id).meta) is None  # oldest out
    with decoded(service, "decode_raws") as counts:
        assert await get(service, sessions[2].id) == await get(probe, sessions[2].id)
        assert await get(service, s.id) == await get(probe, s.id)
    assert counts == [10]  # the first was cached, the second had been evicted
    tiny = make_service(read_cache_bytes=one - 1)  # a session larger than all of it
    await get(tiny, s.id)
    assert len(tiny._engine.cache) == 0


@pytest.mark.adk
async def test_adk_warm_read_decodes_only_new_events(worker_client: Any) -> None:
    cached = AdkService(worker_client, config=SessionServiceConfig(read_cache_bytes=BIG))
    other = AdkService(worker_client)
    s = await other.create_session(app_name=APP, user_id=USER)
    for i in range(4):
        await other.append_event(s, AdkEvent(author="a", actions=AdkActions(state_delta={"i": i})))
    with decoded(cached, "decode_raws") as counts:
        await get(cached, s.id)
        await other.append_event(s, AdkEvent(author="a", actions=AdkActions(state_delta={"j": 1})))
        got = await get(cached, s.id)
    assert counts == [4, 1]
    assert got == await get(other, s.id)
    got.events.clear()
    assert await get(cached, s.id) == await get(other, s.id)


# -- another OS process changes the session between two cached reads ------------------------


@pytest.fixture(params=["real", "cluster"])
async def real_client(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    client: Any
    if request.param == "cluster":
        client = RedisCluster.from_url(skip_without("REDIS_CLUSTER_URL"))
    else:
        client = Redis.from_url(skip_without("REDIS_URL"))
    yield client
    await client.aclose()


@pytest.mark.real
@pytest.mark.parametrize(
    "adk", [False, pytest.param(True, marks=pytest.mark.adk)], ids=["core", "adk"]
)
@pytest.mark.parametrize("action", ["append", "delete", "recreate", "recreate-same"])
async def test_another_process_changes_the_session_between_cached_reads(
    real_client: Any, action: str, adk: bool
) -> None:
    cluster = isinstance(real_client, RedisCluster)
    prefix = f"ras-cache-{uuid.uuid4().hex[:8]}"
    config = SessionServiceConfig(key_prefix=prefix, read_cache_bytes=BIG)
    service: Any = AdkService(real_client, config=config) if adk else None
    service = service or RedisSessionService(real_client, config=config)
    make: Any = (
        (lambda d: AdkEvent(author="a", actions=AdkActions(state_delta=d))) if adk else delta_event
    )
    s = await service.create_session(app_name=APP, user_id=USER, state={"k": 0})
    try:
        for i in range(4):
            await service.append_event(s, make({"k": i, "user:u": i, "app:a": i}))
        before = await get(service, s.id)
        assert await get(service, s.id) == before  # warm
        url = skip_without("REDIS_CLUSTER_URL" if cluster else "REDIS_URL")
        flags = [*(["--cluster"] if cluster else []), *(["--adk"] if adk else [])]
        theirs = await run_helper(
            WRITER, url, prefix, s.id, action, *flags, preload=ADK if adk else ()
        )
        mine = await get(service, s.id)
        if theirs is None:
            assert mine is None
        else:
            assert mine.model_dump(mode="json") == theirs
            assert mine != before
            assert await get(service, s.id) == mine  # and warm again
    finally:
        await service.delete_session(app_name=APP, user_id=USER, session_id=s.id)
        for key in (f"{prefix}:apps",):
            await real_client.delete(key)
        app = service._engine.keys.app_state(APP)
        await real_client.delete(app)


@pytest.mark.adk
async def test_the_adk_extra_caches_by_default_and_zero_turns_it_off() -> None:
    from redis_agent_sessions.adk import RedisSessionService as AdkService

    client = fakeredis.FakeAsyncRedis()
    assert AdkService(client).config.read_cache_bytes == 128 << 20
    assert AdkService(client)._engine.ctx.cache is not None
    off = AdkService(client, config=SessionServiceConfig(read_cache_bytes=0))
    assert off.config.read_cache_bytes == 0
    assert off._engine.ctx.cache is None
    by_url = AdkService(uri="redis://127.0.0.1:1/0?read_cache_bytes=0")
    assert by_url._engine.ctx.cache is None
    await by_url.close()
    assert AdkService(client, config=SessionServiceConfig(ttl_seconds=5)).config.read_cache_bytes
    # The core models' events are the caller's to change: off unless asked for.
    assert RedisSessionService(client).config.read_cache_bytes == 0
    await client.aclose()
