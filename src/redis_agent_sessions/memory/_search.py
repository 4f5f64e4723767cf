"""The search module's indexes (keyword and vector), vector search on both backends, and the
0.1 keyword rule on both, which still finds the entries indexed by 0.1 until ``reindex`` has
run (see ``_ranking`` for the ranking of the others).

The 0.1 rule returns entry ids ranked by the number of distinct query words matched, then
newest first (equal times: larger id first), at most ``limit``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from itertools import combinations
from typing import Any

from redis.exceptions import NoPermissionError, ResponseError

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import text
from redis_agent_sessions._redis.memory_calls import (
    MEMORY_SEARCH,
    MEMORY_VECTORS,
    MemorySearch,
    MemoryVectors,
    first_referenced,
)
from redis_agent_sessions._redis.topology import Topology
from redis_agent_sessions.errors import MemoryIndexError, PermissionDeniedError
from redis_agent_sessions.keys import KeySpace, escape
from redis_agent_sessions.memory._index_defs import IndexDefinitions, as_dict, missing_index
from redis_agent_sessions.memory._indexes import IndexLayout, provision_hint
from redis_agent_sessions.memory._store import owner_tag
from redis_agent_sessions.memory._text import query_grams
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
# Level queries grow as C(n, n/2) clauses; longer queries take the aggregate path.
_MAX_LEVEL_WORDS = 6
# How many of a user's newest entries the level queries look at first, then next.
_BATCHES_FROM = 4_096
"""Entries of one user from which a KNN walks the graph in batches (filtering each) when the
user owns a quarter of the index or more: below, comparing with each is cheap."""
_INDEXED_TTL = 60.0
"""Seconds the shared vector index's document count is reused (FT.INFO)."""
_WINDOWS = (1_000, 16_000)


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
    """Queries RediSearch through the indexes of an :class:`IndexLayout` (one shared, one
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
        self.windows = _WINDOWS
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
        """Before the backend is recorded (see :meth:`IndexDefinitions.prepare`)."""
        await self.definitions.prepare(rebuild=rebuild)

    async def ensure_index(self, app: str = "", user: str = "", *, rebuild: bool = False) -> None:
        """The indexes of (app, user) exist (see :meth:`IndexDefinitions.ensure`)."""
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

    async def search(self, app: str, user: str, words: Iterable[str], limit: int) -> list[str]:
        ids, _ = await self._search(app, user, sorted(words), limit, [])
        return ids

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

    async def _search(
        self, app: str, user: str, words: list[str], limit: int, also: list[tuple[Any, ...]]
    ) -> tuple[list[str], list[Any]]:
        """The keyword ranking, and the replies of ``also`` sent with its first query."""
        try:
            if len(words) <= _MAX_LEVEL_WORDS and all(w.isascii() for w in words):
                return await self._by_levels(app, user, words, limit, also)
            return await self._aggregate(app, user, words, limit, also)
        except ResponseError as exc:
            # A user's (an app's) own index exists once they have written an entry.
            if self.missing(app, exc) and not also:
                return [], []
            raise

    async def _by_levels(
        self, app: str, user: str, words: list[str], limit: int, also: list[tuple[Any, ...]]
    ) -> tuple[list[str], list[Any]]:
        """Level c asks for the newest entries matching at least c of the words.

        An entry among the true top ``limit`` that matches c words has fewer than ``limit``
        entries above it in level c's newest-first order, so the union of the levels' top
        ``limit`` holds the whole answer; it is re-ranked here by an exact recount. Each
        level first looks only at the user's newest entries (a time window read from the
        entries zset), so a common word costs a bounded scan; a level that finds fewer than
        ``limit`` there is asked again over a wider window, the last one unbounded.
        """
        scope = f"@app:{{{owner_tag(app)}}} @user:{{{owner_tag(user)}}}"
        terms = [f"@words:{escape_term(w)}" for w in words]
        levels = {
            c: " | ".join(f"({' '.join(g)})" for g in combinations(terms, c))
            for c in range(len(terms), 0, -1)
        }
        pipe = self._redis.pipeline(transaction=False)
        for size in self.windows:
            pipe.zrevrange(
                self._keys.memory_entries(app, user), size - 1, size - 1, withscores=True
            )
        starts: list[float | None] = [float(hit[0][1]) for hit in await pipe.execute() if hit]
        starts.append(None)
        wanted = set(words)
        ranked: dict[str, tuple[int, float, str]] = {}
        pending = list(levels)
        extra: list[Any] = []
        for start in starts:
            window = "" if start is None else f" @ts:[{start!r} +inf]"
            # VERBATIM: without it the module expands a word to its other forms ("books"
            # finds "book") even on a NOSTEM field, and such hits crowd out true matches.
            commands = [(
                "FT.SEARCH", self.index(app, user), f"{scope}{window} ({levels[c]})",
                "VERBATIM", "RETURN", 3, "words", "ts", "id",
                "SORTBY", "ts", "DESC", "LIMIT", 0, limit, "DIALECT", 2,
            ) for c in pending]  # fmt: skip
            replies = await self._run(app, user, [*commands, *also])
            replies, extra, also = replies[: len(commands)], extra or replies[len(commands) :], []
            short = []
            for c, reply in zip(pending, replies, strict=True):
                docs = search_docs(reply)
                for fields in docs:
                    # Recount exactly: the index may fold words unlike our tokenizer.
                    doc_id = text(fields["id"])
                    matched = len(wanted.intersection(text(fields["words"]).split()))
                    if matched:
                        ranked[doc_id] = (matched, float(fields["ts"]), doc_id)
                if len(docs) < limit:
                    short.append(c)
            pending = short
            if not pending:
                break
        best = sorted(ranked.values(), reverse=True)[:limit]
        return [doc_id for _, _, doc_id in best], extra

    async def _aggregate(
        self, app: str, user: str, words: list[str], limit: int, also: list[tuple[Any, ...]]
    ) -> tuple[list[str], list[Any]]:
        # Exact for any query, CJK substrings included, but it reads every matching entry.
        clauses, tests = [], []
        for word in words:
            if word.isascii():
                clauses.append(f"@words:{escape_term(word)}")
                tests.append(f'(contains(@words, " {word} ") > 0)')
            else:
                grams = " ".join(escape_term(g) for g in sorted(query_grams(word)))
                clauses.append(f"@grams:({grams})")
                tests.append(f'(contains(@lower, "{word}") > 0)')
        query = f"@app:{{{owner_tag(app)}}} @user:{{{owner_tag(user)}}} ({' | '.join(clauses)})"
        reply, *extra = await self._run(app, user, [(
            "FT.AGGREGATE", self.index(app, user), query, "VERBATIM",
            "LOAD", 4, "@words", "@lower", "@ts", "@id",
            "APPLY", " + ".join(tests), "AS", "n",
            "FILTER", "@n > 0",
            "SORTBY", 6, "@n", "DESC", "@ts", "DESC", "@id", "DESC", "MAX", limit,
            "DIALECT", 2,
        ), *also])  # fmt: skip
        return [_row_id(row) for row in _rows(reply)], extra


def _rows(reply: Any) -> list[Any]:
    if isinstance(reply, dict):
        return [
            as_dict(r).get("extra_attributes", {})
            for r in reply[b"results" if b"results" in reply else "results"]
        ]
    return [as_dict(r) for r in reply[1:]]


def search_docs(reply: Any) -> list[dict[str, Any]]:
    """The returned fields of each document of an FT.SEARCH reply (RESP2 or RESP3)."""
    if isinstance(reply, dict):
        results = reply[b"results" if b"results" in reply else "results"]
        return [as_dict(as_dict(r).get("extra_attributes", {})) for r in results]
    return [as_dict(fields) for fields in reply[2::2]]


def _row_id(row: Any) -> str:
    return text(as_dict(row)["id"])


class PlainSearch:
    """Runs ``memory_search.lua`` over the query words' postings, in one round trip."""

    def __init__(self, client: Any, keys: KeySpace, semantic: Semantic | None = None) -> None:
        self._redis = client
        self._keys = keys
        self._semantic = semantic
        self._script = _scripts.register(client, MEMORY_SEARCH)
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

    async def search(self, app: str, user: str, words: Iterable[str], limit: int) -> list[str]:
        # A word's postings are named by their KEYS position, after the texts hash.
        postings: list[str] = []
        at = first_referenced(MEMORY_SEARCH)
        args: list[Any] = [0]
        for word in sorted(words):
            if word.isascii():
                its, verify = [self._keys.memory_word(app, user, word)], ""
            else:
                grams = sorted(query_grams(word))
                its, verify = [self._keys.memory_gram(app, user, g) for g in grams], word
            args.append(len(its))
            for key in its:
                postings.append(key)
                args.append(at + len(postings) - 1)
            args.append(verify)
            args[0] += 1
        call = MemorySearch(
            texts=self._keys.memory_texts(app, user), postings=postings, limit=limit, words=args
        )
        return [text(x) for x in await _scripts.run(self._script, call)]
