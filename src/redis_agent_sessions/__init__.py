"""Shared, durable sessions, scoped state and memory for AI agent workers, in Redis."""

from __future__ import annotations

from redis_agent_sessions._health import Check, Readiness
from redis_agent_sessions._version import __version__
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import (
    AlreadyExistsError,
    ConnectionLostError,
    ConsolidationConflictError,
    CorruptDataError,
    EmbeddingError,
    GenerationError,
    IncompleteSessionError,
    InvalidInputError,
    MemoryIndexError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RedisSessionsError,
    SessionNotFoundError,
    StaleSessionError,
    StoreFullError,
    WriteConcernError,
)
from redis_agent_sessions.memory import (
    CallableEmbedder,
    CallableGenerator,
    Embedder,
    Fact,
    FactRevision,
    FactSettings,
    GenerationRequest,
    GoogleEmbedder,
    MemoryEntry,
    MemoryGenerator,
    MemoryOperation,
    RedisMemoryService,
    SearchMemoryResponse,
)
from redis_agent_sessions.models import (
    Content,
    Event,
    EventActions,
    GetSessionConfig,
    ListSessionsResponse,
    Part,
    Session,
)
from redis_agent_sessions.sessions import RedisSessionService
from redis_agent_sessions.sessions._pages import EventsPage, SessionsPage
from redis_agent_sessions.sessions._sweep import SweepReport

__all__ = [
    "AlreadyExistsError",
    "CallableEmbedder",
    "CallableGenerator",
    "Check",
    "ConnectionLostError",
    "ConsolidationConflictError",
    "Content",
    "CorruptDataError",
    "Embedder",
    "EmbeddingError",
    "Event",
    "EventActions",
    "EventsPage",
    "Fact",
    "FactRevision",
    "FactSettings",
    "GenerationError",
    "GenerationRequest",
    "GetSessionConfig",
    "GoogleEmbedder",
    "IncompleteSessionError",
    "InvalidInputError",
    "ListSessionsResponse",
    "MemoryEntry",
    "MemoryGenerator",
    "MemoryIndexError",
    "MemoryOperation",
    "Part",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "Readiness",
    "RedisMemoryService",
    "RedisSessionService",
    "RedisSessionsError",
    "SearchMemoryResponse",
    "Session",
    "SessionNotFoundError",
    "SessionServiceConfig",
    "SessionsPage",
    "StaleSessionError",
    "StoreFullError",
    "SweepReport",
    "WriteConcernError",
    "__version__",
]
