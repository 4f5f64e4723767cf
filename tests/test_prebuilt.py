"""Script calls pack their command with hiredis (``_redis/prebuilt.py``) only where that
changes nothing but the speed: everywhere else redis-py runs them as before."""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError, DataError, NoScriptError, ResponseError

from _backends import backend
from _servers import skip_without
from redis_agent_sessions import Event, EventActions, RedisSessionService
from redis_agent_sessions._redis import prebuilt

APP, USER = "app", "user"


def count_redis_py_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The scripts redis-py's AsyncScript ran (by sha) from now on."""
    calls: list[str] = []
    original = AsyncScript.__call__

    async def spied(self: AsyncScript, *args: Any, **kwargs: Any) -> Any:
        calls.append(self.sha)
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(AsyncScript, "__call__", spied)
    return calls


def delta(**values: Any) -> Event:
    return Event(actions=EventActions(state_delta=values))


async def test_plain_clients_skip_redis_py_packing(
    worker_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = RedisSessionService(worker_client)
    s = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(s, delta(n=1))  # loads the script if the server lacks it
    calls = count_redis_py_calls(monkeypatch)
    await service.append_event(s, delta(n=2))
    got = await service.get_session(app_name=APP, user_id=USER, session_id=s.id)
    assert got is not None
    assert got.state == {"n": 2}
    plain = prebuilt._pack is not None and type(worker_client).execute_command in (
        Redis.execute_command,
        RedisCluster.execute_command,
    )
    # The slot-checking fakeredis overrides execute_command: its checks still see every
    # script, as a cluster client does.
    assert calls == ([] if plain else [service._engine.ctx.runner.append.sha])


@pytest.mark.real
async def test_a_small_command_is_written_without_redis_py_s_send(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """redis-py's send wraps the write in ``asyncio.wait_for`` (a task of its own on Python
    3.11): a script call writes its small command to an open connection itself. A command
    too large for that goes through redis-py's send, on the same connection."""
    if prebuilt._pack is None:
        pytest.skip("without hiredis redis-py packs and sends every call")
    client = Redis.from_url(skip_without("REDIS_URL"))
    sent: list[int] = []
    original = Connection.send_packed_command

    async def spied(self: Connection, command: Any, check_health: bool = True) -> None:
        sent.append(len(command))
        await original(self, command, check_health)

    try:
        script = client.register_script("return string.len(ARGV[1])")
        await client.script_load(script.script)
        monkeypatch.setattr(Connection, "send_packed_command", spied)
        assert await prebuilt.evalsha(script, [], ["x"]) == 1
        assert sent == []
        large = "x" * (prebuilt._DIRECT_BYTES + 1)
        assert await prebuilt.evalsha(script, [], [large]) == len(large)
        assert len(sent) == 1
        assert await prebuilt.evalsha(script, [], ["xy"]) == 2  # the connection still reads
    finally:
        await client.aclose()


@pytest.mark.real
@pytest.mark.cluster
async def test_on_a_cluster_a_moved_slot_is_left_to_redis_py(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A script sent to the node the client's slot table names, which no longer holds the
    slot (it answers MOVED), runs again through redis-py, which follows the redirection and
    refreshes its table: nothing is lost and nothing is written twice."""
    client = RedisCluster.from_url(skip_without("REDIS_CLUSTER_URL"))
    try:
        service = RedisSessionService(client)
        s = await service.create_session(app_name=APP, user_id=USER)
        await service.append_event(s, delta(n=1))
        keys = service._engine.ctx.keys.session(APP, USER, s.id)
        slot = client.keyslot(keys.meta)
        owner = client.nodes_manager.get_node_from_slot(slot)
        other = next(n for n in client.get_primaries() if n.name != owner.name)
        client.nodes_manager.slots_cache[slot] = [other]  # a stale table
        calls = count_redis_py_calls(monkeypatch)
        await service.append_event(s, delta(n=2))
        assert calls == [service._engine.ctx.runner.append.sha]  # handed over once
        assert client.nodes_manager.get_node_from_slot(slot).name == owner.name
        got = await service.get_session(app_name=APP, user_id=USER, session_id=s.id)
        assert got is not None
        assert got.state == {"n": 2}
        assert len(got.events) == 2
        await service.delete_session(app_name=APP, user_id=USER, session_id=s.id)
    finally:
        await client.aclose()


@pytest.mark.real
@pytest.mark.cluster
async def test_on_a_cluster_a_connection_marked_for_reconnect_is_reopened(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pooled connection a maintenance notification marked for reconnection (redis-py 8)
    is closed before the script is sent on it, as redis-py's own cluster path does: the
    call goes out on a fresh socket, still straight to the node."""
    client = RedisCluster.from_url(skip_without("REDIS_CLUSTER_URL"))
    try:
        service = RedisSessionService(client)
        s = await service.create_session(app_name=APP, user_id=USER)
        keys = service._engine.ctx.keys.session(APP, USER, s.id)
        node = client.nodes_manager.get_node_from_slot(client.keyslot(keys.meta))
        if not hasattr(node, "disconnect_if_needed"):
            pytest.skip("this redis-py has no maintenance notifications")
        conn = node.acquire_connection()
        await conn.connect()
        old_writer = conn._writer
        conn.mark_for_reconnect()
        node._free.appendleft(conn)  # the next call takes it
        calls = count_redis_py_calls(monkeypatch)
        await service.append_event(s, delta(n=1))
        # Sent directly (without hiredis, by redis-py, which reopens it the same way).
        direct = prebuilt._pack is not None
        assert calls == ([] if direct else [service._engine.ctx.runner.append.sha])
        assert not conn.should_reconnect()
        assert conn._writer is not None
        assert conn._writer is not old_writer  # a fresh socket
        got = await service.get_session(app_name=APP, user_id=USER, session_id=s.id)
        assert got is not None
        assert got.state == {"n": 1}
        await service.delete_session(app_name=APP, user_id=USER, session_id=s.id)
    finally:
        await client.aclose()


async def test_a_client_overriding_execute_command_sees_every_script() -> None:
    seen: list[Any] = []

    class Instrumented(fakeredis.FakeAsyncRedis):  # type: ignore[misc]
        async def execute_command(self, *args: Any, **options: Any) -> Any:
            seen.append(args[0])
            return await super().execute_command(*args, **options)

    service = RedisSessionService(Instrumented())
    s = await service.create_session(app_name=APP, user_id=USER)
    seen.clear()
    await service.append_event(s, delta(n=1))
    assert "EVALSHA" in seen


@pytest.mark.real
@pytest.mark.parametrize("retries", [0, 1])
async def test_a_dropped_connection_follows_the_client_s_retry_policy(
    retries: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with backend("real", monkeypatch) as admin:
        client = Redis.from_url(skip_without("REDIS_URL"), retry=Retry(NoBackoff(), retries))
        try:
            service = RedisSessionService(client)
            s = await service.create_session(app_name=APP, user_id=USER)
            await service.append_event(s, delta(n=1))
            # Every pooled connection of the worker dies while idle.
            assert await admin.client_kill_filter(skipme=True, _type="normal") >= 1
            if retries:
                await service.append_event(s, delta(n=2))
            else:  # redis-py's default: the error reaches the caller, who retries
                with pytest.raises(ConnectionError):
                    await service.append_event(s, delta(n=2))
                await service.append_event(s, delta(n=2))
            got = await service.get_session(app_name=APP, user_id=USER, session_id=s.id)
            assert got is not None
            assert got.state == {"n": 2}
            assert len(got.events) == 2
        finally:
            await client.aclose()


async def test_unpackable_arguments_raise_redis_py_s_error() -> None:
    client = fakeredis.FakeAsyncRedis()
    script = client.register_script("return 1")
    with pytest.raises(DataError) as via_prebuilt:
        await prebuilt.evalsha(script, [], [None])
    with pytest.raises(DataError) as via_redis_py:
        await script(keys=[], args=[None])
    assert str(via_prebuilt.value) == str(via_redis_py.value)
    assert await prebuilt.evalsha(script, [], [1, "é", b"x", 1.5]) == 1


class _LostTwice:
    """A script whose server lacks it for the first ``lost`` calls, as a promoted replica
    does while redis-py's slot table still names the old primary."""

    def __init__(self, lost: int) -> None:
        self.lost, self.calls = lost, 0

    async def __call__(self, keys: list[Any], args: list[Any]) -> Any:
        self.calls += 1
        if self.calls <= self.lost:
            raise NoScriptError("No matching script.")
        return [keys, args]


async def test_a_script_lost_in_a_failover_is_run_again() -> None:
    script: Any = _LostTwice(lost=2)
    assert await prebuilt.by_redis_py(script, ["k"], ["a"]) == [["k"], ["a"]]
    assert script.calls == 3
    # A server that keeps refusing it: redis-py's error, after as many tries.
    script = _LostTwice(lost=3)
    with pytest.raises(NoScriptError):
        await prebuilt.by_redis_py(script, ["k"], ["a"])
    assert script.calls == 3


@pytest.mark.real
async def test_pipelined_reads_match_redis_py_s_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads packed by hiredis reply as redis-py's pipeline does; an error reply is raised
    once every reply is read, and the connection reads the next command in step."""
    if prebuilt._pack is None:
        pytest.skip("without hiredis redis-py runs every pipeline")
    async with backend("real", monkeypatch):
        client = Redis.from_url(skip_without("REDIS_URL"), max_connections=1)
        try:
            await client.hset("h1", mapping={"a": "1", "b": "2"})
            await client.set("s", "x")
            reads = [("HMGET", "h1", "a", "b", "c"), ("HMGET", "gone", "a")]
            pipe = client.pipeline(transaction=False)
            for command in reads:
                pipe.execute_command(*command)
            assert await prebuilt.pipelined(client, reads) == await pipe.execute()
            with pytest.raises(ResponseError, match="WRONGTYPE"):
                await prebuilt.pipelined(client, [("HMGET", "s", "a"), *reads])
            assert await prebuilt.pipelined(client, reads[:1]) == [[b"1", b"2", None]]
        finally:
            await client.aclose()


class Overriding(fakeredis.FakeAsyncRedis):
    async def execute_command(self, *args: Any, **options: Any) -> Any:
        return await super().execute_command(*args, **options)


async def test_pipelined_leaves_other_clients_to_redis_py() -> None:
    """None (the caller's own pipeline runs): a client overriding execute_command, one of
    a single connection, and nothing to send."""
    for client in (Overriding(), fakeredis.FakeAsyncRedis(single_connection_client=True)):
        try:
            assert await prebuilt.pipelined(client, [("HMGET", "h", "a")]) is None
        finally:
            await client.aclose()
    assert await prebuilt.pipelined(Redis(), []) is None
