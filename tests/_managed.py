"""A user with only what the managed services allow (docs/managed-services.md), made on a real
server: the strictest of Memorystore for Valkey, Memorystore for Redis Cluster and ElastiCache.

What each service refuses, and where that comes from:

- ElastiCache (Valkey, Redis OSS), node-based clusters: ``bgrewriteaof bgsave config debug
  migrate replicaof save slaveof shutdown sync``
  (https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/ClientConfig.RestrictedCommands.html).
  MODULE is not on that list, but ElastiCache loads no modules of a user's choosing
  (MemoryDB's list, its sibling, names ``module``, ``psync`` and ``acl setuser``:
  https://docs.aws.amazon.com/memorydb/latest/devguide/restrictedcommands.html).
- Memorystore for Valkey and Memorystore for Redis Cluster answer NOPERM to every command not
  on their "supported commands" lists
  (https://cloud.google.com/memorystore/docs/valkey/supported-commands,
  https://cloud.google.com/memorystore/docs/cluster/supported-commands). The lists name
  ``CONFIG | HELP`` alone of CONFIG (so CONFIG GET/SET are refused), EVAL/EVALSHA, INFO, KEYS,
  ``CLUSTER | SLOTS`` and ``COMMAND | ...``; they name no DEBUG. Only their first part could be
  read for this list: MEMORY, MODULE and ACL are assumed refused (the strictest reading),
  SCRIPT LOAD and SCAN assumed allowed (EVALSHA is, and nothing works without them). WAITAOF
  (``write_concern="aof"`` only) is left out: Redis 7.0, which the tests run, has no such
  command to refuse.

So the user here has every command but the union of those, on keys under one prefix only.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

from redis.asyncio.cluster import RedisCluster

REFUSED = (
    # ElastiCache's restricted commands (and Memorystore's: none is on its lists).
    "bgrewriteaof",
    "bgsave",
    "config",
    "debug",
    "migrate",
    "replicaof",
    "save",
    "slaveof",
    "shutdown",
    "sync",
    "psync",
    # Not confirmed on Memorystore's lists: refused here, the strictest reading.
    "module",
    "memory",
    "acl",
    "monitor",
    "failover",
)


def rules(prefix: str, password: str) -> list[str]:
    """The ACL rules of the managed user: keys under ``prefix`` only, no channels."""
    return [
        "on",
        f">{password}",
        "resetkeys",
        f"~{prefix}:*",
        "resetchannels",
        "+@all",
        *(f"-{command}" for command in REFUSED),
    ]


@asynccontextmanager
async def managed_user(admin: Any, prefix: str) -> AsyncIterator[tuple[str, str]]:
    """``(name, password)`` of a fresh user with ``rules`` on every node of ``admin``'s
    server (a RedisCluster's every node), deleted afterwards."""
    cluster = isinstance(admin, RedisCluster)
    if cluster:
        await admin.initialize()
    nodes = admin.get_nodes() if cluster else [None]
    name, password = f"ras-managed-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    for node in nodes:
        options = {"target_nodes": node} if cluster else {}
        await admin.execute_command(
            "ACL", "SETUSER", name, "reset", *rules(prefix, password), **options
        )
    try:
        yield name, password
    finally:
        for node in nodes:
            options = {"target_nodes": node} if cluster else {}
            await admin.execute_command("ACL", "DELUSER", name, **options)


def user_url(url: str, name: str, password: str, **settings: str) -> str:
    """``url`` (``redis://host:port[/db]``) logged in as ``name``, with ``settings`` in its
    query: the library's own (``key_prefix``, ``memory_backend``, ``cluster``)."""
    scheme, rest = url.split("://", 1)
    rest = rest.split("@")[-1].split("?", 1)[0]
    query = "&".join(f"{k}={quote(v)}" for k, v in settings.items())
    return f"{scheme}://{quote(name)}:{quote(password)}@{rest}" + (f"?{query}" if query else "")
