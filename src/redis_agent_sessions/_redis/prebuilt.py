"""EVALSHA with the command packed by hiredis, in C, instead of by redis-py, in Python.

redis.asyncio packs every argument in Python: for append_event's ~33 arguments that
costs 55-65 us per append more than ``hiredis.pack_command`` (benchmarks/append/, the
"redis-py packing" row, interleaved). So on a plain ``redis.asyncio.Redis`` with hiredis
installed, a script call packs its command itself and sends it on a pooled connection, with
the connection's own retry policy, as ``execute_command`` would; a small command is written
to the socket without redis-py's ``wait_for`` around the write (see ``_written``).

On a ``redis.asyncio.cluster.RedisCluster`` the routing is skipped too (~19 us of a cluster
append, benchmarks/cluster/): every key of one script call is in one slot, so the command
goes to the slot's primary, known from the client's slot table, on one of that node's
pooled connections. Anything out of the ordinary (a slot moved or being migrated, the
cluster down or reconfiguring, a dropped connection, a lost script) is handed to redis-py's
own path, which redirects, refreshes its slot table, reconnects and retries as it always
does; the scripts are safe to run again (an append a second time is a recognised
duplicate).

Everything else (no hiredis, a single-connection client, a subclass that overrides
``execute_command``, an argument hiredis cannot pack) goes through redis-py's
``AsyncScript`` unchanged. (Text is packed as UTF-8, as everywhere in this library.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["by_redis_py", "evalsha", "pipelined"]

_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _pack
except ImportError:  # hiredis is optional
    _pack = None


async def evalsha(script: AsyncScript, keys: list[Any], args: list[Any]) -> Any:
    """``script(keys=keys, args=args)``, as redis-py runs it (errors included), faster."""
    client: Any = script.registered_client
    if isinstance(client, RedisCluster):
        return await _on_cluster(script, client, keys, args)
    packed = _packed(client, script.sha, keys, args)
    if packed is None:
        return await by_redis_py(script, keys, args)
    try:
        return await _exchange(client, packed)
    except NoScriptError:
        # The server lost its scripts (restart, SCRIPT FLUSH): redis-py loads it again.
        return await by_redis_py(script, keys, args)


def _packed(client: Any, sha: str, keys: list[Any], args: list[Any]) -> bytes | None:
    return _packed_all(client, [("EVALSHA", sha, len(keys), *keys, *args)])


def _packed_all(client: Any, commands: list[tuple[Any, ...]]) -> bytes | None:
    if (
        _pack is None
        or not isinstance(client, Redis)
        or type(client).execute_command is not Redis.execute_command
        or client.single_connection_client
    ):
        return None
    try:
        return b"".join(_pack(command) for command in commands)
    except (TypeError, UnicodeError):
        return None  # redis-py's own packing raises its usual error


async def pipelined(client: Any, commands: list[tuple[Any, ...]]) -> list[Any] | None:
    """The replies of ``commands`` (read-only ones: a lost connection sends them all
    again), sent at once as a non-transactional pipeline does, its first error reply
    raised after every reply is read; None where ``evalsha`` would leave a call to
    redis-py (then the caller's pipeline runs them). A memory search's 10 entry reads
    cost redis-py ~80 us to pack, hiredis ~10."""
    packed = _packed_all(client, commands) if commands else None
    if packed is None:
        return None

    async def read(conn: Any) -> list[Any]:
        replies: list[Any] = []
        first: ResponseError | None = None
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:  # read whole: the connection stays in step
                first = first or exc
                replies.append(exc)
        if first is not None:
            raise first
        return replies

    replies: list[Any] = await _exchange(client, packed, read)
    return replies


# A command this small goes to the socket at once (asyncio's transport buffers the rest of a
# larger one, and only redis-py's send then waits for the buffer to drain).
_DIRECT_BYTES = 64 << 10


async def _exchange(
    client: Redis, packed: bytes, read: Callable[[Any], Awaitable[Any]] | None = None
) -> Any:
    """``packed`` sent on a pooled connection, and its one reply read (or ``read`` of the
    connection: several), under the connection's own retry policy (a lost connection is
    closed and the whole sent again), as ``execute_command`` runs a command."""
    pool: Any = client.connection_pool
    conn = await pool.get_connection()

    async def attempt() -> Any:
        if not _written(conn, packed):
            await conn.send_packed_command(packed)
        # One reply read here: an append (the hot path) pays no coroutine more.
        return await (conn.read_response() if read is None else read(conn))

    async def failed(_error: Exception) -> None:
        await conn.disconnect()

    try:
        return await conn.retry.call_with_retry(attempt, failed)
    finally:
        await pool.release(conn)


def _written(conn: Any, packed: bytes) -> bool:
    """Whether ``packed`` was handed to the open socket of ``conn`` here, without redis-py's
    send: with a ``socket_timeout`` (5 s by default in redis-py 8) that send runs as an
    ``asyncio.wait_for`` of the write, which on Python 3.11 is a task of its own and two
    more turns of the event loop: about 30 us of a 270 us append on this machine (appends
    interleaved with bare EVALSHA calls, as the floor of benchmarks/append/ runs them). The
    timeout still holds: the reply is read under it, and a command the server cannot read
    is a reply that never comes. False (redis-py sends it) for a connection not open or
    closing, one that is not on an asyncio stream, one that checks its health before
    commands, and a large command, which may wait for the socket."""
    writer = getattr(conn, "_writer", None)
    if (
        type(writer) is not asyncio.StreamWriter  # None once closed; fakeredis has its own
        or not conn.is_connected
        or len(packed) > _DIRECT_BYTES
        or getattr(conn, "health_check_interval", True)
        or writer.transport.is_closing()
    ):
        return False
    try:
        writer.write(packed)
    except (AttributeError, TypeError, RuntimeError, OSError) as exc:
        # A transport torn down under the connection (lost.py): nothing went out. As
        # redis-py's send does, a ConnectionError, which the connection's retry takes.
        raise RedisConnectionError(f"Error while writing to socket: {exc!r}") from exc
    return True


# Replies and failures redis-py's cluster path knows how to handle: redirections, a cluster
# being reconfigured, a script the node does not have; and a connection lost, after which
# the connection is closed before it goes back to the node's pool.
_REPLIES_HANDED_OVER = (AskError, ClusterDownError, MovedError, NoScriptError, TryAgainError)
_LOST = (RedisConnectionError, RedisTimeoutError, OSError)
# Before sending: also a slot no node serves (a RedisClusterException); a node without a free
# connection raises MaxConnectionsError, a ConnectionError.
_HANDED_OVER = (*_REPLIES_HANDED_OVER, *_LOST, RedisClusterException)


async def _on_cluster(
    script: AsyncScript, client: RedisCluster, keys: list[Any], args: list[Any]
) -> Any:
    """``script(keys=keys, args=args)`` sent straight to the primary of the keys' slot."""
    if (
        _pack is None
        or not keys
        or type(client).execute_command is not RedisCluster.execute_command
        or getattr(client, "_initialize", True)
    ):
        return await by_redis_py(script, keys, args)
    try:
        packed = _pack(("EVALSHA", script.sha, len(keys), *keys, *args))
        node = client.nodes_manager.get_node_from_slot(client.keyslot(keys[0]))
        conn = node.acquire_connection()
    except (TypeError, UnicodeError, *_HANDED_OVER):
        return await by_redis_py(script, keys, args)
    try:
        # As ClusterNode.execute_command does (redis-py 8): a connection a maintenance
        # notification marked for reconnection is closed first, and reopens on the send.
        reopen = getattr(node, "disconnect_if_needed", None)
        if reopen is not None:
            await reopen(conn)
        if not _written(conn, packed):
            await conn.send_packed_command(packed)
        reply = await conn.read_response()
    except _REPLIES_HANDED_OVER:
        node.release(conn)
    except _LOST:
        await conn.disconnect()
        node.release(conn)
    except BaseException:
        node.release(conn)  # redis-py closed it already if a reply may be pending
        raise
    else:
        node.release(conn)
        return reply
    return await by_redis_py(script, keys, args)


_LOADS = 3
"""Times redis-py may load a lost script and run it again before its refusal stands."""


async def by_redis_py(script: AsyncScript, keys: list[Any], args: list[Any]) -> Any:
    """``script(keys=keys, args=args)``, again while the server says it lacks the script.

    redis-py loads a lost script and retries once. On a cluster in a failover its load can
    go to the old primary, from a slot table not refreshed yet, while the retry is
    redirected to the promoted replica, which never had the script: the next call finds
    the table refreshed. The scripts are safe to run again."""
    for _ in range(_LOADS - 1):
        try:
            return await script(keys=keys, args=args)
        except NoScriptError:
            continue
    return await script(keys=keys, args=args)
