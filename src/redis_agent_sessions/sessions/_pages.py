"""Pages of events and sessions, and the opaque tokens that continue them.

A token is the position after which the next page starts, with what it was made for, so a
token of one listing cannot be replayed on another. It is base64 text: callers must not
build or parse it, and may keep it (it stays valid while the data it points past exists).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import orjson

from redis_agent_sessions.errors import InvalidInputError

__all__ = ["EventsPage", "PageTokenError", "SessionsPage", "read_token", "write_token"]

T = TypeVar("T")


class PageTokenError(InvalidInputError):
    """A page token this listing cannot continue from. ``reason`` is worded to follow the
    name of whatever carried the token, so the CLI can name its own flag instead of the
    API's ``page_token``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return f"page_token {self.reason}"


@dataclass(slots=True)
class EventsPage(Generic[T]):
    """One page of a session's events, in the order asked for."""

    events: list[T] = field(default_factory=list)
    next_page_token: str | None = None
    """Pass it back to get the next page; None when this page is the last."""


@dataclass(slots=True)
class SessionsPage(Generic[T]):
    """One page of sessions (merged state, no events), in the order asked for."""

    sessions: list[T] = field(default_factory=list)
    next_page_token: str | None = None
    """Pass it back to get the next page; None when this page is the last."""


def write_token(scope: list[str | None], position: list[Any]) -> str:
    """A token for ``position`` within the listing named by ``scope``."""
    return base64.urlsafe_b64encode(orjson.dumps([scope, position])).decode().rstrip("=")


def read_token(token: object, scope: list[str | None]) -> list[Any]:
    """The position a token of the listing ``scope`` holds; InvalidInputError for anything
    else (not a token, or one of another listing or order)."""
    if not isinstance(token, str) or not token:
        raise PageTokenError(f"must be a token from a previous page: {token!r}")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        found, position = orjson.loads(raw)
    except (binascii.Error, ValueError, TypeError):
        raise PageTokenError(f"is not a page token: {token!r}") from None
    if found != scope or not isinstance(position, list):
        raise PageTokenError("belongs to another listing or order")
    return position
