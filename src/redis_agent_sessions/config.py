"""Settings shared by the session and memory services."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from redis_agent_sessions.keys import check_prefix

__all__ = ["MAX_TTL_SECONDS", "SessionServiceConfig"]

MAX_TTL_SECONDS = 100 * 365 * 86400
"""The longest TTL a session may have, 100 years: far beyond any use, and well inside what
Redis takes (it refuses an expiry whose time in ms overflows 64 bits, inside the script
that already wrote part of the session) and what the scripts compute exactly."""


class SessionServiceConfig(BaseModel):
    """How sessions are stored. Every worker sharing a Redis must use the same values
    (``read_cache_bytes`` aside)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_prefix: str = "ras"
    """First part of every key; lets several deployments share one Redis. No ``{`` or
    ``}``, and no part after a ``:`` may be ``apps``, ``mem`` or ``demo`` (``keys.py``)."""
    ttl_seconds: int | None = Field(default=None, gt=0, le=MAX_TTL_SECONDS)
    """Sliding expiry of a session's keys, refreshed by every append. None = keep forever.
    User and app state never expire."""
    stale_policy: Literal["reject", "merge"] = "reject"
    """What an append from an outdated session copy gets: ``reject`` raises
    StaleSessionError and writes nothing (like ADK's DatabaseSessionService); ``merge``
    applies it anyway, each state key taking the last writer's value."""
    max_payload_bytes: int = Field(default=1 << 20, gt=0)
    """Most bytes one write may store: for create_session the initial state's keys and
    JSON values; for append_event the encoded event plus the state keys and values it
    sets (so a state delta counts twice: it is stored in the event and in the state); for
    each memory entry its content and metadata as JSON and its author."""
    cluster: bool | None = None
    """Use the Redis Cluster layout, where every script touches one hash slot and app-scope
    writes reach the app's slot in a second, idempotent step. None (the default) detects it
    from the client: a ``redis.asyncio.cluster.RedisCluster`` gets it. True on a single
    node runs the cluster code path there (to check a deployment's code before moving)."""

    write_concern: Literal["primary", "replicas", "aof"] = "primary"
    """When create_session, append_event and delete_session count as done: ``primary``
    once the primary ran them; ``replicas`` once ``min_replicas`` replicas also have them
    (WAIT); ``aof`` once the primary's append-only file is fsynced, and ``min_replicas``
    replicas' too (WAITAOF: Redis >= 7.2 with appendonly; under ``appendfsync everysec``
    each write waits for the next fsync, ~1 s). A shortfall within ``write_timeout_ms``
    raises WriteConcernError; the write stays on the primary."""
    min_replicas: int = Field(default=1, ge=0)
    """Replicas that must confirm under ``replicas`` (at least 1) or ``aof`` (0 = the
    primary's own fsync only)."""
    write_timeout_ms: int = Field(default=1000, gt=0)
    """How long a write waits for the confirmations before WriteConcernError."""
    read_cache_bytes: int = Field(default=0, ge=0)
    """Per worker (services may differ): memory for the verified read cache, which keeps the
    decoded events of sessions this service read recently, so that a full get_session
    reads and parses only the events after them (the state is always read; any doubt
    means a full read). Least recently read sessions go first. Counted as 12 bytes per
    byte of stored event JSON (the measured Python size is 9-12x). 0 = off. Left unset,
    off for the core service and 128 MiB for the ADK extra's (ADK's flows never change an
    event in place; the contract suites check every event the cache held). The events of
    sessions read through the cache are shared with it: treat them as read-only."""
    validate_reads: bool = False
    """Per worker: validate every stored event on every read. Off (the default), an event
    stored with the fingerprint of this worker's own model classes (written by the same
    versions of them, which validated it on the way in) is rebuilt from its JSON without
    validating it again, which is most of the cost of a read; events of other model
    versions, imported or added by hand are validated either way."""
    memory_index: Literal["shared", "per_app"] = "shared"
    """The RediSearch memory backend's indexes: ``shared``, one keyword and one vector index
    for every app under the prefix (``ras:mem:idx``, ``ras:mem:vidx``; on a cluster one of
    each per user, made by the workers); ``per_app``, for tenants, one of each per app
    (``ras:mem:{<app>:}:idx``; on a cluster one per app and primary), so that a Redis user
    limited to one app's keys can search that app's memory and no other's. Per-app indexes
    are made by an operator (``redis-agent-sessions tenant create APP``), never by a
    worker: docs/security.md#tenants."""
    indexed_metadata: tuple[str, ...] = ()
    """Memory: the ``custom_metadata`` fields a search may filter on by equality
    (``metadata=`` of ``search_memory``'s filters); in a URL comma-separated. An entry
    is written with them, so every writer should declare the same; entries written before
    a field was declared are not found by a filter on it until ``reindex`` writes them
    again (docs/memory.md#filters)."""
    telemetry: bool = False
    """Per worker: an OpenTelemetry span (kind CLIENT, database-client conventions) for each
    call of the service's public API, the ``db.client.operation.duration`` histogram, and
    counters of what only this library sees (stale refusals, merges, read-cache hits and
    misses, full reads forced by compaction reasons, cluster ``app:`` writes applied late,
    write-concern shortfalls), through the globally configured providers. Needs the
    ``[otel]`` extra; off, nothing is imported and nothing costs."""
    telemetry_user_ids: bool = False
    """With ``telemetry``, also record user ids on spans (``redis_agent_sessions.user_id``):
    they may be personal data, so only when the operator opts in."""

    @model_validator(mode="after")
    def _replicas_to_wait_for(self) -> SessionServiceConfig:
        if self.write_concern == "replicas" and self.min_replicas < 1:
            raise ValueError("write_concern='replicas' needs min_replicas >= 1")
        return self

    @field_validator("indexed_metadata", mode="before")
    @classmethod
    def _field_names(cls, value: object) -> object:
        if isinstance(value, str):  # a URL's comma-separated list
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, (list, tuple)):
            if not all(isinstance(v, str) and v for v in value):
                raise ValueError("indexed_metadata must be field names (non-empty strings)")
            return tuple(dict.fromkeys(value))
        return value

    @field_validator("key_prefix")
    @classmethod
    def _own_keys(cls, value: str) -> str:
        return check_prefix(value)
