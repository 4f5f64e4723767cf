"""Where the sessions an operator asked for may be: the hints ``ls`` and ``stats`` add when
they find none. ``apps_hint`` names this prefix's apps whose name is close to the one asked
for (``tutorial-app`` for ``tutorial_app``), from its apps index (bounded: ``MOST_APPS``).
``prefixes_hint`` names the other key prefixes that hold sessions.

Every prefix the library wrote sessions under has its ``<prefix>:apps`` sorted set (see
``redis_agent_sessions.keys``), so one SCAN for ``*:apps`` of type zset finds them, on
every primary of a cluster. The scan is bounded (an operator's hint must stay quick on a
large keyspace): it may miss prefixes past its budget, and then says nothing about them.
"""

from __future__ import annotations

import difflib
import re
import shlex
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from redis_agent_sessions._messages import plural
from redis_agent_sessions._redis.codec import text
from redis_agent_sessions._redis.lifecycle import is_cluster_client
from redis_agent_sessions.keys import KeySpace, unescape

__all__ = ["apps_hint", "prefixes_hint"]

SCAN_COUNT = 1000
"""Keys a SCAN call looks at (a hint to the server)."""
SCAN_CALLS = 50
"""SCAN calls per node at most: about 50,000 keys looked at."""
MOST_PREFIXES = 1000
"""Prefixes found at most before the scan stops."""
NAMED = 5
"""Prefixes a hint names; more are counted."""
_SUFFIX = ":apps"
MOST_APPS = 10_000
"""Apps of the prefix's index a did-you-mean compares with at most (the first created)."""
SIMILAR = 0.75
"""How alike (difflib's ratio, 0 to 1) a name must be to be suggested."""


def _folded(name: str) -> str:
    """A name as a typo leaves it alike: case, and ``-``, ``_``, ``.``, space as one."""
    return re.sub(r"[-_. ]+", "_", name.casefold())


async def apps_hint(client: Any, keys: KeySpace, app: str) -> str:
    """``; did you mean ...?`` naming this prefix's apps whose name is close to ``app``'s
    (the same but for case or separators first); empty when none is, or when the apps
    index cannot be read."""
    try:
        raw = await client.zrange(keys.apps(), 0, MOST_APPS - 1)
    except (RedisError, RedisClusterException):
        return ""
    names = [n for n in (unescape(text(m)) for m in raw) if n != app]
    wanted = _folded(app)
    close = [n for n in names if _folded(n) == wanted]
    if not close:
        by_folded: dict[str, list[str]] = {}
        for name in names:
            by_folded.setdefault(_folded(name), []).append(name)
        matches = difflib.get_close_matches(wanted, by_folded, n=3, cutoff=SIMILAR)
        close = [name for folded in matches for name in by_folded[folded]]
    if not close:
        return ""
    return f"; did you mean {' or '.join(repr(n) for n in close[:3])}?"


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
