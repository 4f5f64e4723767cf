"""Write concern: ``replicas`` (WAIT) and ``aof`` (WAITAOF) against real replicas.

scripts/redis-servers.sh gives REDIS_URL (Redis 7) a replica at REDIS_REPLICA_URL,
REDIS_SEARCH_URL (Redis 8.2, appendonly yes) one at REDIS_SEARCH_REPLICA_URL (appendonly
yes too), and REDIS_VALKEY_URL (Valkey 9.1, appendonly yes) one at REDIS_VALKEY_REPLICA_URL.
What a write returned is then read back from the replica with no waiting: the
write concern is what makes it already be there.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from pydantic import ValidationError
from redis.asyncio import Redis

from _acl import acl_user, readme_rules
from _backends import backend
from _servers import skip_without
from _snapshot import snapshot
from redis_agent_sessions import (
    Event,
    EventActions,
    PermissionDeniedError,
    RedisSessionService,
    SessionServiceConfig,
    WriteConcernError,
)

APP, USER = "wc_app", "ann"


@asynccontextmanager
async def _pair(primary_var: str, replica_var: str) -> AsyncIterator[tuple[Redis, Redis]]:
    primary = Redis.from_url(skip_without(primary_var))
    replica = Redis.from_url(skip_without(replica_var))
    await primary.flushdb()
    await primary.wait(1, 5000)  # the replica is flushed too before the test starts
    try:
        yield primary, replica
    finally:
        await primary.flushdb()
        await primary.aclose()
        await replica.aclose()


@pytest.fixture
async def r7() -> AsyncIterator[tuple[Redis, Redis]]:
    async with _pair("REDIS_URL", "REDIS_REPLICA_URL") as pair:
        yield pair


@pytest.fixture
async def r8() -> AsyncIterator[tuple[Redis, Redis]]:
    async with _pair("REDIS_SEARCH_URL", "REDIS_SEARCH_REPLICA_URL") as pair:
        yield pair


@pytest.fixture
async def valkey() -> AsyncIterator[tuple[Redis, Redis]]:
    async with _pair("REDIS_VALKEY_URL", "REDIS_VALKEY_REPLICA_URL") as pair:
        yield pair


PAIRS = {
    "r7": ("REDIS_URL", "REDIS_REPLICA_URL"),
    "r8": ("REDIS_SEARCH_URL", "REDIS_SEARCH_REPLICA_URL"),
    "valkey": ("REDIS_VALKEY_URL", "REDIS_VALKEY_REPLICA_URL"),
}


@pytest.fixture
async def pair(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Redis, Redis]]:
    """The primary and replica named by the test's parameter (a key of PAIRS)."""
    async with _pair(*PAIRS[request.param]) as both:
        yield both


def service(client: Any, **config: Any) -> RedisSessionService:
    # Correctness, not latency: a write that must be confirmed gets 10 s (an fsync on a
    # shared CI disk can take longer than the default 1 s); tests of a shortfall pass theirs.
    config.setdefault("write_timeout_ms", 10_000)
    return RedisSessionService(client, config=SessionServiceConfig(**config))


def delta(**values: Any) -> Event:
    return Event(actions=EventActions(state_delta=values))


async def check_every_write_is_on_the_replica(writer: RedisSessionService, replica: Redis) -> None:
    reader = RedisSessionService(replica)  # reads only: a replica refuses writes
    s = await writer.create_session(
        app_name=APP, user_id=USER, session_id="s", state={"k": 0, "user:u": 0, "app:a": 0}
    )
    assert await reader.get_session(app_name=APP, user_id=USER, session_id="s") == s
    for i in range(1, 20):
        await writer.append_event(s, delta(k=i, **{"user:u": i, "app:a": i}))
        seen = await reader.get_session(app_name=APP, user_id=USER, session_id="s")
        assert seen == s, i
    await writer.delete_session(app_name=APP, user_id=USER, session_id="s")
    assert await reader.get_session(app_name=APP, user_id=USER, session_id="s") is None


@pytest.mark.real
async def test_replicas_acknowledged_writes_are_on_the_replica(r7: tuple[Redis, Redis]) -> None:
    primary, replica = r7
    await check_every_write_is_on_the_replica(service(primary, write_concern="replicas"), replica)


@pytest.mark.real
@pytest.mark.search
async def test_aof_acknowledged_writes_are_on_the_replica(r8: tuple[Redis, Redis]) -> None:
    primary, replica = r8
    writer = service(primary, write_concern="aof", min_replicas=1)
    await check_every_write_is_on_the_replica(writer, replica)
    assert await primary.config_get("appendonly") == {"appendonly": "yes"}


@pytest.mark.real
@pytest.mark.valkey
@pytest.mark.parametrize("mode", ["replicas", "aof"])
async def test_valkey_acknowledged_writes_are_on_the_replica(
    valkey: tuple[Redis, Redis], mode: str
) -> None:
    primary, replica = valkey
    writer = service(primary, write_concern=mode, min_replicas=1)
    await check_every_write_is_on_the_replica(writer, replica)


@pytest.mark.real
@pytest.mark.parametrize(
    ("pair", "mode"),
    [
        ("r7", "replicas"),
        ("r8", "aof"),
        *[pytest.param("valkey", m, marks=pytest.mark.valkey) for m in ("replicas", "aof")],
    ],
    indirect=["pair"],
)
async def test_too_few_replicas_raise_after_the_write(pair: tuple[Redis, Redis], mode: str) -> None:
    """Two replicas asked for, one there: WriteConcernError once the wait times out, with the
    write on the primary; the caller's copy is left as before, and its retry (a duplicate)
    waits again, then takes the event once enough replicas confirm."""
    primary, _ = pair
    strict = service(primary, write_concern=mode, min_replicas=2, write_timeout_ms=50)
    s = await service(primary).create_session(app_name=APP, user_id=USER, session_id="s")
    event = delta(k=1, **{"app:a": 1})
    with pytest.raises(WriteConcernError, match="landed on the primary") as caught:
        await strict.append_event(s, event)
    assert caught.value.written
    assert re.search(r"[01] of 2 replicas", str(caught.value))
    assert s.events == []
    assert s.state == {}
    stored = await strict.get_session(app_name=APP, user_id=USER, session_id="s")
    assert stored is not None
    assert [e.id for e in stored.events] == [event.id]
    with pytest.raises(WriteConcernError):
        await strict.append_event(s, event)
    enough = service(primary, write_concern=mode, min_replicas=1)
    await enough.append_event(s, event)
    assert [e.id for e in s.events] == [event.id]
    again = await enough.get_session(app_name=APP, user_id=USER, session_id="s")
    assert again == s
    with pytest.raises(WriteConcernError):
        await strict.create_session(app_name=APP, user_id=USER, session_id="t")
    with pytest.raises(WriteConcernError):
        await strict.delete_session(app_name=APP, user_id=USER, session_id="t")


@pytest.mark.real
async def test_aof_on_a_server_without_waitaof_writes_nothing(r7: tuple[Redis, Redis]) -> None:
    primary, _ = r7
    with pytest.raises(WriteConcernError, match="WAITAOF") as caught:
        await service(primary, write_concern="aof").create_session(app_name=APP, user_id=USER)
    assert not caught.value.written
    assert await snapshot(primary) == {}


@pytest.mark.fake
async def test_a_server_without_wait_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    async with backend("fake", monkeypatch) as client:
        writer = service(client, write_concern="replicas")
        with pytest.raises(WriteConcernError, match="WAIT") as caught:
            await writer.create_session(app_name=APP, user_id=USER)
        assert not caught.value.written
        assert await snapshot(client) == {}
        # Reads need no confirmation.
        assert await writer.get_session(app_name=APP, user_id=USER, session_id="s") is None


def test_replicas_needs_a_replica_to_wait_for() -> None:
    with pytest.raises(ValidationError, match="min_replicas"):
        SessionServiceConfig(write_concern="replicas", min_replicas=0)
    SessionServiceConfig(write_concern="aof", min_replicas=0)  # the primary's own fsync


@pytest.mark.real
@pytest.mark.acl
async def test_the_readme_acl_line_for_write_concerns(
    r7: tuple[Redis, Redis], r8: tuple[Redis, Redis]
) -> None:
    """The documented extra lines (+wait, +waitaof) are what each write concern needs: with
    it the worker writes; without it the first write is refused, naming the command, and
    nothing is written."""
    for (primary, _), mode in ((r7, "replicas"), (r8, "aof")):
        async with acl_user(primary, concern=mode) as worker:
            writer = service(worker, write_concern=mode)
            s = await writer.create_session(app_name=APP, user_id=USER, session_id="s")
            await writer.append_event(s, delta(k=1))
        granted = readme_rules()[mode]
        assert granted == (["+wait"] if mode == "replicas" else ["+wait", "+waitaof"])
        for command in granted:
            async with acl_user(primary, concern=mode, without=command[1:]) as worker:
                before = await snapshot(primary)
                with pytest.raises(PermissionDeniedError, match=command[1:].upper()):
                    await service(worker, write_concern=mode).append_event(s, delta(k=2))
                assert await snapshot(primary) == before


@pytest.mark.real
@pytest.mark.cluster
async def test_cluster_waits_on_both_steps_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test cluster has no replicas: every step's WAIT falls short, the user's step and
    (for an app: key) the app's step alike, and both writes are stored."""
    async with backend("cluster", monkeypatch) as cluster:
        writer = service(cluster, write_concern="replicas", write_timeout_ms=20)
        s = await service(cluster).create_session(app_name=APP, user_id=USER, session_id="s")
        with pytest.raises(WriteConcernError, match="0 of 1 replicas") as caught:
            await writer.append_event(s, delta(k=1, **{"app:a": 1}))
        assert "app step" in str(caught.value)
        stored = await writer.get_session(app_name=APP, user_id=USER, session_id="s")
        assert stored is not None
        assert stored.state == {"k": 1, "app:a": 1}


@pytest.mark.real
@pytest.mark.cluster
async def test_an_app_step_the_replicas_did_not_confirm_is_not_taken_as_applied(
    r7: tuple[Redis, Redis],
) -> None:
    """The cluster layout (on one node): an app step whose WAIT fell short may be lost in a
    failover, so the worker must not let the user's next script drop its outbox entry. The
    retry of the same event then sends it to the app's slot again, and waits again."""
    primary, _ = r7
    strict = service(
        primary, cluster=True, write_concern="replicas", min_replicas=2, write_timeout_ms=50
    )
    plain = service(primary, cluster=True)
    s = await plain.create_session(app_name=APP, user_id=USER, session_id="s")
    keys = strict._engine.keys.session(APP, USER, "s")
    outbox: Any = strict._engine.layout
    event = delta(**{"app:a": 1})
    with pytest.raises(WriteConcernError):
        await strict.append_event(s, event)
    # Nothing learned: the next script keeps (and returns) the entry.
    assert outbox.outbox.first_unapplied(keys.app_applied, keys.user_member) == "0-1"
    enough = service(primary, cluster=True, write_concern="replicas", min_replicas=1)
    await enough.append_event(s, event)
    assert await enough.get_app_state(app_name=APP) == {"a": 1}
