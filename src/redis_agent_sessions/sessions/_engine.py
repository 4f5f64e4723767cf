"""The session store, assembled once per service for a pair of session/event model classes.

The core service runs it with this package's models, the google-adk extra with ADK's own;
models are reached only through a ``ModelCodec``. The topology is decided
here, once (``choose_layout``), and every part asks the layout it was given.

The path of an append: the service -> ``Writes`` (checks, ``temp:`` split,
turns) -> ``ScriptRunner`` (``append_event.lua``, write concern) ->
``settle`` (the cluster's app step). Of a read: the service ->
``Reads`` (narrowing, read cache) -> ``snapshot`` ->
the codec's decode.
"""

from __future__ import annotations

from typing import Any, Generic

from redis_agent_sessions._health import (
    PROBE_ID,
    Probe,
    Readiness,
    memory_probe,
    redis_probe,
    run_checks,
)
from redis_agent_sessions._redis.codec import check_id
from redis_agent_sessions._redis.identity import read_identity
from redis_agent_sessions._redis.topology import Topology
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import CorruptDataError
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.sessions._cache import ReadCache
from redis_agent_sessions.sessions._catch_up import CatchUps
from redis_agent_sessions.sessions._cluster import ClusterLayout
from redis_agent_sessions.sessions._context import Context
from redis_agent_sessions.sessions._event_stream import EventStream
from redis_agent_sessions.sessions._layout import Layout
from redis_agent_sessions.sessions._listing import SessionLister
from redis_agent_sessions.sessions._reads import Reads
from redis_agent_sessions.sessions._refresh import Refresher
from redis_agent_sessions.sessions._runner import ScriptRunner
from redis_agent_sessions.sessions._single_node import SingleNode
from redis_agent_sessions.sessions._sweep import SweepReport, check_sweep
from redis_agent_sessions.sessions._turns import Turns
from redis_agent_sessions.sessions._types import E, ModelCodec, S
from redis_agent_sessions.sessions._writes import Writes

__all__ = ["SessionEngine", "choose_layout"]


def choose_layout(topology: Topology, keys: KeySpace, runner: ScriptRunner) -> Layout:
    """The session layout for a topology: the one place sessions/ decides it."""
    if topology.cluster:
        return ClusterLayout(topology, keys, runner)
    return SingleNode(topology, keys, runner)


class SessionEngine(Generic[S, E]):
    """Sessions, events and scoped state in Redis (see the README for the key layout): the
    parts of one service, wired to one client, codec and config."""

    def __init__(
        self, client: Any, codec: ModelCodec[S, E], config: SessionServiceConfig | None = None
    ) -> None:
        config = config or SessionServiceConfig()
        if "read_cache_bytes" not in config.model_fields_set and codec.read_cache_bytes:
            # The model family's default (the ADK extra's: on), unless the caller chose.
            config = config.model_copy(update={"read_cache_bytes": codec.read_cache_bytes})
        self.config = config
        self.keys = KeySpace(config.key_prefix)
        runner = ScriptRunner(client, config)
        topology = Topology(client, cluster=config.cluster)
        self.layout = choose_layout(topology, self.keys, runner)
        limit = config.read_cache_bytes
        self.ctx: Context[S, E] = Context(
            client=client,
            codec=codec,
            config=config,
            keys=self.keys,
            runner=runner,
            layout=self.layout,
            cache=ReadCache(limit) if limit else None,
            catch_ups=CatchUps(),
            turns=Turns() if config.stale_policy == "reject" else None,
        )
        self.reads = Reads(self.ctx)
        """get_session, snapshots, decoding, scoped state."""
        self.writes = Writes(self.ctx, self.reads)
        """create, append, import, delete."""
        self.refresher = Refresher(self.ctx, self.reads)
        """refresh of a held copy."""
        self.listing: SessionLister[S, E] = SessionLister(self.ctx)
        """list_sessions and pages of sessions, from the indexes."""
        self.events: EventStream[E] = EventStream(
            client,
            self.keys,
            self.reads.decode,
            self.ready,
            codec.errors.not_found,
            socket_timeout=topology.socket_timeout,
        )
        """Pages of a session's events, and watches of new ones."""

    @property
    def cache(self) -> ReadCache[E] | None:
        return self.ctx.cache

    @property
    def catch_ups(self) -> CatchUps:
        return self.ctx.catch_ups

    def instrument(self, service: object, operations: tuple[str, ...]) -> None:
        """Spans for ``service``'s operations, and this engine's counters (telemetry on)."""
        from redis_agent_sessions._telemetry import Telemetry, instrument  # only when on

        topology = self.layout.topology
        telemetry = Telemetry(self.config, topology.endpoint, lambda: read_identity(topology))
        self.ctx.telemetry = telemetry
        self.layout.observe(telemetry)
        instrument(service, operations, telemetry)

    async def check_ready(self, timeout: float, app: str = PROBE_ID) -> Readiness:
        """Reach every node, run the scripts (touching nothing), and when writes wait for
        replicas, that they can: see ``redis_agent_sessions._health``."""

        async def scripts() -> str:
            await self.ctx.ready()
            found = await self.reads.get_session(
                app_name=app, user_id=PROBE_ID, session_id=PROBE_ID, config=None
            )
            if found is not None:
                raise CorruptDataError(PROBE_ID, "the readiness probe's session exists")
            return await self.writes.probe(app, PROBE_ID, PROBE_ID)

        topology = self.layout.topology
        probes: list[tuple[str, Probe]] = [("redis", redis_probe(topology)), ("scripts", scripts)]
        if self.config.write_concern != "primary":
            probes.append(("write concern", lambda: self.ctx.runner.probe_concern(topology)))
        # Last: at full memory the checks before it still show that reads work.
        probes.append(("memory", memory_probe(topology, self.ctx.ttl)))
        return await run_checks(probes, timeout)

    async def ready(self) -> None:
        """Before a read of this engine's client (see ``Context.ready``)."""
        await self.ctx.ready()

    async def prune(self, app_name: str, pairs: list[tuple[str, str]]) -> int:
        """Drop the index entries of the (user, session) pairs that no longer exist (each
        re-checked in the script): how many were dropped. For operators' backlogs."""
        check_id("app_name", app_name)
        await self.ctx.ready(write=True)
        return await self.layout.prune(app_name, pairs) if pairs else 0

    async def sweep_app_writes(
        self, *, app_name: str, older_than: float, limit: int, dry_run: bool
    ) -> SweepReport:
        """App-scope writes that workers left pending, applied (see ``._sweep``)."""
        check_sweep(app_name, older_than, limit)
        await self.ctx.ready(write=not dry_run)
        return await self.layout.sweep(app_name, older_than, limit, dry_run=dry_run)
