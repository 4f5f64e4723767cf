"""State scopes: how a delta splits into stored scopes and how reads merge them back.

Pure functions with no Redis in them, so the rules are tested on their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from redis_agent_sessions.errors import InvalidInputError

__all__ = [
    "APP_PREFIX",
    "TEMP_PREFIX",
    "USER_PREFIX",
    "ScopedDelta",
    "merge_state",
    "split_state_delta",
    "without_temp",
]

APP_PREFIX = "app:"
USER_PREFIX = "user:"
TEMP_PREFIX = "temp:"


class ScopedDelta(NamedTuple):
    """A delta split by scope, keys stored without their prefix; ``temp:`` keys dropped."""

    session: dict[str, Any]
    user: dict[str, Any]
    app: dict[str, Any]


def split_state_delta(delta: Mapping[str, Any]) -> ScopedDelta:
    """Split ``delta`` into the three stored scopes.

    Any key without one of the three prefixes (including other ``owner:key`` names)
    belongs to the session.
    """
    session: dict[str, Any] = {}
    user: dict[str, Any] = {}
    app: dict[str, Any] = {}
    for key, value in delta.items():
        if type(key) is str and ":" not in key:  # most keys: no prefix to look for
            session[key] = value
        elif _check_key(key).startswith(APP_PREFIX):
            app[key[len(APP_PREFIX) :]] = value
        elif key.startswith(USER_PREFIX):
            user[key[len(USER_PREFIX) :]] = value
        elif not key.startswith(TEMP_PREFIX):
            session[key] = value
    return ScopedDelta(session, user, app)


def without_temp(delta: Mapping[str, Any]) -> dict[str, Any]:
    """``delta`` minus its ``temp:`` keys (what is stored with the event)."""
    return {k: v for k, v in delta.items() if not _check_key(k).startswith(TEMP_PREFIX)}


def _check_key(key: object) -> str:
    # The prefix decides the scope, so a key must be text before it can be placed; JSON
    # object keys are strings anyway.
    if not isinstance(key, str):
        raise InvalidInputError(f"state keys must be strings, got {type(key).__name__} {key!r}")
    return key


def merge_state(
    session: Mapping[str, Any], user: Mapping[str, Any], app: Mapping[str, Any]
) -> dict[str, Any]:
    """The state a reader sees: session keys, then ``app:`` keys, then ``user:`` keys."""
    merged = dict(session)
    merged.update({APP_PREFIX + k: v for k, v in app.items()})
    merged.update({USER_PREFIX + k: v for k, v in user.items()})
    return merged
