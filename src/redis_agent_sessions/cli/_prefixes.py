"""Which other key prefixes hold sessions: the hint ``ls`` adds when it finds none.

Every prefix the library wrote sessions under has its ``<prefix>:apps`` sorted set (see
``redis_agent_sessions.keys``), so one SCAN for ``*:apps`` of type zset finds them, on
every primary of a cluster. The scan is bounded (an operator's hint must stay quick on a
large keyspace): it may miss prefixes past its budget, and then says nothing about them.
"""

from __future__ import annotations

import shlex
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from redis_agent_sessions._messages import plural
from redis_agent_sessions._redis.codec import text
from redis_agent_sessions._redis.lifecycle import is_cluster_client
from redis_agent_sessions.keys import KeySpace, unescape

__all__ = ["prefixes_hint"]

SCAN_COUNT = 1000
"""Keys a SCAN call looks at (a hint to the server)."""
SCAN_CALLS = 50
"""SCAN calls per node at most: about 50,000 keys looked at."""
MOST_PREFIXES = 1000
"""Prefixes found at most before the scan stops."""
NAMED = 5
"""Prefixes a hint names; more are counted."""
_SUFFIX = ":apps"


async def prefixes_hint(client: Any, prefix: str, app: str | None) -> str:
    """``; ...`` naming the other key prefixes holding sessions of ``app`` (or, when none
    does or ``app`` is None, of any app), each as the ``--key-prefix`` to use; empty when
    there are none, or when the server refuses to be scanned (an ACL, a managed service)."""
    try:
        found = [p for p in await _scan_prefixes(client) if p != prefix]
        if not found:
            return ""
        pipe = client.pipeline(transaction=False)
        for other in found:
            pipe.zcard(KeySpace(other).apps())
            if app is not None:
                pipe.zcard(KeySpace(other).app_sessions(app))
        replies = await pipe.execute()
        if app is not None:
            holding = {p: int(n) for p, n in zip(found, replies[1::2], strict=True) if n}
            if holding:
                named = [
                    f"--key-prefix {shlex.quote(p)} ({plural(n, 'session')})"
                    for p, n in holding.items()
                ]
                return f"; other key prefixes hold its sessions: {_few(named)}"
            replies = replies[::2]
        with_apps = [p for p, n in zip(found, replies, strict=True) if n]
        if not with_apps:
            return ""
        named = [
            f"--key-prefix {shlex.quote(p)} ({', '.join(await _apps(client, p))})"
            for p in with_apps[:NAMED]
        ]
        what = "sessions of other apps" if app is not None else "sessions"
        return f"; other key prefixes hold {what}: {_few(named, len(with_apps))}"
    except (RedisError, RedisClusterException):
        return ""


def _few(named: list[str], total: int | None = None) -> str:
    total = len(named) if total is None else total
    shown = ", ".join(named[:NAMED])
    return shown + (f" and {total - NAMED} more" if total > NAMED else "")


async def _apps(client: Any, prefix: str) -> list[str]:
    """The first few apps under ``prefix``, by their first session."""
    names = [unescape(text(a)) for a in await client.zrange(KeySpace(prefix).apps(), 0, 3)]
    return [*names[:3], "..."] if len(names) > 3 else names


async def _scan_prefixes(client: Any) -> list[str]:
    """The prefixes of the ``*:apps`` zsets a bounded SCAN of every primary finds, sorted."""
    found: set[str] = set()
    nodes = client.get_primaries() if is_cluster_client(client) else [None]
    for node in nodes:
        cursor = 0
        for _ in range(SCAN_CALLS):
            if node is None:
                cursor, keys = await client.scan(
                    cursor, match="*" + _SUFFIX, count=SCAN_COUNT, _type="zset"
                )
            else:
                cursors, keys = await client.scan(
                    cursor, match="*" + _SUFFIX, count=SCAN_COUNT, _type="zset", target_nodes=node
                )
                cursor = cursors[node.name]
            found.update(text(k)[: -len(_SUFFIX)] for k in keys)
            if not cursor or len(found) >= MOST_PREFIXES:
                break
        if len(found) >= MOST_PREFIXES:
            break
    # A key prefix holds no '{' or '}' (SessionServiceConfig refuses them): such a key is
    # some other program's, or an app's with an app named "apps".
    return sorted(p for p in found if p and not set("{}") & set(p))
