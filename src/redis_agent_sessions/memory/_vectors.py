"""Semantic recall: the vector index's definition and query, the plain backend's exact scan,
and the fusion of the keyword and vector rankings.

Vectors are stored unit length, so cosine similarity is their dot product, and the index's
COSINE distance is ``1 - similarity``.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from redis_agent_sessions._redis.codec import text
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.memory._embedders import Vectorizer

__all__ = [
    "FUSION_DEPTH",
    "RESCORED",
    "RETRIEVAL_KEY",
    "Hit",
    "Semantic",
    "VectorIndex",
    "fuse",
    "knn_command",
    "nearest",
    "parse_knn",
    "similarities",
    "vector_fields",
    "vector_schema",
    "vector_texts",
    "vector_weight",
]

VectorIndex = Literal["HNSW", "FLAT", "SVS-VAMANA"]

FUSION_DEPTH = 50
"""How many of each ranking are fused, whatever the limit."""
RESCORED = 20
"""Fewest of the keyword ranking's best whose similarity is read when the vectors did not
return them (2 per result asked): further down, a similarity seldom lifts a match into
the results (none on LoCoMo's dev questions), and each costs a vector read."""
AGREEMENT = 20
"""The top of each ranking compared to decide whether the vectors count (``vector_weight``)."""
VECTOR_WEIGHT = 0.5
"""What a similarity of 1 adds to a keyword score scaled to the best one's 1."""
MARGIN_SD = 1.0
"""Agreement beyond chance needed before the vectors count, in standard deviations of the
chance overlap: these constants, and what a turn's vector is made of (``vector_texts``),
were chosen on LoCoMo's dev conversations (docs/memory-ranking.md)."""
HNSW_EF_RUNTIME = 100
"""Candidates an HNSW query keeps: RediSearch's default (10) misses true neighbours
among many entries; see benchmarks/semantic.py for the recall this buys."""
PLAIN_SCAN = 2_000
"""Without the search module, the newest entries of a user that vector search compares."""
RETRIEVAL_KEY = "redis_agent_sessions"
"""The ``custom_metadata`` key of a hybrid result saying how it was found."""


@dataclass(frozen=True, slots=True)
class Semantic:
    """What an embedder turns on: how vectors are made, indexed and filtered."""

    vectorizer: Vectorizer
    index: VectorIndex = "HNSW"
    min_similarity: float = 0.0

    def __post_init__(self) -> None:
        if self.index not in ("HNSW", "FLAT", "SVS-VAMANA"):
            raise InvalidInputError(
                f"vector_index must be 'HNSW', 'FLAT' or 'SVS-VAMANA': {self.index!r}"
            )
        value = self.min_similarity
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -1 <= value < 1:
            raise InvalidInputError(f"min_similarity must be in [-1, 1): {value!r}")


@dataclass(slots=True)
class Hit:
    """One entry found by the vector path: its similarity to the query and time."""

    id: str
    similarity: float
    ts: float


def vector_schema(semantic: Semantic) -> list[Any]:
    """The vector index's SCHEMA: the owner filters and the vector field."""
    return vector_fields(semantic.vectorizer.dimensions, semantic.index)


def vector_fields(dimensions: int, algorithm: str) -> list[Any]:
    """The vector index's SCHEMA for vectors of ``dimensions`` indexed by ``algorithm``
    (also for an operator making an app's index, who has no embedder: the store's vector
    record gives the dimensions)."""
    params: list[Any] = [
        "TYPE", "FLOAT32", "DIM", dimensions, "DISTANCE_METRIC", "COSINE",
    ]  # fmt: skip
    if algorithm == "HNSW":
        params += ["EF_RUNTIME", HNSW_EF_RUNTIME]
    return [
        "app", "TAG", "user", "TAG",
        "vec", "VECTOR", algorithm, len(params), *params,
    ]  # fmt: skip


def knn_command(
    index: str, scope: str, blob: bytes, k: int, *, batches: bool = False
) -> tuple[Any, ...]:
    """The ``k`` nearest of one owner's entries. The owner filter is inside the KNN query:
    the index searches only that (app, user)'s vectors, so no other user's entry can be
    among the results, however near. With ``batches`` the module walks the graph and
    filters what it finds, instead of its own choice (which, for an owner of most of the
    index, is to compare the query with every vector)."""
    policy = " HYBRID_POLICY BATCHES" if batches else ""
    return (
        "FT.SEARCH", index, f"({scope})=>[KNN {k} @vec $blob{policy} AS dist]",
        "PARAMS", 2, "blob", blob,
        "RETURN", 3, "dist", "ts", "id",
        "SORTBY", "dist", "ASC", "LIMIT", 0, k, "DIALECT", 2,
    )  # fmt: skip


def parse_knn(docs: Sequence[dict[str, Any]]) -> list[Hit]:
    """The hits of a KNN reply, best first, equals newest first (as the plain scan)."""
    hits = []
    for fields in docs:
        if "dist" not in fields or "id" not in fields:
            continue  # a hash with another shape under the prefix
        hits.append(
            Hit(text(fields["id"]), 1.0 - float(fields["dist"]), float(fields.get("ts", 0.0)))
        )
    hits.sort(key=lambda h: (h.similarity, h.ts, h.id), reverse=True)
    return hits


def nearest(
    vectorizer: Vectorizer, query: bytes, rows: Sequence[tuple[str, float, Any]], k: int
) -> list[Hit]:
    """Exact nearest neighbours among ``rows`` of (id, ts, stored vector bytes or None)."""
    q = vectorizer.unpack(query)
    assert q is not None
    hits = []
    for memory_id, ts, blob in rows:
        vector = None if blob is None else vectorizer.unpack(blob)
        if vector is not None:  # not embedded yet, or by a model of another dimension
            hits.append(Hit(memory_id, _dot(q, vector), ts))
    return heapq.nlargest(k, hits, key=lambda h: (h.similarity, h.ts, h.id))


def _sum_of_products(a: Sequence[float], b: Sequence[float]) -> float:
    return float(sum(map(operator.mul, a, b)))


# math.sumprod (Python 3.12+) runs in C: ~3x faster than the pure-Python sum.
_dot: Callable[[Sequence[float], Sequence[float]], float] = getattr(
    math, "sumprod", _sum_of_products
)


@dataclass(slots=True)
class _Fused:
    id: str
    keyword: float = 0.0
    similarity: float | None = None
    keyword_rank: int | None = None
    keyword_score: float | None = None
    vector_rank: int | None = None
    found_by: list[str] = field(default_factory=list)


def vector_weight(keyword: Sequence[str], vector: Sequence[str], entries: int) -> float:
    """How much this query's similarities count: ``VECTOR_WEIGHT`` when the two rankings'
    top ``AGREEMENT`` share more than two unrelated lists would by chance, else 0. A weak or
    unrelated embedder (another language, random vectors) agrees by chance only and
    weighs nothing, so it never pulls a good keyword ranking down."""
    a, b = set(keyword[:AGREEMENT]), set(vector[:AGREEMENT])
    n = max(entries, len(a | b), 2)
    if not a or not b:
        return 0.0
    # The overlap of two unrelated lists is hypergeometric: its mean, and a margin of
    # MARGIN_SD standard deviations (at least one entry) above it.
    chance = len(a) * len(b) / n
    spread = math.sqrt(len(a) * len(b) * (n - len(a)) * (n - len(b)) / (n * n * (n - 1)))
    margin = max(1.0, MARGIN_SD * spread)
    return VECTOR_WEIGHT if len(a & b) > chance + margin else 0.0


def similarities(
    vectorizer: Vectorizer, query: bytes, rows: Sequence[tuple[str, bytes | None]]
) -> dict[str, float]:
    """The query's cosine similarity to each (id, stored vector) that has one."""
    q = vectorizer.unpack(query)
    assert q is not None
    out = {}
    for memory_id, blob in rows:
        vector = None if blob is None else vectorizer.unpack(blob)
        if vector is not None:
            out[memory_id] = _dot(q, vector)
    return out


def fuse(
    keyword: Sequence[tuple[str, float]],
    vector: Sequence[Hit],
    similarity: Mapping[str, float],
    min_similarity: float,
    limit: int,
    entries: int,
) -> list[tuple[str, dict[str, Any]]]:
    """The keyword ranking ((id, score), best first) and the vector hits (best first), of
    the user's ``entries``, rescored together: ids best first, each with how it was found.
    An entry scores its keyword score over the best one's (0 when the keywords did not
    find it) plus ``vector_weight`` x its similarity to the query (from its hit, or from
    ``similarity`` for a keyword match the vectors did not return; 0 at or below
    ``min_similarity``). Of equal scores the keyword match goes first; with weight 0 the
    keyword ranking stays as it is, and entries only the vectors found fill a short one."""
    hits = [hit for hit in vector if hit.similarity > min_similarity]
    weight = vector_weight([i for i, _ in keyword], [h.id for h in hits], entries)
    best = keyword[0][1] if keyword and keyword[0][1] > 0 else 1.0
    fused: dict[str, _Fused] = {}
    for rank, (memory_id, keyword_score) in enumerate(keyword, 1):
        entry = fused.setdefault(memory_id, _Fused(memory_id))
        entry.keyword = keyword_score / best
        entry.keyword_rank = rank
        entry.keyword_score = round(keyword_score, 6)
        entry.found_by.append("keyword")
        entry.similarity = similarity.get(memory_id)
    for rank, hit in enumerate(hits, 1):
        entry = fused.setdefault(hit.id, _Fused(hit.id))
        entry.vector_rank = rank
        entry.similarity = hit.similarity
        entry.found_by.append("vector")

    def score(e: _Fused) -> float:
        near = e.similarity if e.similarity is not None and e.similarity > min_similarity else 0
        return e.keyword + weight * near

    ranked = sorted(
        fused.values(),
        key=lambda e: (-score(e), e.keyword_rank is None, e.keyword_rank or 0, e.vector_rank or 0),
    )
    return [
        (
            e.id,
            {
                "found_by": e.found_by,
                "score": round(score(e), 6),
                "keyword_rank": e.keyword_rank,
                "keyword_score": e.keyword_score,
                "vector_rank": e.vector_rank,
                "similarity": None if e.similarity is None else round(e.similarity, 6),
                "vector_weight": round(weight, 6),
            },
        )
        for e in ranked[:limit]
    ]


def vector_texts(
    turn: tuple[str | None, str],
    before: tuple[str | None, str] | None,
    after: tuple[str | None, str] | None,
) -> tuple[str, ...]:
    """What a turn's vector is the sum of: the turn, and each pair it makes with the turn
    before and after it in its session, each turn as ``author: text``. A reply ("Yes, last
    spring") says little alone: its pair with the question holds what it is about. A turn
    without neighbours (or with ``context_turns=0``) is its text alone, as an entry of
    ``add_memory`` or a fact."""
    if before is None and after is None:
        return (turn[1],)
    own = _said(*turn)
    pairs = [f"{_said(*before)} {own}"] if before else []
    return (own, *pairs, *([f"{own} {_said(*after)}"] if after else []))


def _said(author: str | None, said: str) -> str:
    return f"{author}: {said}" if author else said
