"""Shared, durable sessions, scoped state and memory for AI agent workers, in Redis."""

from __future__ import annotations

from ._pages import EventsPage, SessionsPage
from ._version import __version__
from .config import SessionServiceConfig
from .errors import (
    AlreadyExistsError,
    CorruptDataError,
    InvalidInputError,
    MemoryIndexError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RedisSessionsError,
    SessionNotFoundError,
    StaleSessionError,
    WriteConcernError,
)
from .memory import MemoryEntry, RedisMemoryService, SearchMemoryResponse
from .models import (
    Content,
    Event,
    EventActions,
    GetSessionConfig,
    ListSessionsResponse,
    Part,
    Session,
)
from .sessions import RedisSessionService

__all__ = [
    "AlreadyExistsError",
    "Content",
    "CorruptDataError",
    "Event",
    "EventActions",
    "EventsPage",
    "GetSessionConfig",
    "InvalidInputError",
    "ListSessionsResponse",
    "MemoryEntry",
    "MemoryIndexError",
    "Part",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RedisMemoryService",
    "RedisSessionService",
    "RedisSessionsError",
    "SearchMemoryResponse",
    "Session",
    "SessionNotFoundError",
    "SessionServiceConfig",
    "SessionsPage",
    "StaleSessionError",
    "WriteConcernError",
    "__version__",
]
