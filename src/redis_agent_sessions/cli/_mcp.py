"""``mcp``: serve one app's memory and sessions to MCP clients, over stdio (a client starts
the command) or streamable HTTP (clients connect to it), until SIGINT or SIGTERM.

stdout is the protocol's channel over stdio: this command writes only to stderr.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys

from redis_agent_sessions._messages import PROG
from redis_agent_sessions._redis.codec import check_id
from redis_agent_sessions.cli._context import Context, UsageError
from redis_agent_sessions.memory import RedisMemoryService

__all__ = ["TOKEN_ENV", "run"]

TOKEN_ENV = "RAS_MCP_TOKEN"
"""The environment variable holding the HTTP transport's bearer token (without
``--token-file``)."""


async def run(ctx: Context, args: argparse.Namespace) -> int:
    try:
        from redis_agent_sessions.mcp import build_server, is_loopback, serve_http
    except ImportError as exc:
        missing = (exc.name or "mcp").split(".")[0]  # the package to install, not its module
        raise UsageError(
            f"`mcp` needs the [mcp] extra ({missing} is missing): "
            "pip install 'redis-agent-sessions[mcp]'"
        ) from None
    app = check_id("app_name", args.app)
    user = None if args.user is None else check_id("user_id", args.user)
    http = args.transport == "http"
    if not http:
        given = [f for f, v in (("--host", args.host), ("--port", args.port)) if v is not None]
        if args.token_file is not None:
            given.append("--token-file")
        if given:
            raise UsageError(f"{', '.join(given)}: only with --transport http")
    host = args.host or "127.0.0.1"
    token = _token(args) if http else None
    if http and not token and not is_loopback(host):
        raise UsageError(
            f"--host {host} may be reached from other machines: give a bearer token "
            f"(--token-file FILE, or ${TOKEN_ENV}) that clients must send"
        )
    # The URL's memory settings (an embedder, a generator) apply, as for every worker.
    memory = RedisMemoryService.from_url(
        ctx.url, config=None if args.key_prefix is None else ctx.config, cluster=args.cluster
    )
    try:
        server = build_server(
            ctx.sessions, memory, app_name=app, user_id=user, allow_writes=args.allow_writes
        )
        mode = "read and write" if args.allow_writes else "read-only"
        whose = f"user {user!r} of app {app!r}" if user else f"app {app!r}"
        if http:
            port = 8000 if args.port is None else args.port
            try:
                await serve_http(
                    server,
                    host=host,
                    port=port,
                    token=token,
                    on_ready=lambda url: _say(f"{whose}, {mode}, on {url}"),
                )
            except OSError as exc:
                if exc.errno not in _CANNOT_LISTEN:
                    raise
                raise UsageError(f"cannot listen on {host} port {port}: {exc.strerror}") from None
        else:
            if sys.stdin is None or sys.stdout is None:
                raise UsageError("over stdio, the client talks on stdin and stdout: one is closed")
            _say(f"{whose}, {mode}, on stdio")
            try:
                await server.run_stdio_async()
            except Exception as exc:
                # The SDK's task group wraps what stopped it: the one line names that.
                raise _cause(exc) from None
    finally:
        await memory.aclose()
    return 0


_CANNOT_LISTEN = (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES)
"""What binding the socket meets when the address is taken, not this machine's, or
privileged: the operator's to change."""


def _cause(exc: Exception) -> Exception:
    """The first exception inside (nested) exception groups, or ``exc``."""
    while isinstance(inner := getattr(exc, "exceptions", None), tuple) and inner:
        if not isinstance(inner[0], Exception):
            break
        exc = inner[0]
    return exc


def _token(args: argparse.Namespace) -> str | None:
    """The bearer token: the first line of ``--token-file``, else $RAS_MCP_TOKEN."""
    if args.token_file is not None:
        try:
            with open(args.token_file, encoding="utf-8") as file:
                token = file.readline().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read --token-file {args.token_file!r}: {exc}") from None
        if not token:
            raise UsageError(f"--token-file {args.token_file!r}: the first line is empty")
        return token
    return os.environ.get(TOKEN_ENV, "").strip() or None


def _say(message: str) -> None:
    print(f"{PROG} mcp: {message}", file=sys.stderr, flush=True)
