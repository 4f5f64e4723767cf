"""The memory store, assembled once per service on this package's models: entries kept in
Redis hashes, found by the backend the first worker recorded (RediSearch, or postings kept
by the write scripts).

The parts share one ``Context`` (client, settings, the backend opened on
first use). The path of a write: the service -> ``Writes`` (checks, the
entries' analysis, vectors; with a generator, ``Consolidator``) ->
``MemoryStore`` (``memory_put.lua``). Of a search: the service ->
``Reads`` -> the backend's ranker (``_ranking``), fused with the nearest
vectors (``_vectors``) -> the entries read back.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

from redis_agent_sessions._health import (
    PROBE_ID,
    Probe,
    Readiness,
    memory_probe,
    redis_probe,
    run_checks,
)
from redis_agent_sessions._redis.identity import read_identity
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory._consolidate import FactSettings
from redis_agent_sessions.memory._context import DEFAULT_CONTEXT_TURNS, Context
from redis_agent_sessions.memory._facts import FactStore
from redis_agent_sessions.memory._generators import MemoryGenerator
from redis_agent_sessions.memory._index_defs import Provisioned
from redis_agent_sessions.memory._jobs import JobQueue
from redis_agent_sessions.memory._models import Backend
from redis_agent_sessions.memory._reads import Reads
from redis_agent_sessions.memory._record import recorded_vectors
from redis_agent_sessions.memory._search import IndexSearch
from redis_agent_sessions.memory._store import MemoryStore
from redis_agent_sessions.memory._vectors import Semantic
from redis_agent_sessions.memory._writes import Writes

__all__ = ["MemoryEngine"]


class MemoryEngine:
    """The memory operations of one service, on the core models: the parts of one service,
    wired to one client and config."""

    def __init__(
        self,
        client: Any,
        *,
        config: SessionServiceConfig,
        backend: Backend,
        semantic: Semantic | None = None,
        generator: MemoryGenerator | None = None,
        facts: FactSettings | None = None,
        context_turns: int = DEFAULT_CONTEXT_TURNS,
    ) -> None:
        self.ctx = Context(
            client,
            config=config,
            backend=backend,
            semantic=semantic,
            generator=generator,
            facts=facts,
            context_turns=context_turns,
        )
        self.writes = Writes(self.ctx)
        """add_session, add_events, add_memory, delete."""
        self.reads = Reads(self.ctx)
        """search."""

    @property
    def config(self) -> SessionServiceConfig:
        return self.ctx.config

    @property
    def client(self) -> Any:
        return self.ctx.client

    @property
    def keys(self) -> KeySpace:
        return self.ctx.keys

    @property
    def semantic(self) -> Semantic | None:
        return self.ctx.semantic

    @property
    def generator(self) -> MemoryGenerator | None:
        return self.ctx.generator

    @property
    def fact_settings(self) -> FactSettings:
        return self.ctx.fact_settings

    @property
    def jobs(self) -> JobQueue:
        """Background generation's queue."""
        return self.ctx.jobs

    @property
    def telemetry(self) -> Any:
        """The Telemetry of the instrumented service, or None (telemetry off)."""
        return self.ctx.telemetry

    async def backend(self) -> Literal["search", "plain"]:
        return await self.ctx.backend()

    async def facts(self) -> FactStore:
        """The learned facts' store (on the backend's entries)."""
        return await self.ctx.facts()

    def instrument(self, service: object, operations: tuple[str, ...]) -> None:
        """Spans for ``service``'s operations (telemetry on)."""
        from redis_agent_sessions._telemetry import Telemetry, instrument  # only when on

        topology = self.ctx.topology
        telemetry = Telemetry(self.config, topology.endpoint, lambda: read_identity(topology))
        instrument(service, operations, telemetry)
        self.ctx.telemetry = self.ctx.jobs.telemetry = telemetry

    async def check_ready(self, timeout: float, app: str = PROBE_ID) -> Readiness:
        """Reach every node, open the backend (recorded or detected, its index made), and
        run a search for a user who has no memories: see ``redis_agent_sessions._health``."""

        async def backend() -> str:
            return f"{await self.backend()} backend"

        async def search() -> str:
            # Keyword only: a probe every few seconds must not pay for an embedding call.
            await self.reads.search(
                app_name=app, user_id=PROBE_ID, query="readiness probe", vectors=False
            )
            return "a search runs"

        probes: list[tuple[str, Probe]] = [
            ("redis", redis_probe(self.ctx.topology)),
            ("memory backend", backend),
            ("search", search),
        ]
        # Memory entries never have a TTL: only an allkeys-* policy evicts them.
        probes.append(("memory", memory_probe(self.ctx.topology, None)))
        return await run_checks(probes, timeout)

    async def app_indexes(
        self, app: str, *, vectors: tuple[int, str] | None, rebuild: bool, drop: bool = False
    ) -> Provisioned | None:
        """An operator's step (``tenant create`` / ``tenant drop``): make (or drop) the
        app's own indexes; None on the plain backend, which has none."""
        _, search = await self.ctx.ready()
        if not isinstance(search, IndexSearch):
            return None
        if drop:
            return Provisioned(dropped=await search.definitions.drop(app))
        return await search.definitions.provision(app, vectors=vectors, rebuild=rebuild)

    async def adopt_vectors(self, app: str, user: str) -> MemoryStore:
        """For ``reembed``: make this service's embedder the store's (its dimension and
        model recorded, a vector index of another definition made again), ready for the
        writes of (app, user). Entries keep their vectors until re-embedded."""
        ctx = self.ctx
        if not ctx.adopting:
            await ctx.client.set(ctx.keys.memory_vectors(), orjson.dumps(ctx.vector_record()))
            ctx.adopting = True
        store, _ = await ctx.ready(app, user)
        return store

    async def recorded_vectors(self) -> dict[str, Any] | None:
        """The store's vector record (see ``recorded_vectors``)."""
        return await recorded_vectors(self.ctx.client, self.ctx.keys)
