"""Every key of a store, to prove that a refused call left it exactly as it was: take a
:func:`snapshot` before the call, and one after it must be equal.

Each key maps to ``(type, content, expires)``:

- its TYPE;
- its content: its DUMP, except for a hash, set or sorted set, its members in order. DUMP
  writes a large hash, set or sorted set in its table's order, which Redis changes as it
  rehashes, also on reads: equal content, other bytes. A list, string or stream keeps its
  DUMP, which for a stream holds more than its entries (its last id, its consumer groups).
  The one thing a hash's DUMP holds that its members do not, TTLs of single fields, the
  library never sets;
- its PEXPIRETIME, the millisecond it expires at (-1: never), so a TTL added, dropped or set
  again (even to the same length) shows.

Alike on every backend: on a cluster client SCAN visits every primary, and the reads of each
key go in two pipelines (every key's TYPE and PEXPIRETIME, then its content), which the
cluster client splits by node. fakeredis answers DUMP with its own encoding (a pickle), as
stable as a server's for a key nobody wrote. A key gone between the SCAN and its reads (it
expired) is left out, as a SCAN a moment later would have left it out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["Snapshot", "snapshot", "snapshot_of_failing_slot", "within"]

Snapshot = dict[Any, tuple[str, Any, int]]
"""Each key (bytes, as the client gives it) to its type, its content and when it expires."""


async def snapshot(client: Any, match: str | Iterable[str] | None = None) -> Snapshot:
    """Every key of the database (of every primary of a cluster), or only those matching
    the SCAN pattern ``match`` (or any of several patterns)."""
    patterns = [match] if match is None or isinstance(match, str) else list(match)
    found = [key for p in patterns async for key in client.scan_iter(match=p, count=1000)]
    keys = list(dict.fromkeys(found))
    if not keys:
        return {}
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
        pipe.pexpiretime(key)
    replies = await pipe.execute()
    kinds = [k.decode() if isinstance(k, bytes) else k for k in replies[0::2]]
    pipe = client.pipeline(transaction=False)
    for key, kind in zip(keys, kinds, strict=True):
        if kind == "hash":
            pipe.hgetall(key)
        elif kind == "set":
            pipe.smembers(key)
        elif kind == "zset":
            pipe.zrange(key, 0, -1, withscores=True)
        else:
            pipe.dump(key)
    contents = await pipe.execute()
    taken: Snapshot = {}
    for key, kind, content, expires in zip(keys, kinds, contents, replies[1::2], strict=True):
        if kind == "none":
            continue
        if isinstance(content, dict):
            content = sorted(content.items())
        elif isinstance(content, set):
            content = sorted(content)
        taken[key] = (kind, content, expires)
    return taken


def within(taken: Snapshot, prefix: str) -> Snapshot:
    """The part of ``taken`` whose keys start with ``prefix``: one cluster slot's
    (``ras:{app}:``) or one key prefix's."""
    wanted = prefix.encode()
    return {
        key: entry
        for key, entry in taken.items()
        if (key if isinstance(key, bytes) else key.encode()).startswith(wanted)
    }


async def snapshot_of_failing_slot(client: Any, service: Any, app: str) -> Snapshot:
    """The snapshot, or on the cluster layout only ``app``'s slot: there app keys are written
    in a second step, so when the app's slot refuses, the user-slot part has landed (its app
    write waits in the outbox) and the app's slot is what stays untouched."""
    everything = await snapshot(client)
    if service._engine.layout.name != "cluster":
        return everything
    return within(everything, f"ras:{{{app}}}")
