"""EVALSHA with the command packed by hiredis, in C, instead of by redis-py, in Python.

redis.asyncio packs every argument in Python: for append_event's ~33 arguments that
costs 55-65 us per append more than ``hiredis.pack_command`` (benchmarks/append.py, the
"redis-py packing" row, interleaved). So on a plain ``redis.asyncio.Redis`` with hiredis
installed, a script call packs its command itself and sends it on a pooled connection, with
the connection's own retry policy, as ``execute_command`` would. Everything else (no
hiredis, a cluster or single-connection client, a subclass that overrides
``execute_command``, an argument hiredis cannot pack, a server that lost its scripts) goes
through redis-py's ``AsyncScript`` unchanged. (Text is packed as UTF-8, as everywhere in
this library.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

__all__ = ["evalsha"]

_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _pack
except ImportError:  # hiredis is optional
    _pack = None


async def evalsha(script: AsyncScript, keys: list[Any], args: list[Any]) -> Any:
    """``script(keys=keys, args=args)``, as redis-py runs it (errors included), faster."""
    client: Any = script.registered_client
    packed = _packed(client, script.sha, keys, args)
    if packed is None:
        return await script(keys=keys, args=args)
    try:
        return await _send(client, packed)
    except NoScriptError:
        # The server lost its scripts (restart, SCRIPT FLUSH): redis-py loads it again.
        return await script(keys=keys, args=args)


def _packed(client: Any, sha: str, keys: list[Any], args: list[Any]) -> bytes | None:
    if (
        _pack is None
        or not isinstance(client, Redis)
        or type(client).execute_command is not Redis.execute_command
        or client.single_connection_client
    ):
        return None
    try:
        return _pack(("EVALSHA", sha, len(keys), *keys, *args))
    except (TypeError, UnicodeError):
        return None  # redis-py's own packing raises its usual error


async def _send(client: Redis, packed: bytes) -> Any:
    pool: Any = client.connection_pool
    conn = await pool.get_connection()

    async def attempt() -> Any:
        await conn.send_packed_command(packed)
        return await conn.read_response()

    async def failed(_error: Exception) -> None:
        await conn.disconnect()

    try:
        return await conn.retry.call_with_retry(attempt, failed)
    finally:
        await pool.release(conn)
