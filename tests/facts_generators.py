"""Generators the URL tests name (``?generator=import:facts_generators:<name>``)."""

from __future__ import annotations

from redis_agent_sessions import CallableGenerator, GenerationRequest, MemoryOperation


def _likes(request: GenerationRequest) -> list[MemoryOperation]:
    return [
        MemoryOperation(action="add", fact=f"The user said: {e.content.text}", topics=["likes"])
        for e in request.events
        if e.content is not None and e.content.text.startswith("I like")
    ]


def likes() -> CallableGenerator:
    """Called without arguments, as a URL's ``import:`` spec does."""
    return CallableGenerator(_likes, name="likes")
