"""What Redis does when it runs out of memory, read from ``INFO memory`` (managed services
refuse ``CONFIG GET``): whether it may evict this store's keys, and whether it is full.

Redis evicts single keys, so an evicting policy takes a session's keys one by one: reads
then report the session as incomplete (``
IncompleteSessionError``), but what was evicted is lost. ``allkeys-*`` may evict any key;
``volatile-*`` only keys with a TTL, which sessions have when the service (``ttl_seconds``)
or the session (``ttl``) gives one; memory entries and ``user:``/``app:`` state never do.
Under ``noeviction`` a full Redis refuses writes and keeps serving reads.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from redis_agent_sessions._messages import size
from redis_agent_sessions._redis.topology import Topology

__all__ = ["MemoryPolicy", "fullest", "problem", "read_policies", "warn_once"]

_log = logging.getLogger("redis_agent_sessions")


@dataclass(frozen=True)
class MemoryPolicy:
    """One primary's memory limit, use and policy."""

    used: int
    maxmemory: int
    """0: no limit (Redis never evicts nor refuses for memory)."""
    policy: str

    @property
    def full(self) -> bool:
        """Writes are refused: at the limit under ``noeviction``."""
        return self.policy == "noeviction" and 0 < self.maxmemory <= self.used

    def evicts(self, ttl: bool) -> bool:
        """Whether Redis may evict the keys of a store whose sessions have a TTL (``ttl``)."""
        if not self.maxmemory:
            return False
        return self.policy.startswith("allkeys-") or (ttl and self.policy.startswith("volatile-"))

    def eviction(self, ttl: str | None) -> str:
        """Why this policy evicts the store's keys (``ttl``: what gives sessions a TTL)."""
        which = (
            "any key"
            if self.policy.startswith("allkeys-")
            else f"keys with a TTL, which sessions have ({ttl})"
        )
        return (
            f"maxmemory-policy {self.policy} lets Redis evict {which} once used memory "
            f"reaches maxmemory ({size(self.maxmemory)}): sessions would lose parts. "
            "Set maxmemory-policy noeviction (docs/operations.md#memory-limits-and-eviction)"
        )

    def describe(self) -> str:
        if not self.maxmemory:
            return f"{size(self.used)} used, no maxmemory (policy {self.policy})"
        return f"{size(self.used)} of {size(self.maxmemory)} used, maxmemory-policy {self.policy}"


async def read_policies(topology: Topology) -> list[MemoryPolicy]:
    """Each primary's memory policy (one INFO per primary, in parallel)."""
    return [_policy(info) for info in await topology.each_primary("INFO", "memory")]


def _policy(info: Any) -> MemoryPolicy:
    # redis-py parses INFO into a dict of the section's fields (numbers as int).
    if not isinstance(info, dict):
        raise RedisError(f"INFO memory answered {type(info).__name__}, not its fields")
    fields = {str(k): v for k, v in info.items()}
    try:
        return MemoryPolicy(
            int(fields["used_memory"]),
            int(fields.get("maxmemory", 0)),
            str(fields.get("maxmemory_policy", "noeviction")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RedisError(f"INFO memory lacks what it should have: {exc!r}") from exc


def problem(policies: list[MemoryPolicy], ttl: str | None) -> str | None:
    """Why the store cannot work as it should (writes refused at full memory, or keys it
    may lose to eviction), or None. ``ttl`` says what gives sessions a TTL (None: nothing
    this service knows of)."""
    if full := [p for p in policies if p.full]:
        return f"writes are refused: Redis is out of memory ({full[0].describe()})"
    if evicting := [p for p in policies if p.evicts(ttl is not None)]:
        return evicting[0].eviction(ttl)
    return None


def fullest(policies: list[MemoryPolicy]) -> MemoryPolicy:
    """The primary closest to its limit (the one that refuses or evicts first)."""
    return max(policies, key=lambda p: p.used / p.maxmemory if p.maxmemory else 0.0)


async def warn_once(topology: Topology, ttl: str | None) -> None:
    """Log one warning when the server's policy may evict the store's keys (a service's
    first use). A server that does not say (INFO refused, fakeredis) is not a warning."""
    try:
        policies = await read_policies(topology)
    except RedisError as exc:
        _log.debug("maxmemory-policy not checked: %s", exc)
        return
    for p in policies:
        if p.evicts(ttl is not None):
            _log.warning("redis-agent-sessions: %s", p.eviction(ttl))
            return
