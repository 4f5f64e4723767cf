"""What stored state must be after a run of appends: the fold of the stored deltas."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from redis_agent_sessions.state import split_state_delta


def fold_deltas(events: Iterable[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(session scope, ``user:`` scope) after applying each event's delta in order."""
    session: dict[str, Any] = {}
    user: dict[str, Any] = {}
    for event in events:
        scoped = split_state_delta(event.actions.state_delta)
        session.update(scoped.session)
        user.update(scoped.user)
    return session, user
