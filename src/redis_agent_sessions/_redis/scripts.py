"""Lua sources shipped in the package, registered on each client.

Registration goes through redis-py's ``register_script``, which runs EVALSHA and
loads the script again when the server answers NOSCRIPT (after a restart or
SCRIPT FLUSH), so callers never handle that themselves.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Coroutine
from functools import cache
from importlib import resources
from typing import Any, Generic, ParamSpec, TypeVar

from redis.commands.core import AsyncScript
from redis.exceptions import NoPermissionError, OutOfMemoryError, ResponseError

from redis_agent_sessions._redis.calls import C, R, Script
from redis_agent_sessions._redis.codec import text
from redis_agent_sessions._redis.lost import raise_if_lost
from redis_agent_sessions._redis.prebuilt import evalsha
from redis_agent_sessions.errors import (
    CorruptDataError,
    PermissionDeniedError,
    RedisSessionsError,
    StoreFullError,
)

__all__ = [
    "LIBRARIES",
    "Registered",
    "checked",
    "evaluate",
    "execute",
    "lua_source",
    "permission_error",
    "register",
    "run",
    "store_full",
    "typed_permissions",
    "uses",
]

WRONG_TYPE, DENIED, FULL = -3, -4, -6
"""First item of a script's reply when a key holds a foreign type, when the ACL user may not
run a command it needs, and when Redis refused the first write for memory."""
_REFUSED = (WRONG_TYPE, DENIED, FULL)


LIBRARIES = (
    "_permitted",
    "_layout",
    "_expiry",
    "_postings",
    "_counts",
    "_scoring",
    "_rank",
    "_entries",
)
"""The Lua libraries a script may declare on its ``-- uses:`` line, in the order they are
prepended: each may call the ones before it."""


@cache
def lua_source(name: str) -> str:
    """The text of ``lua/<name>.lua`` inside this package, after the libraries its header
    declares on a ``-- uses:`` line (``-- uses: _permitted, _layout``), in that order: the
    ACL prelude (``lua/_permitted.lua``), which every script calls before its first command,
    the layout argument's reader (``lua/_layout.lua``), the expiry index's helpers
    (``lua/_expiry.lua``), the postings' scale (``lua/_postings.lua``), the memory writes'
    helpers (``lua/_counts.lua``), the searches' filter and BM25 scoring
    (``lua/_scoring.lua``), the plain backend's ranking over postings (``lua/_rank.lua``)
    and the memory entry writes (``lua/_entries.lua``). Only those: each library's
    functions are made anew on every run of a script that carries it. A script whose file
    opens with a shebang line (``#!lua flags=no-writes``: it only reads, so Redis runs it
    at full memory and never lets it write) keeps that line first, where Redis looks for
    it."""
    lua = resources.files(__package__).joinpath("lua")
    own = lua.joinpath(f"{name}.lua").read_text("utf-8")
    first = ""
    if own.startswith("#!"):
        first, own = own.split("\n", 1)
        first += "\n"
    parts = uses(own)
    return first + "".join(lua.joinpath(f"{p}.lua").read_text("utf-8") for p in parts) + own


def uses(source: str) -> list[str]:
    """The libraries a script's opening comment declares (``-- uses: a, b``), in order."""
    for line in source.splitlines():
        if not line.startswith(("--", "#!")):
            break
        if line.startswith("-- uses:"):
            named = [part.strip() for part in line.removeprefix("-- uses:").split(",")]
            unknown = [n for n in named if n not in LIBRARIES]
            if unknown:  # a packaging mistake, which tests/test_lua_calls.py catches
                raise RedisSessionsError(f"unknown Lua libraries {unknown} (known: {LIBRARIES})")
            return named
    return []


class Registered(Generic[C, R]):
    """A ``Script`` registered on one client (redis-py's ``AsyncScript``)."""

    __slots__ = ("lua", "script")

    def __init__(self, script: Script[C, R], lua: AsyncScript) -> None:
        self.script = script
        self.lua = lua

    @property
    def sha(self) -> str:
        sha: str = self.lua.sha
        return sha


def register(client: Any, script: Script[C, R]) -> Registered[C, R]:
    """``script`` bound to ``client``."""
    return Registered(script, client.register_script(lua_source(script.name)))


async def run(script: Registered[C, R], call: C) -> R:
    """Run ``script`` with ``call``: its reply, read (refusals raised as ``evaluate``
    raises them)."""
    keys, args = script.script.split(call)
    return script.script.reply(call, await evaluate(script.lua, keys, args))


# How a server that loads scripts as plain Lua 5.1 (fakeredis, which the suites and users'
# own tests run on) refuses a shebang line.
_NO_SHEBANG = "unexpected symbol near '#'"


async def evaluate(script: AsyncScript, keys: list[Any], args: list[Any]) -> Any:
    """Run ``script`` with ``keys`` and ``args`` as given; a refused command (asked before
    writing, or refused by Redis) is a PermissionDeniedError naming it, a write refused for
    memory a StoreFullError, a key of a foreign type a CorruptDataError."""
    try:
        reply = await evalsha(script, keys, args)
    except ResponseError as exc:
        if _NO_SHEBANG in str(exc) and isinstance(script.script, str):
            # The shebang turned into a comment, once per script object: the same script.
            # Tasks that ran it side by side all see the refusal; the first one turns it.
            if script.script[:2] == "#!":
                plain = script.registered_client.register_script(f"--{script.script}")
                script.script, script.sha = plain.script, plain.sha
            if script.script[:4] == "--#!":
                return await evaluate(script, keys, args)
        reply = exc
    return checked(reply, keys)


def checked(reply: Any, keys: list[Any]) -> Any:
    """A script's reply, or its error (a pipeline's exception instance) raised: refusals as
    PermissionDeniedError, a full store as StoreFullError, a script's report of a key of a
    foreign type as CorruptDataError, anything else as it came."""
    if isinstance(reply, NoPermissionError):  # EVALSHA or SCRIPT LOAD itself
        raise permission_error(reply, keys[0] if keys else None, "evalsha") from reply
    # A command the plan did not foresee, refused inside the script (Redis does not name
    # it there). Not expected: every script asks for all it runs.
    if isinstance(reply, ResponseError) and "user executing the script can't" in str(reply):
        raise PermissionDeniedError(None, None, str(reply)) from reply
    if isinstance(reply, OutOfMemoryError):
        raise store_full(reply) from reply
    # Not only Redis's error replies: a cluster pipeline also puts the ConnectionError of a
    # node lost mid-reply here. Returned, it would pass for the script's reply.
    if isinstance(reply, Exception):
        raise reply
    # The statuses every script shares (an integer first: a reply of strings never matches).
    if isinstance(reply, list) and reply and reply[0] in _REFUSED:
        status = reply[0]
        if status == DENIED:
            raise PermissionDeniedError(text(reply[1]), text(reply[2]), "nothing was written")
        if status == WRONG_TYPE:
            found = f"expected another type, found {text(reply[2])}"
            raise CorruptDataError(text(reply[1]), found)
        raise store_full(text(reply[1]))
    return reply


_COMMAND = re.compile(r"run the '([^']+)' command")
_PIPED = re.compile(r"Command # \d+ \((\S+) ([^ )]+)")


def store_full(exc: ResponseError | str) -> StoreFullError:
    """Redis's OOM refusal as a StoreFullError. Redis refuses only a script's first write
    (later ones run, so that a script never stops half way), so nothing was written."""
    said = str(exc).split(" script: ", 1)[0].strip()
    return StoreFullError(said.removeprefix("OOM ").strip())


def permission_error(
    exc: ResponseError, key: str | None, command: str | None = None
) -> PermissionDeniedError:
    """Redis's NOPERM reply as a PermissionDeniedError: the command when Redis names it,
    else (a key outside the user's patterns) the key the operation was for and the
    ``command`` that named it, when the caller knows them."""
    found = _COMMAND.search(str(exc))
    if found:
        return PermissionDeniedError(found.group(1), None, str(exc))
    # redis-py names a pipeline's refused command, with its first argument (the key).
    piped = _PIPED.search(str(exc))
    if piped:
        return PermissionDeniedError(piped.group(1), piped.group(2), str(exc))
    return PermissionDeniedError(command, key, str(exc))


P = ParamSpec("P")
T = TypeVar("T")


def typed_permissions(
    method: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """``method`` with Redis's NOPERM replies raised as PermissionDeniedError, and a
    connection redis-py lost without saying so as ConnectionLostError (``lost``)."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except NoPermissionError as exc:
            raise permission_error(exc, None) from exc
        except (AttributeError, TypeError) as exc:
            raise_if_lost(exc)
            raise

    return wrapper


def _name(pipe: Any, i: int) -> str | None:
    """The name of a pipeline's i-th command (None when redis-py keeps it elsewhere)."""
    stack = getattr(pipe, "command_stack", None) or getattr(pipe, "_command_stack", None)
    try:
        return text(stack[i].args[0]) if stack is not None else None
    except (IndexError, AttributeError, TypeError):
        return None


async def execute(pipe: Any, keys: list[str]) -> list[Any]:
    """Run a pipeline whose i-th command reads ``keys[i]`` (the last key repeats for the
    rest); a key holding a foreign type becomes a CorruptDataError naming it."""
    try:
        replies: list[Any] = await pipe.execute(raise_on_error=False)
    except NoPermissionError as exc:  # EXEC refused: nothing ran
        raise permission_error(exc, keys[0]) from exc
    except ResponseError as exc:
        if "NOPERM" in str(exc):  # a queued command or EXEC refused: the transaction aborted
            raise permission_error(exc, keys[0]) from exc
        # MULTI refused: redis-py reports only the EXEC that followed (the queued reads ran
        # on their own, and are dropped with it).
        if "EXEC without MULTI" not in str(exc):
            raise
        raise PermissionDeniedError("multi", None, str(exc)) from exc
    for i, reply in enumerate(replies):
        if isinstance(reply, ResponseError) and "WRONGTYPE" in str(reply):
            raise CorruptDataError(keys[min(i, len(keys) - 1)], f"foreign type: {reply}")
        if isinstance(reply, NoPermissionError):
            raise permission_error(reply, keys[min(i, len(keys) - 1)], _name(pipe, i)) from reply
        if isinstance(reply, OutOfMemoryError):
            raise store_full(reply) from reply
        if isinstance(reply, Exception):
            raise reply
    return replies
