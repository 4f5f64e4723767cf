"""RedisMemoryService: keyword recall over past sessions (ADK's memory API), and with an
embedder, recall by meaning fused with it.

Two backends answer the same contract. Both keep the entries' words in per-user postings
maintained by the write scripts (with the RediSearch module, 2.x, each term's best only)
and rank a query over them; with the module, an index over the entry hashes also serves
vectors and words inside longer runs (plain Redis, fakeredis: postings of their grams,
and an exact scan of the newest vectors). Either way a query
touches only one (app, user)'s entries and treats its text as data, never as syntax.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis_agent_sessions.memory._consolidate import FactSettings
from redis_agent_sessions.memory._embedders import CallableEmbedder, Embedder
from redis_agent_sessions.memory._fact_jobs import FactJobs
from redis_agent_sessions.memory._filters import MemoryFilter
from redis_agent_sessions.memory._generators import (
    CallableGenerator,
    Fact,
    FactRevision,
    FactSource,
    GenerationRequest,
    MemoryGenerator,
    MemoryOperation,
)
from redis_agent_sessions.memory._google import GoogleEmbedder
from redis_agent_sessions.memory._jobs import DeadLetter, ShardBacklog
from redis_agent_sessions.memory._models import Backend, MemoryEntry, SearchMemoryResponse
from redis_agent_sessions.memory._service import MemoryServiceBase
from redis_agent_sessions.memory._vectors import VectorIndex
from redis_agent_sessions.memory._worker import FactWorker
from redis_agent_sessions.models import Event, Session

__all__ = [
    "Backend",
    "CallableEmbedder",
    "CallableGenerator",
    "DeadLetter",
    "Embedder",
    "Fact",
    "FactJobs",
    "FactRevision",
    "FactSettings",
    "FactSource",
    "FactWorker",
    "GenerationRequest",
    "GoogleEmbedder",
    "MemoryEntry",
    "MemoryFilter",
    "MemoryGenerator",
    "MemoryOperation",
    "RedisMemoryService",
    "SearchMemoryResponse",
    "ShardBacklog",
    "VectorIndex",
]


class RedisMemoryService(MemoryServiceBase[Session, Event, MemoryEntry, SearchMemoryResponse]):
    """Memory entries in Redis, searchable by keyword and meaning, shared by every worker,
    taking and returning this package's models (see ``MemoryServiceBase`` for the
    arguments)."""

    def _session(self, session: Session) -> Session:
        return session

    def _events(self, events: Sequence[Event]) -> Sequence[Event]:
        return events

    def _entries(self, memories: Sequence[MemoryEntry]) -> Sequence[MemoryEntry]:
        return memories

    def _response(self, found: SearchMemoryResponse) -> SearchMemoryResponse:
        return found
