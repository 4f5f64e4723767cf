"""Which RediSearch indexes answer for an (app, user): decided once, when the search backend
opens, from the topology and ``memory_index``.

- ``shared``: one keyword and one vector index over every app's entries (single node).
- ``app``: one of each per app (``memory_index="per_app"``), named inside the app's key
  space, so that a Redis user limited to the app's keys can search them and no other app's.
- ``app_shard``: the same on a cluster, where the search module indexes each shard apart:
  one of each per app on every primary, named with a hash tag that the primary owns (the
  first ``%i<n>`` tag of the app that lands there), so an app's search on the shard that
  holds a user's entries asks the app's index on that shard.
- ``user``: one of each per (app, user) on a cluster with ``memory_index="shared"``: an index
  named with the user's hash tag lives on, and is asked on, the shard holding their entries.

Per-user indexes are made by the workers at their owner's first write. Per-app ones are
*provisioned*: made by an operator (``redis-agent-sessions tenant create``) with an admin
connection, because creating an index can name any key prefix (RediSearch checks a user's
key patterns against the index name only), so a tenant's Redis user holds no command that
creates, alters or drops one (docs/security.md#tenants).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from redis_agent_sessions.errors import MemoryIndexError
from redis_agent_sessions.keys import KeySpace

__all__ = ["IndexLayout", "index_layout", "provision_hint"]

Scope = Literal["shared", "app", "app_shard", "user"]

_SHARD_NAMES = 1 << 20
"""How many ``%i<n>`` tags are tried for a primary: with 16,384 slots spread over the
primaries, the first of a primary's comes long before this unless it owns almost none."""


def provision_hint(app: str) -> str:
    """What an operator runs to make an app's provisioned indexes."""
    return (
        f"an operator makes it with `redis-agent-sessions tenant create {app} --url ADMIN_URL` "
        "(docs/security.md#tenants)"
    )


@dataclass(frozen=True, slots=True)
class IndexLayout:
    keys: KeySpace
    scope: Scope
    node_of: Callable[[str], str] | None = None
    """``app_shard``: the name of the primary that holds a key (the slot map)."""
    _shards: dict[tuple[str, str], int] = field(default_factory=dict, compare=False)
    """(app, primary) -> the ``n`` of the app's index there, once found."""

    @property
    def lazy(self) -> bool:
        """Whether workers make an owner's indexes at its first write (a user's, on a
        cluster); the shared ones are made when the backend opens."""
        return self.scope == "user"

    @property
    def provisioned(self) -> bool:
        """Whether an operator makes the indexes (per app): workers only check them."""
        return self.scope in ("app", "app_shard")

    def owner(self, app: str, user: str) -> tuple[str, str]:
        """What one index serves: everyone, an app (on one shard), or one (app, user)."""
        if self.scope == "user":
            return app, user
        if self.scope == "app_shard":
            return app, self._node(app, user)
        return (app, "") if self.scope == "app" else ("", "")

    def index(self, app: str, user: str) -> str:
        if self.scope == "user":
            return self.keys.memory_user_index(app, user)
        if self.scope == "app_shard":
            return self.keys.memory_app_shard_index(app, self._shard(app, user))
        if self.scope == "app":
            return self.keys.memory_app_index(app)
        return self.keys.memory_index()

    def vector_index(self, app: str, user: str) -> str:
        if self.scope == "user":
            return self.keys.memory_user_vector_index(app, user)
        if self.scope == "app_shard":
            return self.keys.memory_app_shard_vector_index(app, self._shard(app, user))
        if self.scope == "app":
            return self.keys.memory_app_vector_index(app)
        return self.keys.memory_vector_index()

    def prefix(self, app: str, user: str) -> str:
        """The key prefix the index of (app, user) covers."""
        if self.scope == "user":
            return self.keys.memory_user_index_prefix(app, user)
        if self.provisioned:
            return self.keys.memory_app_index_prefix(app)
        return self.keys.memory_index_prefix()

    def _node(self, app: str, user: str) -> str:
        assert self.node_of is not None
        return self.node_of(self.keys.memory_entries(app, user))

    def _shard(self, app: str, user: str) -> int:
        return self.shard_on(app, self._node(app, user))

    def shard_on(self, app: str, node: str) -> int:
        """The ``n`` of the app's per-shard index names on the primary ``node``: the first
        whose hash tag that primary owns."""
        found = self._shards.get((app, node))
        if found is not None:
            return found
        assert self.node_of is not None
        for n in range(_SHARD_NAMES):
            if self.node_of(self.keys.memory_app_shard_index(app, n)) == node:
                self._shards[(app, node)] = n
                return n
        raise MemoryIndexError(f"no index name of app {app!r} lands on the primary {node}")


def index_layout(
    keys: KeySpace,
    *,
    cluster: bool,
    memory_index: str,
    node_of: Callable[[str], str] | None = None,
) -> IndexLayout:
    """The layout of a deployment: per app (provisioned) with ``memory_index="per_app"``,
    on a cluster one per app and shard (``node_of`` maps a key to its primary); else
    shared on one node, per user on a cluster."""
    if memory_index == "per_app":
        if cluster and node_of is not None:
            return IndexLayout(keys, "app_shard", node_of)
        return IndexLayout(keys, "app")
    return IndexLayout(keys, "user" if cluster else "shared")
