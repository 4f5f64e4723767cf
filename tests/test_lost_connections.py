"""A connection redis-py loses without saying so reaches the caller as ConnectionLostError, a
redis-py ConnectionError, never as a bare AttributeError or TypeError (docs/errors.md).

redis-py 8.1 lets two such losses out of its asyncio transport (``_redis/lost.py``): a pooled
connection the server reset while idle, on Python 3.12 and 3.13.0 to 3.13.9 (this machine's
3.11 reads the reset and retries, so there these calls simply succeed); and, on every Python, a
connection redis-py's cluster client closes under a call while it recovers from a connection
error on that node, as happens to busy workers when a primary dies. Both are reproduced on real
servers: the first through a relay that resets every connection (``_relay.py``), the second by
running redis-py's own recovery step beside the call. Whatever the call gets, it must be its
result or a typed error, and a retry must store the append exactly once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection, ConnectionPool
from redis.exceptions import RedisError

from _relay import Relay, relays
from _servers import skip_without
from redis_agent_sessions import (
    ConnectionLostError,
    Event,
    EventActions,
    RedisMemoryService,
    RedisSessionsError,
    RedisSessionService,
    Session,
    SessionServiceConfig,
)
from redis_agent_sessions._redis.lost import lost_connection
from redis_agent_sessions.models import Content, Part

APP = "lost_app"
PREFIX = "lost"

# -- what counts as a lost connection ----------------------------------------------------------


async def test_an_error_raised_in_redis_py_s_transport_is_a_lost_connection() -> None:
    conn = Connection()
    conn._writer = None  # as redis-py leaves a connection it closed under a call
    with pytest.raises(AttributeError) as raised:
        await conn._send_packed_command([b"PING\r\n"])
    lost = lost_connection(raised.value)
    assert isinstance(lost, ConnectionLostError)
    assert isinstance(lost, RedisError)  # what callers already retry on
    assert "writelines" in str(lost)


async def test_the_same_types_raised_elsewhere_are_left_alone() -> None:
    with pytest.raises(AttributeError) as ours:
        _ = None.writelines  # type: ignore[attr-defined]
    assert lost_connection(ours.value) is None
    # Raised inside asyncio, but called from code that is not redis-py's connection.
    with pytest.raises(TypeError) as in_asyncio:
        await asyncio.sleep("soon")  # type: ignore[arg-type]
    assert lost_connection(in_asyncio.value) is None
    assert lost_connection(ConnectionError("not redis-py's transport")) is None
    # In redis-py's connection module, but its pool's code, not a connection's: a misuse.
    pool = ConnectionPool(connection_class=object)
    with pytest.raises(TypeError) as in_the_pool:
        pool.make_connection()
    assert lost_connection(in_the_pool.value) is None


# -- the operations, and what their data must be afterwards ------------------------------------


def said(i: int) -> Event:
    return Event(
        id=f"e{i}",
        author="user",
        content=Content(parts=[Part(text=f"turn {i}")]),
        actions=EventActions(state_delta={"n": i}),
    )


ATTEMPTS = 10
"""How often a call is tried: each failure spends one dead pooled connection (redis-py closes
the one that failed), and a cluster client keeps several per node."""


async def typed_or_done(call: Callable[[], Awaitable[Any]]) -> tuple[Any, str]:
    """``call()``'s result, retried after typed errors as a caller does; the last typed error
    met ('' for none). A bare AttributeError or TypeError propagates and fails the test."""
    error = ""
    for _ in range(ATTEMPTS - 1):
        try:
            return await call(), error
        except (RedisError, RedisSessionsError) as exc:
            error = type(exc).__name__
    return await call(), error


async def every_operation(sessions: RedisSessionService, session: Session, turn: int) -> list[str]:
    """An append (retried: stored once), a read, a listing and an events page; the typed
    errors each met before succeeding."""
    seen = []
    _, error = await typed_or_done(lambda: sessions.append_event(session, said(turn)))
    seen.append(error)
    read, error = await typed_or_done(
        lambda: sessions.get_session(app_name=APP, user_id=session.user_id, session_id=session.id)
    )
    seen.append(error)
    assert read is not None
    assert [e.id for e in read.events] == [f"e{i}" for i in range(turn + 1)]
    assert read.state["n"] == turn
    _, error = await typed_or_done(
        lambda: sessions.list_sessions_page(app_name=APP, user_id=session.user_id)
    )
    seen.append(error)
    page, error = await typed_or_done(
        lambda: sessions.list_events(app_name=APP, user_id=session.user_id, session_id=session.id)
    )
    seen.append(error)
    assert len(page.events) == turn + 1
    return seen


def idle_connections(client: Any) -> list[Any]:
    if isinstance(client, RedisCluster):
        return [conn for node in client.get_nodes() for conn in node._free]
    return list(client.connection_pool._available_connections)


async def torn_down(client: Any) -> None:
    """Returns once asyncio has read the reset of every idle connection of ``client``."""
    deadline = time.monotonic() + 10
    while True:
        writers = [c._writer for c in idle_connections(client) if c._writer is not None]
        if all(w.transport.is_closing() for w in writers):
            return
        assert time.monotonic() < deadline, "the relay's resets never reached the client"
        await asyncio.sleep(0.01)


# -- idle connections reset by the server's side -----------------------------------------------


@pytest.fixture(params=["single node", pytest.param("cluster", marks=pytest.mark.cluster)])
async def relayed(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, list[Relay]]]:
    """A client that reaches REDIS_URL (or every node of REDIS_CLUSTER_URL) through relays,
    and the relays. What the test writes is deleted at the end, by a direct client."""
    cluster = request.param == "cluster"
    whole = skip_without("REDIS_CLUSTER_URL" if cluster else "REDIS_URL")
    url = urlsplit(whole)
    host, port = url.hostname or "127.0.0.1", url.port or 6379
    targets = [(host, port)]
    if cluster:
        probe = RedisCluster(host=host, port=port)
        await probe.initialize()
        targets = [(node.host, node.port) for node in probe.get_nodes()]
        await probe.aclose()
    async with relays(targets) as started:

        def through_relay(address: tuple[str, int]) -> tuple[str, int]:
            relay = started.get((address[0], address[1]))
            return ("127.0.0.1", relay.port) if relay else address

        client: Any
        if cluster:
            client = RedisCluster(host=host, port=port, address_remap=through_relay)
        else:
            db = int(url.path.strip("/") or 0)
            client = Redis(host="127.0.0.1", port=started[targets[0]].port, db=db)
        try:
            yield client, list(started.values())
        finally:
            await client.aclose()
            admin = RedisCluster.from_url(whole) if cluster else Redis.from_url(whole)
            async for key in admin.scan_iter(match=f"{PREFIX}:*", count=1000):
                await admin.delete(key)
            await admin.aclose()


@pytest.mark.real
async def test_idle_connections_reset_by_the_server_give_results_or_typed_errors(
    relayed: tuple[Any, list[Relay]],
) -> None:
    client, started = relayed
    cluster = isinstance(client, RedisCluster)
    config = SessionServiceConfig(key_prefix=PREFIX, cluster=cluster or None)
    sessions = RedisSessionService(client, config=config)
    memory = RedisMemoryService(client, config=config, backend="plain")
    session = await sessions.create_session(app_name=APP, user_id="ann")
    await every_operation(sessions, session, 0)
    await memory.add_session_to_memory(session)
    for turn in range(1, 4):
        assert sum(relay.reset() for relay in started) >= 1
        await torn_down(client)
        await every_operation(sessions, session, turn)
        found, _ = await typed_or_done(
            lambda: memory.search_memory(app_name=APP, user_id="ann", query="turn")
        )
        assert found.memories


# -- connections redis-py closes under a call (the failover) -----------------------------------


@pytest.mark.real
@pytest.mark.cluster
async def test_a_connection_redis_py_closes_under_a_call_gives_a_typed_error() -> None:
    """After a connection error on a node, redis-py's cluster client closes that node's idle
    connections, concurrently, while other calls go on taking them: each append here starts a
    few event-loop steps after that recovery step did (every step count up to 16, so that some
    take a connection in the middle of its closing). Before the library typed these errors,
    ``AttributeError: 'NoneType' object has no attribute 'writelines'`` reached the caller."""
    url = skip_without("REDIS_CLUSTER_URL")
    client = RedisCluster.from_url(url)
    sessions = RedisSessionService(client, config=SessionServiceConfig(key_prefix=PREFIX))
    try:
        session = await sessions.create_session(app_name=APP, user_id="ann", session_id="s")
        node = client.get_node_from_key(sessions._engine.keys.session(APP, "ann", "s").meta)
        met: list[str] = []
        for turn in range(16):
            # Idle connections to close: as many as concurrent calls leave behind.
            await asyncio.gather(
                *(
                    sessions.get_session(app_name=APP, user_id="ann", session_id="s")
                    for _ in range(4)
                )
            )
            closing = asyncio.ensure_future(node.disconnect_free_connections())
            for _ in range(turn):
                await asyncio.sleep(0)
            _, error = await typed_or_done(partial(sessions.append_event, session, said(turn)))
            met.append(error)
            await closing
        read = await sessions.get_session(app_name=APP, user_id="ann", session_id="s")
        assert read is not None
        assert [e.id for e in read.events] == [f"e{i}" for i in range(16)]
        assert set(met) <= {"", "ConnectionLostError", "ConnectionError"}, met
    finally:
        await client.aclose()
        admin = RedisCluster.from_url(url)
        async for key in admin.scan_iter(match=f"{PREFIX}:*", count=1000):
            await admin.delete(key)
        await admin.aclose()
