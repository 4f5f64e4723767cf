"""The types every part of the session engine shares: what a read found, and what the
engine needs to know of a pair of session/event model classes (``ModelCodec``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from redis_agent_sessions import errors

__all__ = ["UNKNOWN", "E", "ErrorTypes", "ModelCodec", "S", "Snapshot", "StoredSession"]


class _Actions(Protocol):
    state_delta: dict[str, Any]


class _Event(Protocol):
    id: str
    timestamp: float
    partial: bool | None

    @property
    def actions(self) -> _Actions: ...


class _Session(Protocol):
    id: str
    app_name: str
    user_id: str
    state: dict[str, Any]
    last_update_time: float


S = TypeVar("S", bound=_Session)
E = TypeVar("E", bound=_Event)


@dataclass(slots=True)
class StoredSession:
    """A session as read from Redis, before it becomes a model."""

    id: str
    app_name: str
    user_id: str
    state: dict[str, Any]
    last_update_time: float
    revision: int


@dataclass(slots=True)
class Snapshot:
    """What one read of a session found, at one instant."""

    stored: StoredSession
    meta: dict[Any, Any]
    """The metadata hash as read (bytes or text keys)."""
    entries: list[Any]
    """Stream entries, as the read returned them."""
    anchor: str | None = None
    """With an anchor event id: its ``'<revision> <stream id>'``, None when not stored."""
    first_id: str | None = None
    """With an anchor event id: the stream id of the session's first entry (None: none)."""


@dataclass(frozen=True, slots=True)
class ErrorTypes:
    """The errors a model family raises: this package's, or subclasses that are also
    another library's (the google-adk extra raises errors that are ADK's too)."""

    already_exists: type[errors.AlreadyExistsError] = errors.AlreadyExistsError
    not_found: type[errors.SessionNotFoundError] = errors.SessionNotFoundError
    stale: type[errors.StaleSessionError] = errors.StaleSessionError


class ModelCodec(Protocol[S, E]):
    """What the engine needs to know about a pair of model classes."""

    errors: ErrorTypes

    def is_session(self, value: object) -> bool: ...
    def is_event(self, value: object) -> bool: ...
    def narrowing(self, config: object | None) -> tuple[int | None, float | None]:
        """``(num_recent_events, after_timestamp)`` of a get-session config of this model
        family; InvalidInputError for anything else."""
        ...

    def build_session(self, stored: StoredSession, events: list[E]) -> S: ...
    def events_of(self, session: S) -> list[E]: ...
    def encode_event(self, event: E) -> bytes:
        """Event JSON as stored: snake_case, None fields left out."""
        ...

    read_cache_bytes: int
    """The read cache a service of these models gets when its config does not say."""

    @property
    def fingerprint(self) -> str:
        """What names these models' encoding, stored with each event they encode ('' for
        none): events stored under it may be decoded without validation."""
        ...

    def decode_events(
        self, raws: Sequence[bytes | str], schemas: Sequence[str | None] | None = None
    ) -> list[E]:
        """Events from stored JSON, each beside the fingerprint it was stored with (None
        for every event: validate them all); raises ValueError for a bad one."""
        ...

    def revision(self, session: S) -> int | None: ...
    def set_revision(self, session: S, revision: int) -> None: ...
    def read_hints(self, event: E) -> tuple[str, str]:
        """What compaction-aware reads need to know of a new event: ``'<start> <end>'`` of
        the compaction summary it carries (else ``''``), and why the session's reads must
        always be full from now on (else ``''``). See append_event.lua's ARGV[12..13]."""
        ...


UNKNOWN = -1
"""The revision of a copy that may lack events (a codec may store it as None)."""
