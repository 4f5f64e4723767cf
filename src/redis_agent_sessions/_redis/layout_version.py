"""The layout version a store records (``<prefix>:layout``, docs/layout-spec.md): read once
when a service starts, so that a worker never misreads a store that workers of a newer layout
wrote, and recorded by the first write that finds it missing.

One string key, in its own slot on a cluster: one GET at start, one ``SET NX`` at most per
service, never a downgrade (NX: a newer worker's value is never overwritten).
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import NoPermissionError, ResponseError

from redis_agent_sessions._redis.scripts import permission_error
from redis_agent_sessions.errors import LayoutVersionError

__all__ = ["LAYOUT_VERSION", "check_layout", "record_layout"]

LAYOUT_VERSION = 1
"""The layout this release reads and writes."""


async def check_layout(client: Any, key: str) -> bool:
    """Whether the store records its layout (False: none yet, a store this release may
    record as its own); LayoutVersionError when it records one newer than this release's."""
    try:
        raw = await client.get(key)
    except NoPermissionError as exc:
        raise permission_error(exc, key, "get") from exc
    if raw is None:
        # A store written before the layout was recorded is layout 1.
        return False
    found = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    if not (found.isascii() and found.isdigit() and 0 < int(found) <= LAYOUT_VERSION):
        raise LayoutVersionError(key, found, LAYOUT_VERSION)
    return True


async def record_layout(client: Any, key: str) -> None:
    """Record this release's layout unless the store records one. A user that may only
    read the key (a tenant's: the operator's ``tenant create`` records it) leaves it."""
    try:
        await client.set(key, str(LAYOUT_VERSION), nx=True)
    except NoPermissionError:
        return
    except ResponseError as exc:
        if "NOPERM" not in str(exc):
            raise
