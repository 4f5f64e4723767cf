"""Which server a client talks to, by its ``INFO server``: Redis or Valkey, and its version.

One reading for every place that names the server (``stats``, the readiness probe,
telemetry), so that they never disagree about a fork that reports another's version.
Managed services may refuse ``INFO`` to the connection's user (fakeredis has none): the
server is then unknown, which is never a failure.
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import ResponseError

from redis_agent_sessions._redis.topology import Topology

__all__ = ["UNKNOWN", "read_identity", "server_identity"]

UNKNOWN = "unknown"


def server_identity(info: Any) -> tuple[str, str]:
    """(name, version) of a server by its ``INFO server`` (version ``unknown`` when the
    reply does not say): Valkey reports ``redis_version`` 7.2.4 for clients that check it,
    and its own in ``valkey_version`` (with ``server_name:valkey``)."""
    fields: dict[Any, Any] = info if isinstance(info, dict) else {}
    if "valkey_version" in fields or fields.get("server_name") == "valkey":
        return "Valkey", str(fields.get("valkey_version", UNKNOWN))
    return "Redis", str(fields.get("redis_version", UNKNOWN))


async def read_identity(topology: Topology) -> tuple[str, str] | None:
    """(name, version) of the server (on a cluster, of one node: every node of a deployment
    runs the same build), or None when ``INFO`` is refused or unknown to it (for good: a
    connection error raises, worth another try)."""
    try:
        info = await topology.any_node("INFO", "server")
    except ResponseError:
        return None
    return server_identity(info)
