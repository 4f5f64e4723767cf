"""Which server a client talks to, by its ``INFO server``: Redis or Valkey, and its version.

One reading for every place that names the server (``stats``, the readiness probe,
telemetry), so that they never disagree about a fork that reports another's version.
"""

from __future__ import annotations

from typing import Any

__all__ = ["server_identity"]


def server_identity(info: dict[str, Any]) -> tuple[str, str]:
    """(name, version) of a server by its ``INFO server``: Valkey reports ``redis_version``
    7.2.4 for clients that check it, and its own in ``valkey_version``."""
    if "valkey_version" in info:
        return "Valkey", str(info["valkey_version"])
    return "Redis", str(info.get("redis_version", "unknown"))
