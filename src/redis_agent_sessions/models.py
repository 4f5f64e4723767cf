"""Session and event models, JSON-compatible with google-adk 2.13.

Field names are ADK's: snake_case when dumped, camelCase aliases accepted on input.
Fields we do not model (function calls, usage metadata, node info, ...) are kept as
extras and written back unchanged, so an ADK event survives a round trip through us.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_serializer
from pydantic.alias_generators import to_camel

__all__ = [
    "Content",
    "Event",
    "EventActions",
    "GetSessionConfig",
    "ListSessionsResponse",
    "Part",
    "Session",
]

_OPEN = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)


class Part(BaseModel):
    """One part of a message; only ``text`` is interpreted here."""

    model_config = _OPEN

    text: str | None = None
    thought: bool | None = None


class Content(BaseModel):
    """A message: a role and its parts (google.genai ``Content`` shape)."""

    model_config = _OPEN

    role: str | None = None
    parts: list[Part] | None = None

    @property
    def text(self) -> str:
        """The text parts joined by spaces (what memory search indexes)."""
        return " ".join(p.text for p in self.parts or () if p.text)


class EventActions(BaseModel):
    """What an event does besides carrying content."""

    model_config = _OPEN

    state_delta: dict[str, Any] = Field(default_factory=dict)
    """Top-level keys to set; ``app:``/``user:``/``temp:`` prefixes choose the scope."""
    artifact_delta: dict[str, int] = Field(default_factory=dict)
    transfer_to_agent: str | None = None
    escalate: bool | None = None
    skip_summarization: bool | None = None
    end_of_agent: bool | None = None
    agent_state: dict[str, Any] | None = None


class Event(BaseModel):
    """One entry in a session's history."""

    model_config = _OPEN

    id: str = Field(default_factory=lambda: str(uuid.uuid4()))
    invocation_id: str = ""
    author: str = ""
    content: Content | None = None
    actions: EventActions = Field(default_factory=EventActions)
    timestamp: float = Field(default_factory=time.time)
    """Epoch seconds, set by the producer; services never change it."""
    partial: bool | None = None
    """Streaming chunks are partial: ``append_event`` returns them without storing."""
    branch: str | None = None
    turn_complete: bool | None = None
    error_code: str | None = None
    error_message: str | None = None
    interrupted: bool | None = None
    custom_metadata: dict[str, Any] | None = None
    long_running_tool_ids: set[str] | None = None

    @field_serializer("long_running_tool_ids")
    def _sorted_ids(self, ids: set[str] | None) -> list[str] | None:
        # ADK writes the set as a sorted list; matching it keeps stored JSON stable.
        return None if ids is None else sorted(ids)


class Session(BaseModel):
    """One conversation thread with its merged state (session + ``user:`` + ``app:``)."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    id: str
    app_name: str
    user_id: str
    state: dict[str, Any] = Field(default_factory=dict)
    events: list[Event] = Field(default_factory=list)
    last_update_time: float = 0.0
    _revision: int | None = PrivateAttr(default=None)
    # The session revision this copy reflects; append_event sends it so that a
    # writer holding an outdated copy is detected inside the atomic script.


class GetSessionConfig(BaseModel):
    """Narrows the events ``get_session`` returns."""

    num_recent_events: int | None = Field(default=None, ge=0)
    """Only the last N events (0 = none)."""
    after_timestamp: float | None = None
    """Only events with ``timestamp >= after_timestamp``."""


class ListSessionsResponse(BaseModel):
    """Sessions with merged state and no events."""

    sessions: list[Session] = Field(default_factory=list)
