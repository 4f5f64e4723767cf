"""The one way the session engine runs its scripts: registered on the client, sized, and
confirmed as the write concern asks."""

from __future__ import annotations

from typing import Any

from redis.exceptions import ResponseError

from redis_agent_sessions._redis import concern as _concern
from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.calls import C, R
from redis_agent_sessions._redis.concern import WriteConcern
from redis_agent_sessions._redis.scripts import Registered
from redis_agent_sessions._redis.session_calls import (
    APPEND_EVENT,
    CREATE_SESSION,
    DELETE_SESSION,
    EXPIRY_DUE,
    PRUNE_INDEX,
    READ_HASHES,
    READ_SESSION,
)
from redis_agent_sessions._redis.topology import Topology
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import CorruptDataError, PayloadTooLargeError, WriteConcernError

__all__ = ["ScriptRunner"]


class ScriptRunner:
    """The session scripts of one client, and how a write is checked and confirmed."""

    def __init__(self, client: Any, config: SessionServiceConfig) -> None:
        self.client = client
        self.config = config
        self.concern = WriteConcern.of(config)
        self.read = _scripts.register(client, READ_SESSION)
        self.create = _scripts.register(client, CREATE_SESSION)
        self.append = _scripts.register(client, APPEND_EVENT)
        self.delete = _scripts.register(client, DELETE_SESSION)
        self.prune = _scripts.register(client, PRUNE_INDEX)
        self.read_hashes = _scripts.register(client, READ_HASHES)
        self.expiry_due = _scripts.register(client, EXPIRY_DUE)

    async def run(
        self, script: Registered[C, R], call: C, shortfalls: list[str] | None = None
    ) -> R:
        """Run a script; with a write concern and ``shortfalls`` (a write operation), wait
        for it in the same round trip and add any shortfall to ``shortfalls``."""
        try:
            if self.concern is None or shortfalls is None:
                return await _scripts.run(script, call)
            return await _concern.run(self.concern, script, call, shortfalls)
        except ResponseError as exc:
            if "WRONGTYPE" in str(exc):
                raise CorruptDataError(
                    call[0], f"a key of this session has a foreign type: {exc}"
                ) from exc
            raise

    async def run_many(
        self, script: Registered[C, R], calls: list[C], shortfalls: list[str]
    ) -> list[R]:
        """``script`` once per call, pipelined in one round trip."""
        return await _concern.run_many(self.concern, script, calls, shortfalls)

    async def check_server(self) -> None:
        """Before the first write: the server can confirm writes as the concern asks."""
        if self.concern is not None:
            await self.concern.check_server(self.client)

    async def probe_concern(self, topology: Topology) -> str:
        """For a readiness probe: the server can confirm writes as the concern asks, and
        each primary's replicas confirm in time now. ``WAIT`` on a connection that may have
        written asks the replicas for their offsets, so it answers as soon as they do."""
        concern = self.concern
        if concern is None:
            return "primary only"
        await concern.check_server(self.client)
        if not concern.replicas:
            return f"{concern.mode}: the primary confirms"
        wait = ("WAIT", concern.replicas, concern.timeout_ms)
        confirmed = min(int(r) for r in await topology.each_primary(*wait))
        if confirmed < concern.replicas:
            raise WriteConcernError(
                f"{confirmed} of {concern.replicas} replicas confirmed within "
                f"{concern.timeout_ms} ms; writes would not be confirmed "
                f"(write_concern={concern.mode!r})",
                written=False,
            )
        return f"{concern.mode}: {confirmed} replicas confirm (needs {concern.replicas})"

    def check_size(self, what: str, size: int) -> None:
        if size > self.config.max_payload_bytes:
            raise PayloadTooLargeError(what, size, self.config.max_payload_bytes)

    def confirmed(self, operation: str, shortfalls: list[str]) -> None:
        """Raise WriteConcernError when a write that landed was not confirmed as asked."""
        if shortfalls:
            raise WriteConcernError(
                f"{operation} landed on the primary, but write_concern="
                f"{self.config.write_concern!r} was not met: {'; '.join(shortfalls)}. It may "
                "be lost if the primary fails before its replicas have it; retrying is safe.",
                written=True,
            )
