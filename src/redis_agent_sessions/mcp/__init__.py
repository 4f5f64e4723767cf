"""An MCP (Model Context Protocol) server over this library's memory and sessions
(``[mcp]`` extra): agents outside ADK's Python runtime (other frameworks, desktop
assistants, ADK's MCP toolset in any language) search, list and, when allowed, write the
same memory the library's workers do.

``redis-agent-sessions mcp`` runs it (docs/mcp.md); `build_server` makes one to serve
from Python, over stdio (the SDK's ``run_stdio_async``) or `serve_http`.
"""

from __future__ import annotations

from redis_agent_sessions.mcp._http import is_loopback, serve_http
from redis_agent_sessions.mcp._server import build_server
from redis_agent_sessions.mcp._tools import READS, WRITES

__all__ = ["READS", "WRITES", "build_server", "is_loopback", "serve_http"]
