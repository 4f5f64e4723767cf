"""Keyword ranking: BM25 over the analysed terms (see ``_analysis``), on either backend.

Both backends score an entry the same way, from the same stored numbers: the sum over the
query's terms of (times the query says it) x idf x the term's weight in the entry (written
with the entry: BM25's saturated, length-normalised frequency), plus, for a query word naming
the entry's author, ``AUTHOR_WEIGHT`` x the author's idf; equal scores go newest first. The
idf counts come from the user's own entries (Lucene's formula, never negative).

- **Plain Redis** (``memory_rank.lua``): each term's posting is a zset by weight, read best
  first and only as far as an entry not yet met could still reach the results; every entry
  met is scored exactly. At most ``READ_BUDGET`` postings are read per query, so a word in
  most entries never costs a whole list.
- **RediSearch**: the module proposes candidates, in one round trip: the entries it ranks
  best for all the terms, and for each term alone (its own BM25 over the terms repeated by
  weight); ``memory_rescore.lua`` scores them exactly, from their stored weights and the
  user's counts. An entry the module ranks below the candidates is missed where the plain
  backend would find it: tests/test_memory.py bounds how often.

A non-ASCII query word also matches inside longer runs (CJK is written without spaces): the
newest ``SUBSTRING_CAP`` entries holding all its character grams are checked against their
text, and each match weighs ``SUBSTRING_WEIGHT`` unless the word is one of its terms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import text
from redis_agent_sessions._redis.topology import Topology
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory._analysis import (
    AUTHOR_WEIGHT,
    SUBSTRING_WEIGHT,
    query_terms,
)
from redis_agent_sessions.memory._search import escape_term
from redis_agent_sessions.memory._store import owner_tag
from redis_agent_sessions.memory._text import query_grams

__all__ = [
    "READ_BUDGET",
    "SUBSTRING_CAP",
    "IndexRanker",
    "PlainRanker",
    "QueryTerm",
    "Ranked",
    "prepare",
]

READ_BUDGET = 4_000
"""Most postings the plain backend reads for one query."""
SUBSTRING_CAP = 1_000
"""Most entries a non-ASCII query word is looked for inside (the newest)."""
CANDIDATES = 50
"""Fewest entries the search module proposes for all the query's terms (10 per result asked),
besides half as many for each term alone."""


@dataclass(frozen=True, slots=True)
class QueryTerm:
    term: str
    times: int
    grams: tuple[str, ...]
    """Non-ASCII words: the grams an entry holding it as a substring has."""


@dataclass(slots=True)
class Ranked:
    """A keyword ranking: (id, score) best first, and how many of the user's entries are
    still indexed the 0.1 way (found by the old rule until ``reindex`` has run)."""

    hits: list[tuple[str, float]]
    legacy: int = 0
    entries: int = 0
    """All the user's entries."""
    read: int | None = None
    """Plain backend: the postings the script read (bounded by ``READ_BUDGET``)."""


def prepare(query: str) -> list[QueryTerm]:
    """The query's terms, in the order scores are summed."""
    return [
        QueryTerm(term, times, () if term.isascii() else tuple(sorted(query_grams(term))))
        for term, times in sorted(query_terms(query).items())
    ]


class PlainRanker:
    """Runs ``memory_rank.lua`` over the query terms' postings, in one round trip."""

    def __init__(self, client: Any, keys: KeySpace) -> None:
        self._keys = keys
        self._script = _scripts.register(client, "memory_rank")

    async def rank(self, app: str, user: str, terms: Sequence[QueryTerm], limit: int) -> Ranked:
        k = self._keys
        keys = [k.memory_stats(app, user), k.memory_entries(app, user), k.memory_texts(app, user)]
        args: list[Any] = [limit, READ_BUDGET, SUBSTRING_CAP, AUTHOR_WEIGHT, SUBSTRING_WEIGHT]
        args.append(len(terms))
        for t in terms:
            keys += [k.memory_term(app, user, t.term), k.memory_term(app, user, "@" + t.term)]
            args += [t.times, len(keys) - 1, len(keys), len(t.grams)]
            for gram in t.grams:
                keys.append(k.memory_gram(app, user, gram))
                args.append(len(keys))
            args.append(t.term if t.grams else "")
        reply = await _scripts.call(self._script, keys, args)
        total, n, read = int(reply[0]), int(reply[1]), int(reply[2])
        hits = [(text(i), float(s)) for i, s in zip(reply[3::2], reply[4::2], strict=True)]
        return Ranked(hits, total - n, total, read)


class IndexRanker:
    """Asks the search module for candidates and scores them exactly (see the module's doc)."""

    def __init__(self, topology: Topology, keys: KeySpace, index: Any) -> None:
        self._topology = topology
        self._keys = keys
        self._index = index
        """(app, user) -> the index name (one shared, or one per user on a cluster)."""
        self._script = _scripts.register(topology.client, "memory_rescore")

    async def rank(self, app: str, user: str, terms: Sequence[QueryTerm], limit: int) -> Ranked:
        k = self._keys
        index = self._index(app, user)
        scope = f"@app:{{{owner_tag(app)}}} @user:{{{owner_tag(user)}}}"
        wanted = max(CANDIDATES, 5 * limit)
        each = max(CANDIDATES // 2, 3 * limit)

        def search(query: str, count: int, *sort: Any) -> tuple[Any, ...]:
            return (
                "FT.SEARCH", index, f"{scope} {query}", "VERBATIM", "SCORER", "BM25",
                "NOCONTENT", *sort, "LIMIT", 0, count, "DIALECT", 2,
            )  # fmt: skip

        ored = " | ".join(escape_term(t.term) for t in terms)
        commands: list[tuple[Any, ...]] = [
            ("HGET", k.memory_stats(app, user), "n"),
            ("ZCARD", k.memory_entries(app, user)),
            ("HMGET", k.memory_df(app, user), *[x for t in terms for x in (t.term, "@" + t.term)]),
            search(f"@terms:({ored})", wanted),
            # Its BM25 ranks one term's entries by how often the term is repeated, that is by
            # weight: each term's best, as the plain backend reads each posting best first.
            *(search(f"@terms:{escape_term(t.term)}", each) for t in terms if len(terms) > 1),
            *(
                search(f"@grams:({' '.join(escape_term(g) for g in t.grams)})",
                       SUBSTRING_CAP, "SORTBY", "ts", "DESC")
                for t in terms if t.grams
            ),
        ]  # fmt: skip
        try:
            n_raw, total, df_raw, *replies = await self._topology.at_key(
                k.memory_entries(app, user), commands
            )
        except ResponseError as exc:
            # On a cluster a user's own index exists once they have written an entry.
            if "no such index" in str(exc).lower():
                return Ranked([])
            raise
        n = int(n_raw or 0)
        ranked = Ranked([], int(total) - n, int(total))
        if n <= 0 or limit <= 0:
            return ranked
        by_term = len(terms) if len(terms) > 1 else 0
        keys: dict[str, int] = {}
        for reply in replies[: 1 + by_term]:
            for key in _doc_keys(reply):
                keys.setdefault(key, len(keys) + 1)
        df = [int(x or 0) for x in df_raw]
        args: list[Any] = [limit, n, AUTHOR_WEIGHT, SUBSTRING_WEIGHT, len(terms)]
        subs = iter(replies[1 + by_term :])
        for i, t in enumerate(terms):
            inside = (
                [keys.setdefault(key, len(keys) + 1) for key in _doc_keys(next(subs))]
                if t.grams
                else []
            )
            args += [t.term, t.times, df[2 * i], df[2 * i + 1], len(inside), *inside]
        if not keys:
            return ranked
        reply = await _scripts.call(self._script, list(keys), args)
        ranked.hits = [(text(i), float(s)) for i, s in zip(reply[::2], reply[1::2], strict=True)]
        return ranked


def _doc_keys(reply: Any) -> list[str]:
    """The document keys of a NOCONTENT FT.SEARCH reply (RESP2 or RESP3)."""
    if isinstance(reply, dict):
        results = reply[b"results" if b"results" in reply else "results"]
        return [text(_field(r, "id")) for r in results]
    return [text(key) for key in reply[1:]]


def _field(row: Any, name: str) -> Any:
    if isinstance(row, dict):
        return row.get(name, row.get(name.encode()))
    return row
