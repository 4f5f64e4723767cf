"""The backends of the contract suites (see conftest.py): fakeredis, fakeredis checking
slots under the cluster layout, fakeredis with every stored event validated on read
(``validate_reads``; the others rebuild the events this library wrote without validating
them), real Redis (also on the least-privilege user's database), a real Redis Cluster, and
Valkey, single node and cluster (``valkey``, ``valkey-cluster``: marked ``valkey``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from _acl import acl_user
from _servers import ACL_DB, on_db, skip_without
from _slots import SlotCheckedRedis, cluster_layout, flush_cluster
from redis_agent_sessions import SessionServiceConfig
from redis_agent_sessions.sessions._engine import SessionEngine

__all__ = [
    "BACKENDS",
    "CACHE_ON",
    "LEFT_OFF",
    "MEMORY_BACKENDS",
    "SEARCH_BACKENDS",
    "SMOKE",
    "STORED_DATA",
    "VALIDATION",
    "backend",
    "every_config",
    "pick",
    "worker",
]


BACKENDS = [
    pytest.param("fake", marks=pytest.mark.fake),
    pytest.param("fake-slots", marks=[pytest.mark.fake, pytest.mark.cluster]),
    pytest.param("validate", marks=pytest.mark.fake),
    pytest.param("real", marks=pytest.mark.real),
    pytest.param("cluster", marks=[pytest.mark.real, pytest.mark.cluster]),
    pytest.param("acl", marks=[pytest.mark.real, pytest.mark.acl]),
    pytest.param("valkey", marks=[pytest.mark.real, pytest.mark.valkey]),
    pytest.param(
        "valkey-cluster", marks=[pytest.mark.real, pytest.mark.cluster, pytest.mark.valkey]
    ),
]
"""The backends of the contract suites, for a fixture's ``params``."""

SEARCH_BACKENDS = [
    # Redis 8.2 with the search module, on database 0 (the only one it indexes): the
    # memory suites' search backend, with the shared index, per-app indexes (an operator's,
    # provisioned by the suites as they go), on a cluster, and as the least-privilege user.
    pytest.param("search", marks=[pytest.mark.real, pytest.mark.search]),
    pytest.param("search-per-app", marks=[pytest.mark.real, pytest.mark.search]),
    pytest.param(
        "search-cluster", marks=[pytest.mark.real, pytest.mark.search, pytest.mark.cluster]
    ),
    pytest.param("search-acl", marks=[pytest.mark.real, pytest.mark.search, pytest.mark.acl]),
]
"""The search module's backends (memory): :func:`backend` opens them too."""


def pick(*kinds: str) -> list[Any]:
    """The params of these backends (of BACKENDS and SEARCH_BACKENDS), in this order."""
    known = {p.values[0]: p for p in (*BACKENDS, *SEARCH_BACKENDS)}
    return [known[kind] for kind in kinds]


MEMORY_BACKENDS = pick(
    "fake", "real", "search", "search-per-app", "fake-slots", "cluster", "search-cluster",
    "acl", "search-acl", "valkey", "valkey-cluster",
)  # fmt: skip
"""The memory suites' backends: each layout and server, the search module's kinds, and the
least-privilege user on both backends (``validate`` checks session reads only)."""

_VALKEY = frozenset({"valkey", "valkey-cluster"})
LEFT_OFF = {
    # The ADK layers send the server nothing the session and memory suites do not already run
    # on Valkey; on Valkey they would double the time it adds to CI (three Pythons, two cores).
    "test_adk_parity": _VALKEY,
    "test_adk_compacted_reads": _VALKEY,
    "test_adk_memory": _VALKEY,
    # What Valkey itself does here is expire keys, the same on one node as on a cluster's
    # nodes; every test waits seconds for TTLs. For the same waits, not on ``validate``
    # (which validates events as they are read, not what expires) nor as the
    # least-privilege user (the sweep's commands are in every append's ACL plan, which the
    # rest of the suite runs as that user).
    "test_expiry": frozenset({"valkey-cluster", "validate", "acl"}),
}
"""Contract suites (module names) and the backends conftest.py deselects them on."""

CACHE_ON = frozenset({"fake", "fake-slots", "validate", "real", "cluster"})
"""The backends the contract suites' read-cache variant runs on. The cache lives in the
client: what it changes is which reads go to Redis (catch-ups from an event id instead of
whole sessions), and those differ by layout (one node, cluster; both on fakeredis and on a
real server), not by who serves them or as which user. The least-privilege user sends the
same commands as the admin, and Valkey answers them as Redis does (the cache-off runs there
prove both)."""

VALIDATION = {"test_bad_input": frozenset({"fake", "fake-slots", "real", "cluster"})}
"""Suites of input validation, which refuses before any command, and the backends they run
on (each layout, fakeredis and real, cache off: the cache is never reached). Every backend
runs the suites' ``test_every_backend_*`` tests, which check that each refuses the same
inputs through the same validation, and their tests of stored data (names holding one of
``STORED_DATA``), which Redis answers."""

STORED_DATA = ("every_backend", "corrupt", "foreign_type", "evicted")

SMOKE = {
    "test_sessions": frozenset({"real", "cluster"}),
    "test_memory": frozenset({"real", "search"}),
    "test_lost_connections": None,
    "test_tenants": None,
}
"""The real-server tests the other Pythons run besides the fakeredis suites (``-m "fake or
smoke"``, .ci/run): the session and memory contracts on a real node and cluster (cache
off), and the suites whose outcome depends on the Python's own asyncio or sockets (None:
the whole module)."""


@asynccontextmanager
async def backend(kind: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """An admin client of backend ``kind`` (one of :data:`BACKENDS` or
    :data:`SEARCH_BACKENDS`, or ``valkey-acl``: Valkey on the least-privilege user's database,
    for the ACL suites), empty before and after."""
    # The cleanup is in `finally`: a test that opens a backend itself, not through a fixture,
    # leaves it empty and closed when it fails too.
    if kind in ("fake", "fake-slots", "validate"):
        # A fresh server per test: a script that leaked a global would break later ones.
        server = fakeredis.FakeServer()
        client: Any
        if kind == "validate":
            validate_reads(monkeypatch)
        if kind in ("fake", "validate"):
            client = fakeredis.FakeAsyncRedis(server=server)
        else:
            cluster_layout(monkeypatch)
            client = SlotCheckedRedis(server=server)
        try:
            yield client
        finally:
            await client.aclose()
        return
    if kind.endswith("cluster"):
        variable = f"REDIS_{kind.upper().replace('-', '_')}_URL"
        cluster = RedisCluster.from_url(skip_without(variable))
        await flush_cluster(cluster)
        try:
            yield cluster
        finally:
            await flush_cluster(cluster)
            await cluster.aclose()
        return
    variable = {
        "valkey": "REDIS_VALKEY_URL",
        "valkey-acl": "REDIS_VALKEY_URL",
        "real": "REDIS_URL",
        "acl": "REDIS_URL",
    }
    url = skip_without(variable.get(kind, "REDIS_SEARCH_URL"))
    # The least-privilege suites run on another database than 0, which needs SELECT (the
    # search module's ones on 0: it indexes no other).
    client = Redis.from_url(on_db(url, ACL_DB) if kind in ("acl", "valkey-acl") else url)
    await client.flushdb()
    try:
        yield client
    finally:
        await client.flushdb()
        await client.aclose()


def every_config(
    monkeypatch: pytest.MonkeyPatch, change: Callable[[SessionServiceConfig], SessionServiceConfig]
) -> None:
    """Every session service built from now on in this test gets its config (or the
    default) through ``change`` first."""
    original = SessionEngine.__init__

    def changed(self: Any, client: Any, codec: Any, config: Any = None) -> None:
        original(self, client, codec, change(config or SessionServiceConfig()))

    monkeypatch.setattr(SessionEngine, "__init__", changed)


def validate_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every session service built from now on in this test validates what it reads."""
    every_config(monkeypatch, lambda config: config.model_copy(update={"validate_reads": True}))


@asynccontextmanager
async def worker(kind: str, admin: Any) -> AsyncIterator[Any]:
    """The client services run on over ``admin`` (from :func:`backend`): ``admin`` itself, or
    under ``acl`` the documented least-privilege user."""
    if kind != "acl":
        yield admin
        return
    async with acl_user(admin) as client:
        yield client
