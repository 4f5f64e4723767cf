"""Every key of a store, to prove that a refused call left it exactly as it was: take a
`snapshot` before the call, and one after it must be equal.

Each key maps to ``(type, content, expires)``:

- its TYPE;
- its content: its DUMP, except for a hash or set, its members sorted. DUMP writes a large
  hash or set in its table's order, which Redis changes as it rehashes, also on reads:
  equal content, other bytes. A sorted set's DUMP follows its skiplist, in score order, so
  it stays, as a stream's, which holds more than its entries (its last id, its consumer
  groups). The one thing a hash's DUMP holds that its members do not, TTLs of single
  fields, the library never sets;
- in fakeredis, whose DUMP is a pickle of its own objects, a sorted set is its members and
  scores in order too: the pickle of one changes when a member is removed and added back
  (a write undone, as a refused call's registration is) though the set is the same;
- its PEXPIRETIME, the millisecond it expires at (-1: never), so a TTL added, dropped or set
  again (even to the same length) shows.

Alike on every backend: on a cluster client SCAN visits every primary, and the reads go in
pipelines, which the cluster client splits by node: one of every key's TYPE (in a large
store, one SCAN per type instead), then one of its PEXPIRETIME and content. fakeredis answers
DUMP with its own encoding (see above), as stable as a server's for a key nobody wrote. A key
gone between the SCAN and its reads (it expired) is left out, as a SCAN a moment later would
have left it out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import fakeredis

__all__ = ["Snapshot", "snapshot", "snapshot_of_failing_slot", "within"]

Snapshot = dict[Any, tuple[str, Any, int]]
"""Each key (bytes, as the client gives it) to its type, its content and when it expires."""


TYPES = ("hash", "set", "zset", "string", "list", "stream")
"""The types SCAN can pick out by ``TYPE``: any other key (a module's) is asked its TYPE."""

TYPED_SCANS_FROM = 100
"""From this many keys on, the types come from one SCAN per type instead of a TYPE per key:
cheaper past about a hundred keys (a snapshot of 10,000 keys in fakeredis takes half as
long), dearer below, where the six round trips outweigh the TYPEs they save."""


async def snapshot(client: Any, match: str | Iterable[str] | None = None) -> Snapshot:
    """Every key of the database (of every primary of a cluster), or only those matching
    the SCAN pattern ``match`` (or any of several patterns)."""
    patterns: list[str | None] = [match] if match is None or isinstance(match, str) else [*match]
    keys = await _scan(client, patterns)
    if not keys:
        return {}
    kinds = await _types(client, patterns, keys)
    fake = isinstance(client, fakeredis.FakeAsyncRedis)
    pipe = client.pipeline(transaction=False)
    for key, kind in kinds.items():
        pipe.pexpiretime(key)
        if kind == "hash":
            pipe.hgetall(key)
        elif kind == "set":
            pipe.smembers(key)
        elif kind == "zset" and fake:
            pipe.zrange(key, 0, -1, withscores=True)
        else:
            pipe.dump(key)
    replies = await pipe.execute()
    taken: Snapshot = {}
    for (key, kind), expires, content in zip(
        kinds.items(), replies[::2], replies[1::2], strict=True
    ):
        if kind == "none":  # expired since the SCAN
            continue
        if isinstance(content, dict):
            content = sorted(content.items())
        elif isinstance(content, set):
            content = sorted(content)
        taken[key] = (kind, content, expires)
    return taken


async def _types(client: Any, patterns: list[str | None], keys: list[Any]) -> dict[Any, str]:
    """Each of ``keys`` to its type: in a large store from one SCAN per type, else (and for
    a type no SCAN names) from a TYPE each."""
    kinds: dict[Any, str] = {}
    if len(keys) >= TYPED_SCANS_FROM:
        wanted = set(keys)
        for kind in TYPES:
            kinds.update((k, kind) for k in await _scan(client, patterns, kind) if k in wanted)
    unknown = [key for key in keys if key not in kinds]
    if unknown:
        pipe = client.pipeline(transaction=False)
        for key in unknown:
            pipe.type(key)
        for key, kind in zip(unknown, await pipe.execute(), strict=True):
            kinds[key] = kind.decode() if isinstance(kind, bytes) else kind
    return kinds


async def _scan(client: Any, patterns: list[str | None], kind: str | None = None) -> list[Any]:
    """The keys matching any of ``patterns`` (None: every key), of type ``kind`` if given."""
    found: dict[Any, None] = {}
    for pattern in patterns:
        async for key in client.scan_iter(match=pattern, count=1000, _type=kind):
            found[key] = None
    return list(found)


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
