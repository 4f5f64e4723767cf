"""Keyword ranking: BM25 over the analysed terms (see ``_analysis``), on either backend.

Both backends score an entry the same way, from the same stored numbers
(``memory_rescore.lua``): the sum over the query's terms of (times the query says it) x idf x
BM25's saturated, length-normalised frequency of the term in the entry with its context,
plus, for a query word naming the entry's author, ``AUTHOR_WEIGHT`` x the author's idf; equal
scores go newest first. The counts come from the user's own entries (Lucene's idf, never
negative; the average length when searching).

Only an entry's own words are indexed, so a search first finds the entries saying the
query's words, then scores those and the turns around them (``EXPAND``):

- **Plain Redis** (``memory_rank.lua``): each term's posting is a zset by weight, read best
  first and only as far as an entry not yet met could still reach the results on its own
  words; at most ``READ_BUDGET`` postings per query, so a word in most entries never costs a
  whole list. The best ``EXPAND`` met are scored with their neighbours. One round trip.
- **RediSearch**: the write scripts keep each term's best ``READ_BUDGET`` postings too (all
  that the plain backend's step may read), and a query of ASCII words is ranked by
  ``memory_rank.lua`` over them, as on plain Redis. The module's own BM25 could not stand
  in: asked for the best 50 of 100,000 entries, it scores every entry holding any query
  word (50-90 ms on 2 busy CPUs), and its top 50 held under half of an exact BM25's top 10
  (``python -m benchmarks.recall --scale 100000``). A query with a non-ASCII word (found
  inside longer runs through the module's grams), or of a user whose entries were written
  before the postings were (no ``tp`` in their stats hash), has the module propose
  candidates: the entries it ranks best for all the terms and for each term alone, a term
  in more than ``COMMON_WINDOW`` of the user's entries only among their newest that many;
  three round trips (the counts, the candidates, the scores).

An entry whose words and neighbours neither step proposes is missed where the other backend
may find it: tests/test_memory.py bounds how often the two differ, and
tests/test_memory_candidates.py checks both against a brute force past every bound.

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
from redis_agent_sessions._redis.memory_calls import (
    MEMORY_RANK,
    MEMORY_RESCORE,
    MemoryRank,
    MemoryRescore,
    first_referenced,
)
from redis_agent_sessions._redis.topology import Topology
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.keys import KeySpace, unescape
from redis_agent_sessions.memory._analysis import (
    AUTHOR_WEIGHT,
    K1,
    SUBSTRING_WEIGHT,
    B,
    query_terms,
)
from redis_agent_sessions.memory._encoding import owner_tag
from redis_agent_sessions.memory._filters import NO_FILTER, Compiled
from redis_agent_sessions.memory._search import escape_term
from redis_agent_sessions.memory._text import query_grams, term_count

__all__ = [
    "COMMON_WINDOW",
    "EXPAND",
    "MAX_QUERY_TERMS",
    "READ_BUDGET",
    "SUBSTRING_CAP",
    "IndexRanker",
    "PlainRanker",
    "QueryTerm",
    "Ranked",
    "prepare",
    "search_terms",
]

READ_BUDGET = 1_500
"""Most postings the plain backend reads for one query."""
EXPAND = 20
"""Fewest of the best candidates whose neighbours are scored too (2 per result asked)."""
SUBSTRING_CAP = 1_000
"""Most entries a non-ASCII query word is looked for inside (the newest)."""
CANDIDATES = 50
"""Fewest entries proposed for all the query's terms (2 per result asked): by the plain
backend's postings, or by the search module, besides half as many for each term alone (1
per result)."""
PER_TERM = 10
"""Fewest entries the search module proposes for each term alone (1 per result asked)."""
COMMON_WINDOW = 1_000
"""A term in more of a user's entries than this is asked about among their newest this many
only (RediSearch scores every entry a query matches)."""
MAX_QUERY_TERMS = 1_000
"""Most distinct terms a search may have (``_text.term_count``): each costs both backends a
lookup (RediSearch a query of its own), and every candidate is scored on each, in a script."""


@dataclass(frozen=True, slots=True)
class QueryTerm:
    term: str
    times: int
    grams: tuple[str, ...]
    """Non-ASCII words: the grams an entry holding it as a substring has."""


@dataclass(slots=True)
class Ranked:
    """A keyword ranking: (id, score) best first."""

    hits: list[tuple[str, float]]
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


def search_terms(query: str) -> list[QueryTerm]:
    """A search's terms (``prepare``), or InvalidInputError past ``MAX_QUERY_TERMS``
    (counted before stemming, which takes seconds on a megabyte of distinct words)."""
    count = term_count(query)
    if count > MAX_QUERY_TERMS:
        raise InvalidInputError(
            f"the query has {count} distinct terms (its words, and outside ASCII their "
            f"characters and pairs of characters), over the limit of {MAX_QUERY_TERMS}"
        )
    return prepare(query)


class PlainRanker:
    """Runs ``memory_rank.lua`` over the query terms' postings: one round trip."""

    def __init__(self, client: Any, keys: KeySpace) -> None:
        self._keys = keys
        self._script = _scripts.register(client, MEMORY_RANK)

    async def rank(
        self,
        app: str,
        user: str,
        terms: Sequence[QueryTerm],
        limit: int,
        where: Compiled = NO_FILTER,
    ) -> Ranked:
        call = self.call(app, user, terms, limit, first=first_referenced(MEMORY_RANK), where=where)
        found = await _scripts.run(self._script, call)
        hits = [(text(i), float(s)) for i, s in found.hits]
        return Ranked(hits, found.total, found.read)

    def call(
        self,
        app: str,
        user: str,
        terms: Sequence[QueryTerm],
        limit: int,
        *,
        first: int,
        where: Compiled = NO_FILTER,
    ) -> MemoryRank:
        """``memory_rank.lua``'s call, its postings named by their KEYS positions from
        ``first`` on: its own, or those of a script that ranks as it does
        (``memory_related.lua``, whose fixed keys are more)."""
        k = self._keys
        postings: list[str] = []
        args: list[Any] = [len(terms)]
        for t in terms:
            postings.append(k.memory_term(app, user, t.term))
            args += [t.term, t.times, first + len(postings) - 1, len(t.grams)]
            for gram in t.grams:
                postings.append(k.memory_gram(app, user, gram))
                args.append(first + len(postings) - 1)
            args.append(t.term if t.grams else "")
        return MemoryRank(
            stats=k.memory_stats(app, user),
            texts=k.memory_texts(app, user),
            df=k.memory_df(app, user),
            context=k.memory_context(app, user),
            postings=postings,
            filter=where.lua(),
            limit=limit,
            read_budget=READ_BUDGET,
            substring_cap=SUBSTRING_CAP,
            substring_weight=SUBSTRING_WEIGHT,
            candidates=max(CANDIDATES, 2 * limit),
            expand=max(EXPAND, limit),
            author_weight=AUTHOR_WEIGHT,
            k1=K1,
            b=B,
            terms=args,
        )


_KNOWN_USERS = 100_000
"""Most users an `IndexRanker` remembers as having postings (then it forgets them all)."""


class IndexRanker:
    """Ranks ASCII queries over the postings the search backend keeps (``memory_rank.lua``,
    one round trip), others by asking the module for candidates and scoring them exactly (see
    the module's doc)."""

    def __init__(self, topology: Topology, keys: KeySpace, index: Any, missing: Any) -> None:
        self._topology = topology
        self._keys = keys
        self._index = index
        """(app, user) -> the index name (one shared, per app, or per user on a cluster)."""
        self._missing = missing
        """(app, ResponseError) -> whether a missing index means nothing to find (a user's,
        made at their first write); raises when it is an error (an app's, provisioned)."""
        self._script = _scripts.register(topology.client, MEMORY_RESCORE)
        self._postings = PlainRanker(topology.client, keys)
        self._posted: set[tuple[str, str]] = set()
        """Users whose stats hash says every entry is in the postings (``tp``): it stays so."""

    async def rank(
        self,
        app: str,
        user: str,
        terms: Sequence[QueryTerm],
        limit: int,
        where: Compiled = NO_FILTER,
    ) -> Ranked:
        ascii_only = not any(t.grams for t in terms)
        if ascii_only and (app, user) in self._posted:
            return await self._postings.rank(app, user, terms, limit, where)
        k = self._keys
        entries = k.memory_entries(app, user)
        # First the counts: a term in many of the user's entries is asked about only among
        # the newest COMMON_WINDOW (the module would score every entry that has it).
        stats, df_raw, edge = await self._topology.at_key(entries, [
            ("HMGET", k.memory_stats(app, user), "n", "len", "tp"),
            ("HMGET", k.memory_df(app, user), *[x for t in terms for x in (t.term, "@" + t.term)]),
            _edge(entries, where),
        ])  # fmt: skip
        n, length = int(stats[0] or 0), int(stats[1] or 0)
        if stats[2]:
            if len(self._posted) >= _KNOWN_USERS:
                self._posted.clear()
            self._posted.add((app, user))
            if ascii_only:
                return await self._postings.rank(app, user, terms, limit, where)
        ranked = Ranked([], n)
        if n <= 0 or limit <= 0:
            return ranked
        df = [int(x or 0) for x in df_raw]
        window = f" @ts:[{float(edge[0][1])!r} +inf]" if edge else ""
        rare = [t for i, t in enumerate(terms) if 0 < df[2 * i] <= COMMON_WINDOW]
        common = [t for i, t in enumerate(terms) if df[2 * i] > COMMON_WINDOW]
        index = self._index(app, user)
        scope = f"@app:{{{owner_tag(app)}}} @user:{{{owner_tag(user)}}}"
        if where:
            # Inside the module's matching: the candidates are all within the filter.
            scope += " " + where.query()
        wanted = max(CANDIDATES, 2 * limit)
        each = max(PER_TERM, limit)

        def search(query: str, count: int, *sort: Any) -> tuple[Any, ...]:
            return (
                "FT.SEARCH", index, f"{scope} {query}", "VERBATIM", "SCORER", "BM25",
                "NOCONTENT", *sort, "LIMIT", 0, count, "DIALECT", 2,
            )  # fmt: skip

        def ored(some: Sequence[QueryTerm]) -> str:
            return "@terms:(" + " | ".join(escape_term(t.term) for t in some) + ")"

        # The entries the module ranks best for all the terms, and for each term alone (its
        # BM25 ranks one term's entries by how often they say it, as the plain backend
        # reads each posting best first).
        candidates = [search(ored(rare), wanted)] if rare else []
        if common:
            candidates.append(search(ored(common) + window, wanted))
        if where.recency is not None and (rare or common):
            # Recency lifts new entries the module's BM25 alone would not propose.
            candidates.append(search(ored([*rare, *common]), wanted, "SORTBY", "ts", "DESC"))
        if len(terms) > 1:
            candidates += [search(ored([t]), each) for t in rare]
            candidates += [search(ored([t]) + window, each) for t in common]
        subs = [t for t in terms if t.grams]
        inside_queries = [
            search(f"@grams:({' '.join(escape_term(g) for g in t.grams)})", SUBSTRING_CAP,
                   "SORTBY", "ts", "DESC")
            for t in subs
        ]  # fmt: skip
        try:
            replies = await self._topology.at_key(entries, [*candidates, *inside_queries])
        except ResponseError as exc:
            if self._missing(app, exc):
                return ranked
            raise
        # Entry keys end with ":entry:" and the escaped id (keys.py).
        start = len(k.memory_entry(app, user, ""))
        proposed = {
            unescape(key[start:]): None
            for reply in replies[: len(candidates)]
            for key in _doc_keys(reply)
        }
        # An entry holding a word's grams is named by its KEYS position, after the context.
        holding: list[str] = []
        at = first_referenced(MEMORY_RESCORE)
        args: list[Any] = [len(terms)]
        inside = dict(zip([t.term for t in subs], replies[len(candidates) :], strict=True))
        for i, t in enumerate(terms):
            found = _doc_keys(inside[t.term]) if t.term in inside else []
            args += [t.term, t.times, df[2 * i], df[2 * i + 1], len(found)]
            for key in found:
                holding.append(key)
                args += [at + len(holding) - 1, unescape(key[start:])]
        args += [len(proposed), *proposed]
        call = MemoryRescore(
            context=k.memory_context(app, user),
            holding=holding,
            filter=where.lua(),
            limit=limit,
            indexed=n,
            author_weight=AUTHOR_WEIGHT,
            substring_weight=SUBSTRING_WEIGHT,
            average_length=length / n,
            k1=K1,
            b=B,
            expand=max(EXPAND, limit),
            terms=args,
        )
        scored = await _scripts.run(self._script, call)
        ranked.hits = [(text(i), float(s)) for i, s in scored]
        return ranked


def _edge(entries: str, where: Compiled) -> tuple[Any, ...]:
    """The command reading the newest ``COMMON_WINDOW``-th entry: of the user, or within a
    filter's time range (ZRANGE: the least-privilege rules have no ZREVRANGEBYSCORE)."""
    if where.since is None and where.until is None:
        return ("ZREVRANGE", entries, COMMON_WINDOW - 1, COMMON_WINDOW - 1, "WITHSCORES")
    high = "+inf" if where.until is None else repr(where.until)
    low = "-inf" if where.since is None else repr(where.since)
    return ("ZRANGE", entries, high, low, "BYSCORE", "REV", "LIMIT", COMMON_WINDOW - 1, 1,
            "WITHSCORES")  # fmt: skip


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
