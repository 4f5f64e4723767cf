"""The memory service's own models: what is remembered, and what a search returns."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from redis_agent_sessions.models import Content

__all__ = ["Backend", "MemoryEntry", "SearchMemoryResponse"]


class MemoryEntry(BaseModel):
    """One remembered piece of content (ADK's ``MemoryEntry`` shape)."""

    content: Content
    custom_metadata: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None
    author: str | None = None
    timestamp: str | None = None
    """When the content happened, ISO-8601 (events: local time without zone, like ADK)."""


class SearchMemoryResponse(BaseModel):
    """Entries matching a query, best first."""

    memories: list[MemoryEntry] = Field(default_factory=list)


Backend = Literal["auto", "search", "plain"]
