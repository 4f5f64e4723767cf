"""What the parts of the session engine share: one service's client, models, settings,
script runner, layout and per-worker memory (read cache, catch-ups, turns)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic

from redis_agent_sessions._redis.layout_version import check_layout, record_layout
from redis_agent_sessions._redis.pressure import warn_once
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.sessions._cache import ReadCache
from redis_agent_sessions.sessions._catch_up import CatchUps
from redis_agent_sessions.sessions._layout import Layout
from redis_agent_sessions.sessions._runner import ScriptRunner
from redis_agent_sessions.sessions._turns import Turns
from redis_agent_sessions.sessions._types import E, ModelCodec, S

if TYPE_CHECKING:  # imported only when telemetry is on
    from redis_agent_sessions._telemetry import Telemetry

__all__ = ["Context"]


@dataclass(eq=False)
class Context(Generic[S, E]):
    """One service's engine, as its parts see it."""

    client: Any
    codec: ModelCodec[S, E]
    config: SessionServiceConfig
    keys: KeySpace
    runner: ScriptRunner
    layout: Layout
    cache: ReadCache[E] | None
    """Decoded events of sessions read recently (``read_cache_bytes``), or None."""
    catch_ups: CatchUps
    """What stale appends' refusals carried, for the refreshes that follow them."""
    turns: Turns | None
    """Turns of this worker's writers on a session (``reject`` policy only)."""
    telemetry: Telemetry | None = None
    """Spans and counters (``SessionServiceConfig.telemetry``), or None."""
    layout_checked: bool = False
    """Whether the store's layout version was found readable (the first operation reads it:
    a store of a newer layout raises LayoutVersionError before anything else)."""
    layout_recorded: bool = False
    """Whether the store records its layout version (else the first write records it)."""
    policy_checked: bool = False
    """Whether the server's maxmemory-policy was looked at (the first operation does)."""
    writable: bool = False
    """Whether ``ready`` for a write has nothing left to do (each of its checks, once
    passed, stays passed): a write then skips it."""

    @property
    def ttl(self) -> str | None:
        """What gives this service's sessions a TTL, as readiness and warnings say it."""
        seconds = self.config.ttl_seconds
        return f"ttl_seconds={seconds}" if seconds else None

    async def ready(self, *, write: bool = False) -> None:
        """Before an operation: the client is initialized, and before a write, the server
        can confirm writes as the write concern asks. The first one warns (a log line) when
        the server may evict this store's keys."""
        # Four checks, no awaits, on the path of every call once the client is ready.
        if self.layout.topology.fresh:
            await self.layout.ready()
        if not self.layout_checked:
            self.layout_recorded = await check_layout(self.client, self.keys.layout())
            self.layout_checked = True
        if not self.policy_checked:
            self.policy_checked = True
            await warn_once(self.layout.topology, self.ttl)
        if write:
            if self.runner.concern is not None:
                await self.runner.check_server()
            self.writable = True

    async def record_layout(self) -> None:
        """After a write to a store that did not record its layout: record it (once)."""
        self.layout_recorded = True
        await record_layout(self.client, self.keys.layout())
