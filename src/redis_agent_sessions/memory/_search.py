"""The search module's indexes (keyword and vector) and vector search, on both backends
(``_ranking`` ranks by keyword on both)."""

from __future__ import annotations

import time
from typing import Any

from redis.exceptions import NoPermissionError, ResponseError

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import text
from redis_agent_sessions._redis.memory_calls import MEMORY_VECTORS, MemoryVectors
from redis_agent_sessions._redis.topology import Topology
from redis_agent_sessions.errors import MemoryIndexError, PermissionDeniedError
from redis_agent_sessions.keys import KeySpace, escape
from redis_agent_sessions.memory._encoding import owner_tag
from redis_agent_sessions.memory._index_defs import IndexDefinitions, as_dict, missing_index
from redis_agent_sessions.memory._indexes import IndexLayout, provision_hint
from redis_agent_sessions.memory._vectors import (
    PLAIN_SCAN,
    Hit,
    Semantic,
    knn_command,
    nearest,
    parse_knn,
)

__all__ = ["IndexSearch", "PlainSearch", "escape_term", "has_search_module", "search_docs"]

_MIN_SEARCH_VERSION = 20000
_BATCHES_FROM = 4_096
"""Entries of one user from which a KNN walks the graph in batches (filtering each) when the
user owns a quarter of the index or more: below, comparing with each is cheap."""
_INDEXED_TTL = 60.0
"""Seconds the shared vector index's document count is reused (FT.INFO)."""


async def has_search_module(topology: Topology) -> bool:
    """Whether ``MODULE LIST`` shows RediSearch 2.x or later.

    Raises PermissionDeniedError when the user may not run ``MODULE LIST``: guessing "no" there
    would let this worker use another backend than workers that may.
    """
    try:
        # A keyless command: one node answers for all (they load the same modules).
        modules = await topology.any_node("MODULE", "LIST")
    except ResponseError as exc:
        if isinstance(exc, NoPermissionError) or "NOPERM" in str(exc).upper():
            raise PermissionDeniedError(
                "module|list",
                None,
                "so it cannot tell whether the server has the search module (or pass "
                "backend='search' or backend='plain', as the other workers use)",
            ) from exc
        return False  # no MODULE command (fakeredis): search is not usable
    for module in modules:
        info = (
            module
            if isinstance(module, dict)
            else dict(zip(module[::2], module[1::2], strict=True))
        )
        info = {text(k): v for k, v in info.items()}
        if text(info.get("name", b"")).lower() == "search":
            return int(info.get("ver", 0)) >= _MIN_SEARCH_VERSION
    return False


def escape_term(word: str) -> str:
    # Query words are \w runs; escaping every ASCII non-alphanumeric keeps them plain
    # terms whatever the query parser treats as syntax.
    return "".join(c if c.isalnum() or not c.isascii() else "\\" + c for c in word)


class IndexSearch:
    """Queries RediSearch through the indexes of an ``IndexLayout`` (one shared, one
    per app, or on a cluster one per (app, user), asked on the shard holding that user's
    entries: the search module indexes each shard apart)."""

    def __init__(
        self, topology: Topology, layout: IndexLayout, semantic: Semantic | None = None
    ) -> None:
        self._redis = topology.client
        self._topology = topology
        self._keys = layout.keys
        self.layout = layout
        self._semantic = semantic
        self.definitions = IndexDefinitions(topology, layout, semantic)
        self._indexed: dict[str, tuple[float, int]] = {}
        """Vector index -> (when read, documents) (FT.INFO)."""

    def index(self, app: str, user: str) -> str:
        return self.layout.index(app, user)

    def _vector_index(self, app: str, user: str) -> str:
        return self.layout.vector_index(app, user)

    def _prefix(self, app: str, user: str) -> str:
        return self.layout.prefix(app, user)

    async def _run(self, app: str, user: str, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Run search commands where the (app, user)'s index lives, in one round trip."""
        return await self.definitions.run_for(app, user)(commands)

    async def prepare(self, *, rebuild: bool = False) -> None:
        """Before the backend is recorded (see ``IndexDefinitions.prepare``)."""
        await self.definitions.prepare(rebuild=rebuild)

    async def ensure_index(self, app: str = "", user: str = "", *, rebuild: bool = False) -> None:
        """The indexes of (app, user) exist (see ``IndexDefinitions.ensure``)."""
        await self.definitions.ensure(app, user, rebuild=rebuild)

    def missing(self, app: str, exc: ResponseError) -> bool:
        """Whether a search found no index where a user's index is made at their first
        write (so there is nothing to find); an app's that an operator makes is an error
        naming how to make it."""
        if not missing_index(exc):
            return False
        if self.layout.provisioned:
            raise MemoryIndexError(
                f"the memory index of app {app!r} does not exist here: {provision_hint(app)}"
            ) from exc
        return self.layout.lazy

    async def nearest(self, app: str, user: str, query: bytes, k: int) -> list[Hit]:
        """The ``k`` entries of (app, user) nearest the query vector."""
        if self.layout.scope == "app_shard":
            # The search module on a cluster loads no field of a document in another slot
            # than its index's name, so the app's shard-wide index returns no distances:
            # the user's newest entries are compared exactly, as on the plain backend.
            await self.definitions.ensure(app, user)
            return await PlainSearch(self._redis, self._keys, self._semantic).nearest(
                app, user, query, k
            )
        scope = f"@app:{{{owner_tag(app)}}} @user:{{{owner_tag(user)}}}"
        index = self._vector_index(app, user)
        try:
            batches = await self._owns_most(app, user, index)
            [reply] = await self._run(
                app, user, [knn_command(index, scope, query, k, batches=batches)]
            )
        except ResponseError as exc:
            # A user whose entries were all written before the embedder was turned on
            # has no vector index of their own (cluster) until their next write.
            if self.missing(app, exc):
                return []
            raise
        return parse_knn(search_docs(reply))

    async def _owns_most(self, app: str, user: str, index: str) -> bool:
        """Whether (app, user) has many entries and a large share of the vector index's.
        The module then chooses to compare the query with every one of them (45 ms at
        100,000: benchmarks/semantic.py) where walking the graph and filtering takes 2."""
        [entries] = await self._run(app, user, [("ZCARD", self._keys.memory_entries(app, user))])
        if int(entries) < _BATCHES_FROM:
            return False
        if self.layout.scope == "user":
            return True
        now = time.monotonic()
        read = self._indexed.get(index)
        if read is None or now - read[0] > _INDEXED_TTL:
            [info] = await self._run(app, user, [("FT.INFO", index)])
            read = self._indexed[index] = (now, int(float(text(as_dict(info).get("num_docs", 0)))))
        return int(entries) * 4 >= read[1]


def search_docs(reply: Any) -> list[dict[str, Any]]:
    """The returned fields of each document of an FT.SEARCH reply (RESP2 or RESP3)."""
    if isinstance(reply, dict):
        results = reply[b"results" if b"results" in reply else "results"]
        return [as_dict(as_dict(r).get("extra_attributes", {})) for r in results]
    return [as_dict(fields) for fields in reply[2::2]]


class PlainSearch:
    """Vector search without the search module (its keyword ranking: ``_ranking``)."""

    def __init__(self, client: Any, keys: KeySpace, semantic: Semantic | None = None) -> None:
        self._redis = client
        self._keys = keys
        self._semantic = semantic
        self._vectors = _scripts.register(client, MEMORY_VECTORS)

    async def nearest(self, app: str, user: str, query: bytes, k: int) -> list[Hit]:
        """The ``k`` nearest of the user's newest ``PLAIN_SCAN`` entries by exact cosine,
        computed here: without the search module Redis has no vector search, and a script
        computing it would block the server as long."""
        assert self._semantic is not None
        entries = self._keys.memory_entries(app, user)
        newest = await self._redis.zrevrange(entries, 0, PLAIN_SCAN - 1, withscores=True)
        base = self._keys.memory_entry(app, user, "")  # escaping each whole key cost ~10%
        keys = [base + escape(text(member)) for member, _ in newest]
        blobs = await _scripts.run(self._vectors, MemoryVectors(keys)) if keys else []
        rows = [(text(m), float(ts), b) for (m, ts), b in zip(newest, blobs, strict=True)]
        return nearest(self._semantic.vectorizer, query, rows, k)
