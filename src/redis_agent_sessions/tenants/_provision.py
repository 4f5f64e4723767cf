"""An operator's steps for one tenant app, with an admin connection: make its indexes and
list it (``provision_tenant``), or remove everything of it (``drop_tenant``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from redis_agent_sessions._redis.codec import check_id, text
from redis_agent_sessions._redis.layout_version import check_layout, record_layout
from redis_agent_sessions._redis.lost import typed_losses
from redis_agent_sessions._redis.topology import Topology
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.keys import KeySpace, escape
from redis_agent_sessions.memory._engine import MemoryEngine
from redis_agent_sessions.memory._models import Backend
from redis_agent_sessions.memory._record import recorded_vectors
from redis_agent_sessions.sessions._apps import AppListing
from redis_agent_sessions.tenants._rules import tenant_acl_rules

__all__ = ["TenantReport", "drop_tenant", "provision_tenant", "tenant_config"]

_UNLINK_BATCH = 500


@dataclass
class TenantReport:
    """What an operator's step did for one app."""

    app_name: str
    backend: str
    """The store's memory backend: ``search`` (the app has indexes) or ``plain``."""
    made: list[str] = field(default_factory=list)
    """Index names made now (``provision_tenant``)."""
    found: list[str] = field(default_factory=list)
    """Index names that existed with the right definition."""
    rebuilt: list[str] = field(default_factory=list)
    """Vector indexes of another definition dropped and made again."""
    dropped: list[str] = field(default_factory=list)
    """Index names dropped (``drop_tenant``)."""
    listed: bool = False
    """Whether the app is in the registry of apps after the step."""
    keys_deleted: int = 0
    """Keys of the app deleted (``drop_tenant``)."""
    rules: list[str] = field(default_factory=list)
    """The tenant user's ACL rules (``provision_tenant``), without a password."""
    cluster: bool = False


def tenant_config(config: SessionServiceConfig | None) -> SessionServiceConfig:
    """``config`` with ``memory_index="per_app"``: a tenant's indexes are its app's."""
    config = config or SessionServiceConfig()
    if config.memory_index == "per_app":
        return config
    return SessionServiceConfig(**{**config.model_dump(), "memory_index": "per_app"})


@typed_losses
async def provision_tenant(
    client: Any,
    app_name: str,
    *,
    config: SessionServiceConfig | None = None,
    backend: Backend = "auto",
    vector_index: str = "HNSW",
    rebuild_vectors: bool = False,
    facts: bool = True,
) -> TenantReport:
    """Make one app ready for a Redis user limited to its keys, as an admin: the memory
    backend recorded (detected under ``auto``) if no worker did yet, on the search backend
    the app's keyword index (on a cluster, one on every primary) and, once the store
    records its vectors' dimensions (an embedder has written, or ``reembed`` ran), its
    vector indexes (``vector_index``: HNSW, FLAT or SVS-VAMANA); the app listed in the
    registry of apps, and the store's layout version recorded. Idempotent: run it again
    after adding an embedder or primaries."""
    app = check_id("app_name", app_name)
    config = tenant_config(config)
    keys = KeySpace(config.key_prefix)
    engine = MemoryEngine(client, config=config, backend=backend)
    chosen = await engine.backend()
    topology = Topology(client, cluster=config.cluster)
    report = TenantReport(app, chosen, cluster=topology.cluster)
    vectors = None
    if chosen == "search":
        record = await recorded_vectors(client, keys)
        if record is not None:
            vectors = (int(record["dimensions"]), _algorithm(vector_index))
        done = await engine.app_indexes(app, vectors=vectors, rebuild=rebuild_vectors)
        assert done is not None
        report.made, report.found, report.rebuilt = done.made, done.found, done.rebuilt
    await topology.ready()
    # The tenant's user may only read the layout record: its workers cannot record it.
    if not await check_layout(client, keys.layout()):
        await record_layout(client, keys.layout())
    await AppListing(client, keys).list(app, time.time())
    report.listed = True
    report.rules = tenant_acl_rules(
        keys, app, search=chosen == "search", cluster=topology.routes_by_slot, facts=facts
    )
    return report


@typed_losses
async def drop_tenant(
    client: Any, app_name: str, *, config: SessionServiceConfig | None = None
) -> TenantReport:
    """Remove one app, as an admin: its indexes (on the search backend), every key its
    tenant's key rules cover (sessions, every scope of state, memory: found by SCAN of
    those patterns on every primary, unlinked in batches) and its registry entry. Its
    Redis user is the caller's to delete (``ACL DELUSER``)."""
    app = check_id("app_name", app_name)
    config = tenant_config(config)
    keys = KeySpace(config.key_prefix)
    engine = MemoryEngine(client, config=config, backend="search")
    recorded = await client.get(keys.memory_backend())
    backend = "plain" if recorded is None else text(recorded)
    report = TenantReport(app, backend)
    if backend == "search":
        done = await engine.app_indexes(app, vectors=None, rebuild=False, drop=True)
        report.dropped = [] if done is None else done.dropped
    topology = Topology(client, cluster=config.cluster)
    await topology.ready()
    report.cluster = topology.cluster
    patterns = [rule[1:] for rule in keys.app_acl_keys(app) if rule.startswith("~")]
    for pattern in patterns:
        report.keys_deleted += await _unlink_matching(client, pattern, topology.cluster)
    await client.zrem(keys.apps(), escape(app))
    return report


async def _unlink_matching(client: Any, pattern: str, cluster: bool) -> int:
    """Unlink every key matching ``pattern`` (redis-py's SCAN walk: every primary of a
    cluster), a batch at a time."""
    deleted = 0
    batch: list[Any] = []
    async for key in client.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) == _UNLINK_BATCH:
            deleted += await _unlink(client, batch, cluster)
            batch = []
    return deleted + (await _unlink(client, batch, cluster) if batch else 0)


async def _unlink(client: Any, batch: list[Any], cluster: bool) -> int:
    if not cluster:
        return int(await client.unlink(*batch))
    # One slot per key on a cluster: a pipeline sends each to its node.
    pipe = client.pipeline(transaction=False)
    for key in batch:
        pipe.execute_command("UNLINK", key)
    return sum(int(n) for n in await pipe.execute())


def _algorithm(name: str) -> str:
    algorithm = name.upper()
    if algorithm not in ("HNSW", "FLAT", "SVS-VAMANA"):
        raise InvalidInputError(f"vector_index must be HNSW, FLAT or SVS-VAMANA: {name!r}")
    return algorithm
