"""The MCP server: the tools of `_tools` on the SDK's ``MCPServer``, scoped to one
app (and, when the operator says so, one user), read-only unless writes are allowed."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import ValidationError

from redis_agent_sessions._redis.codec import check_id
from redis_agent_sessions._version import __version__
from redis_agent_sessions.mcp._tools import READS, WRITES, Tools
from redis_agent_sessions.memory import RedisMemoryService
from redis_agent_sessions.sessions import RedisSessionService

__all__ = ["build_server"]

_USER = "user_id"


def build_server(
    sessions: RedisSessionService,
    memory: RedisMemoryService,
    *,
    app_name: str,
    user_id: str | None = None,
    allow_writes: bool = False,
) -> MCPServer[Any]:
    """An MCP server whose tools read (and with ``allow_writes``, write) the memory and
    sessions of ``app_name``. With ``user_id``, every tool is that user's and takes no
    ``user_id`` argument; without, each call names its user. The services stay open: their
    owner closes them. Serve it with the SDK (``run_stdio_async``) or `serve_http`."""
    app = check_id("app_name", app_name)
    user = None if user_id is None else check_id("user_id", user_id)
    whose = f"user {user!r} of app {app!r}" if user else f"the users of app {app!r}"
    server = _Server(
        name="redis-agent-sessions",
        version=__version__,
        instructions=(
            f"Long-term memory and conversation sessions of {whose}, stored in Redis. "
            "search_memory before answering about the past; "
            + ("add_memory to remember something." if allow_writes else "this server is read-only.")
        ),
        log_level="WARNING",
        user_fixed=user is not None,
        allow_writes=allow_writes,
    )
    tools = Tools(sessions, memory, app)
    for name in READS + (WRITES if allow_writes else ()):
        fn = getattr(tools, name)
        server.register(name, _adapted(fn, user), write=name in WRITES)
    return server


def _adapted(
    tool: Callable[..., Awaitable[dict[str, Any]]], user: str | None
) -> Callable[..., Awaitable[str]]:
    """``tool`` answering compact JSON (the SDK would indent it: tokens a model pays for),
    and with ``user``, for that user only: the SDK reads the tool's arguments from its
    signature, which then has no ``user_id``."""
    signature = inspect.signature(tool, eval_str=True)
    bound = {} if user is None else {_USER: user}

    @functools.wraps(tool)
    async def adapted(**kwargs: Any) -> str:
        return orjson.dumps(await tool(**kwargs, **bound)).decode()

    parameters = [p for p in signature.parameters.values() if p.name not in bound]
    adapted.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=parameters, return_annotation=str
    )
    del adapted.__wrapped__  # inspect would follow it back to the tool's own signature
    return adapted


class _Server(MCPServer[Any]):
    """The SDK's server, answering a call it would take or misread in words that name the
    argument (or the missing permission) at fault."""

    def __init__(self, *, user_fixed: bool, allow_writes: bool, **settings: Any) -> None:
        super().__init__(**settings)
        self._user_fixed, self._allow_writes = user_fixed, allow_writes
        self._arguments: dict[str, list[str]] = {}

    def register(self, name: str, fn: Callable[..., Awaitable[Any]], *, write: bool) -> None:
        self.add_tool(
            fn,
            name=name,
            annotations=ToolAnnotations(
                read_only_hint=not write,
                destructive_hint=name == "delete_memory",
                idempotent_hint=not write or name != "add_memory",
                open_world_hint=False,
            ),
            structured_output=False,
        )
        self._arguments[name] = list(inspect.signature(fn, eval_str=True).parameters)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any] | None = None
    ) -> CallToolResult | Any:
        if name in WRITES and not self._allow_writes:
            raise ToolError(
                f"{name}: this server is read-only, and {name} writes memory: its operator "
                "allows writes with --allow-writes"
            )
        known = self._arguments.get(name)
        if known is not None:
            self._check_names(name, arguments, known)
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise  # a crash: the SDK logs it and tells the client no more than the tool's name
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(_invalid(name, exc.__cause__)) from exc.__cause__
            if isinstance(exc.__cause__, ToolError):
                # The tool's own words, prefixed as the refusals above are (not "Error
                # executing tool ...", the SDK's).
                raise ToolError(f"{name}: {exc.__cause__}") from exc.__cause__
            raise

    def _check_names(self, name: str, arguments: dict[str, Any], known: list[str]) -> None:
        """The SDK would drop an argument it does not know: the caller is told instead."""
        for given in arguments:
            if given in known:
                continue
            if given == _USER and self._user_fixed:
                raise ToolError(
                    f"{name}: no argument {_USER!r}: this server serves one user, whom its "
                    "operator chose"
                )
            raise ToolError(
                f"{name}: unknown argument {given!r} (it takes {', '.join(known) or 'none'})"
            )


def _invalid(name: str, error: ValidationError) -> str:
    """``search_memory: missing argument 'query'``, one problem a clause, without the
    rejected values (the caller's data) or pydantic's links."""
    problems = []
    for item in error.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in item["loc"]) or "arguments"
        if item["type"] == "missing":
            problems.append(f"missing argument {where!r}")
        else:
            problems.append(f"argument {where!r}: {item['msg']}")
    return f"{name}: {'; '.join(problems)}"
