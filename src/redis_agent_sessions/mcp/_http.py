"""The streamable HTTP transport: loopback by default, and a bearer token required of every
request when the server listens anywhere else."""

from __future__ import annotations

import hmac
import ipaddress
import socket
from collections.abc import Callable
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

from redis_agent_sessions.errors import InvalidInputError

__all__ = ["PATH", "is_loopback", "serve_http"]

PATH = "/mcp"
"""Where the server answers (the SDK's default, what clients' examples use)."""


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach ``host``: ``localhost`` or a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything, now or later


async def serve_http(
    server: MCPServer[Any],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``server`` over streamable HTTP at ``http://host:port/mcp`` until SIGINT or
    SIGTERM. A ``token``, required unless ``host`` is loopback, must come with every request
    as ``Authorization: Bearer <token>``. ``on_ready(url)`` is called once the socket listens
    (``port=0`` picks a free port, which the URL names)."""
    if not token and not is_loopback(host):
        raise InvalidInputError(
            f"serving on {host!r}, which other machines may reach, needs a bearer token"
        )
    app: ASGIApp = server.streamable_http_app(streamable_http_path=PATH, host=host)
    if token:
        app = _Bearer(app, token)
    sock = _listen(host, port)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    web = uvicorn.Server(config)
    if on_ready is not None:
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        on_ready(f"http://{shown}:{bound_port}{PATH}")
    try:
        await web.serve(sockets=[sock])
    finally:
        sock.close()


def _listen(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


class _Bearer:
    """Lets through only the requests carrying the token (compared in constant time)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan: the SDK's session manager starts there
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        body = (
            b'{"error": "invalid_token", "error_description": "a valid bearer token is required"}'
        )
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer error="invalid_token"'),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
