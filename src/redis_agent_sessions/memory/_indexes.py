"""Which RediSearch indexes answer for an (app, user): decided once, when the search backend
opens, from the topology and ``memory_index``.

- ``shared``: one keyword and one vector index over every app's entries (single node).
- ``app``: one of each per app (``memory_index="per_app"``), named inside the app's key
  space, so that a Redis user limited to the app's keys can use them and no other app's.
- ``user``: one of each per (app, user) on a cluster, where the search module indexes each
  shard apart: an index named with the user's hash tag lives on, and is asked on, the
  shard that holds the user's entries.

Per-app and per-user indexes are made at their owner's first write, so a search before it
finds no index (and nothing to find).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from redis_agent_sessions.keys import KeySpace

__all__ = ["IndexLayout", "index_layout"]

Scope = Literal["shared", "app", "user"]


@dataclass(frozen=True, slots=True)
class IndexLayout:
    keys: KeySpace
    scope: Scope

    @property
    def lazy(self) -> bool:
        """Whether indexes are made at their owner's first write (not when opening)."""
        return self.scope != "shared"

    def owner(self, app: str, user: str) -> tuple[str, str]:
        """What one index serves: everyone, an app, or one (app, user)."""
        if self.scope == "user":
            return app, user
        return (app, "") if self.scope == "app" else ("", "")

    def index(self, app: str, user: str) -> str:
        if self.scope == "user":
            return self.keys.memory_user_index(app, user)
        if self.scope == "app":
            return self.keys.memory_app_index(app)
        return self.keys.memory_index()

    def vector_index(self, app: str, user: str) -> str:
        if self.scope == "user":
            return self.keys.memory_user_vector_index(app, user)
        if self.scope == "app":
            return self.keys.memory_app_vector_index(app)
        return self.keys.memory_vector_index()

    def prefix(self, app: str, user: str) -> str:
        """The key prefix the index of (app, user) covers."""
        if self.scope == "user":
            return self.keys.memory_user_index_prefix(app, user)
        if self.scope == "app":
            return self.keys.memory_app_index_prefix(app)
        return self.keys.memory_index_prefix()


def index_layout(keys: KeySpace, *, cluster: bool, memory_index: str) -> IndexLayout:
    """The layout of a deployment: per user on a cluster (whatever ``memory_index`` says:
    a user's index is inside its app's key space too), else as ``memory_index`` asks."""
    if cluster:
        return IndexLayout(keys, "user")
    return IndexLayout(keys, "app" if memory_index == "per_app" else "shared")
