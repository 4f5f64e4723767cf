"""Semantic recall: the vector index's definition and query, the plain backend's exact scan,
and the fusion of the keyword and vector rankings.

Vectors are stored unit length, so cosine similarity is their dot product, and the index's
COSINE distance is ``1 - similarity``.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from redis_agent_sessions._redis.codec import text
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.memory._embedders import Vectorizer

__all__ = [
    "RETRIEVAL_KEY",
    "Hit",
    "Semantic",
    "VectorIndex",
    "fuse",
    "knn_command",
    "nearest",
    "parse_knn",
    "vector_schema",
]

VectorIndex = Literal["HNSW", "FLAT", "SVS-VAMANA"]

RRF_K = 60
"""Reciprocal rank fusion's constant (Cormack et al., 2009): an entry scores
``1 / (60 + rank)`` in each ranking that has it."""
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
    params: list[Any] = [
        "TYPE", "FLOAT32", "DIM", semantic.vectorizer.dimensions, "DISTANCE_METRIC", "COSINE",
    ]  # fmt: skip
    if semantic.index == "HNSW":
        params += ["EF_RUNTIME", HNSW_EF_RUNTIME]
    return [
        "app", "TAG", "user", "TAG",
        "vec", "VECTOR", semantic.index, len(params), *params,
    ]  # fmt: skip


def knn_command(index: str, scope: str, blob: bytes, k: int) -> tuple[Any, ...]:
    """The ``k`` nearest of one owner's entries. The owner filter is inside the KNN query:
    the index searches only that (app, user)'s vectors, so no other user's entry can be
    among the results, however near."""
    return (
        "FT.SEARCH", index, f"({scope})=>[KNN {k} @vec $blob AS dist]",
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
    score: float = 0.0
    keyword_rank: int | None = None
    vector_rank: int | None = None
    similarity: float | None = None
    found_by: list[str] = field(default_factory=list)


def fuse(
    keyword: Sequence[str],
    vector: Sequence[Hit],
    min_similarity: float,
    limit: int,
) -> list[tuple[str, dict[str, Any]]]:
    """Reciprocal rank fusion of the keyword ranking (ids, best first) and the vector hits
    above ``min_similarity``: ids best first, each with how it was found. Of equal scores
    (one path's rank r against the other's), the keyword match goes first."""
    fused: dict[str, _Fused] = {}
    for rank, memory_id in enumerate(keyword, 1):
        entry = fused.setdefault(memory_id, _Fused(memory_id))
        entry.score += 1.0 / (RRF_K + rank)
        entry.keyword_rank = rank
        entry.found_by.append("keyword")
    rank = 0
    for hit in vector:
        if hit.similarity <= min_similarity:
            continue
        rank += 1
        entry = fused.setdefault(hit.id, _Fused(hit.id))
        entry.score += 1.0 / (RRF_K + rank)
        entry.vector_rank = rank
        entry.similarity = round(hit.similarity, 6)
        entry.found_by.append("vector")
    best = sorted(fused.values(), key=lambda e: -e.score)[:limit]  # stable: keyword first
    return [
        (
            e.id,
            {
                "found_by": e.found_by,
                "score": round(e.score, 6),
                "keyword_rank": e.keyword_rank,
                "vector_rank": e.vector_rank,
                "similarity": e.similarity,
            },
        )
        for e in best
    ]
