"""Connections redis-py loses without saying so, raised as ``ConnectionLostError``.

redis-py 8.1's asyncio connections let two losses out as bare ``AttributeError`` or
``TypeError``, which no retry policy (redis-py's, the cluster client's, a caller's ``except
ConnectionError``) recognises:

- a pooled connection the server reset while idle: the next write reaches a transport that
  asyncio already tore down (``'NoneType' object is not callable`` on Python 3.12,
  ``... has no attribute '_add_writer'`` on 3.13.0 to 3.13.9; redis-py issue 4287);
- a connection redis-py itself closes while a call is using it: after a connection error on
  a cluster node it disconnects the node's idle connections concurrently, and a call that
  took one of them in the meantime writes to ``None`` (``'NoneType' object has no attribute
  'writelines'``), as happens to busy workers when a primary dies.

Only an error raised inside redis-py's connection code (or in asyncio's streams and
transports beneath it) is taken for a lost connection; the same types raised anywhere else,
in this library's code above all, are bugs and stay as they are.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine
from types import FrameType, TracebackType
from typing import Any, ParamSpec, TypeVar

from redis.asyncio.connection import AbstractConnection as AsyncConnection
from redis.connection import AbstractConnection as SyncConnection

from redis_agent_sessions.errors import ConnectionLostError

__all__ = ["lost_connection", "raise_if_lost", "type_losses", "typed_losses", "typed_stream"]

# Where redis-py reads and writes sockets: a connection's own methods (not its pool's, in the
# same modules) and the reply parsers. Its encoders raise DataError for bad arguments, and the
# command packers turn hiredis's TypeError into DataError, so a TypeError or AttributeError
# raised there comes from a connection's state, not from what it was given.
_CONNECTIONS = (AsyncConnection, SyncConnection)
_PARSERS = "redis._parsers."
_NOT_TRANSPORT = ("redis._parsers.encoders", "redis._parsers.commands")


def lost_connection(exc: BaseException) -> ConnectionLostError | None:
    """``exc`` as a ConnectionLostError when it is redis-py's transport failing on a lost
    connection (see the module's docstring); None for anything else."""
    if not isinstance(exc, (AttributeError, TypeError)):
        return None
    # From where it was raised outwards, past asyncio's own frames (StreamWriter, the
    # transports, Task and wait_for machinery): the first other code decides.
    for frame in reversed(_frames(exc.__traceback__)):
        module = str(frame.f_globals.get("__name__", ""))
        if module == "asyncio" or module.startswith("asyncio."):
            continue
        in_parser = module.startswith(_PARSERS) and module not in _NOT_TRANSPORT
        if in_parser or isinstance(frame.f_locals.get("self"), _CONNECTIONS):
            return ConnectionLostError(
                f"the connection to Redis was lost during the call (redis-py raised "
                f"{type(exc).__name__}: {exc}); it may have written in part or not at all: "
                "retry it (docs/errors.md#connectionlosterror)"
            )
        return None
    return None


def _frames(tb: TracebackType | None) -> list[FrameType]:
    """A traceback's frames, outermost first."""
    found = []
    while tb is not None:
        found.append(tb.tb_frame)
        tb = tb.tb_next
    return found


def raise_if_lost(exc: BaseException) -> None:
    """Raise ``exc``'s ConnectionLostError (from ``exc``) when it is one; else return, for
    the caller to re-raise ``exc`` as it was."""
    lost = lost_connection(exc)
    if lost is not None:
        raise lost from exc


P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def typed_losses(
    method: Callable[P, Coroutine[Any, Any, R]],
) -> Callable[P, Coroutine[Any, Any, R]]:
    """``method`` with a connection redis-py lost without saying so raised as
    ConnectionLostError."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(*args, **kwargs)
        except (AttributeError, TypeError) as exc:
            raise_if_lost(exc)
            raise

    return wrapper


def type_losses(cls: type, names: tuple[str, ...]) -> None:
    """Wrap the coroutine methods ``names`` that ``cls`` itself defines with
    ``typed_losses``: a subclass's override of a public operation is covered as its base's
    definition is (an override calling the base's ends up wrapped twice, which is harmless)."""
    for name in names:
        method = cls.__dict__.get(name)
        if inspect.iscoroutinefunction(method):
            setattr(cls, name, typed_losses(method))


def typed_stream(stream: AsyncIterator[T]) -> AsyncIterator[T]:
    """``stream``'s items, with a connection redis-py lost without saying so raised as
    ConnectionLostError."""

    async def items() -> AsyncIterator[T]:
        try:
            async for item in stream:
                yield item
        except (AttributeError, TypeError) as exc:
            raise_if_lost(exc)
            raise
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    return items()
