"""The memory scripts' calls and replies, by name (see ``.calls``; each ``.lua`` header
says what every field means).

Several of them name keys by their position in KEYS (a JSON operation's ``k``, a term's
posting): those keys are the call's ``referenced`` field, which follows its fixed keys, so
the first of them is KEYS[``Script.keys``] (``first_referenced``). Vectors go the same
way in ARGV (``first_vector``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from redis_agent_sessions._redis.calls import Script, raw

__all__ = [
    "MEMORY_DELETE",
    "MEMORY_FACTS",
    "MEMORY_PUT",
    "MEMORY_RANK",
    "MEMORY_RELATED",
    "MEMORY_RESCORE",
    "MEMORY_VECTOR",
    "MEMORY_VECTORS",
    "SCRIPTS",
    "Deleted",
    "FactsApplied",
    "MemoryDelete",
    "MemoryFacts",
    "MemoryPut",
    "MemoryRank",
    "MemoryRelated",
    "MemoryRescore",
    "MemoryVector",
    "MemoryVectors",
    "Put",
    "Ranked",
    "Related",
    "VectorsSet",
    "first_referenced",
    "first_vector",
]


def first_referenced(script: Script[Any, Any]) -> int:
    """The KEYS position (1-based) of the first of a call's ``referenced`` keys."""
    return script.keys


def first_vector(script: Script[Any, Any]) -> int:
    """The ARGV position (1-based) of the first of a call's ``vectors``."""
    return len(script.fields()[1])


# -- memory_put.lua --------------------------------------------------------------------------


class MemoryPut(NamedTuple):
    entries: str
    deleted: str
    session: str  # the entries zset again when no session's ids are recorded
    ingestion: str  # the entries zset again when there is no ingestion set
    texts: str
    stats: str
    df: str
    context: str
    referenced: Sequence[str]
    mode: str  # 'replace', 'keep' or 'explicit'
    postings: int
    record_session: int
    ingestion_ttl: int
    final: int
    stale_limit: int
    entries_json: bytes
    k1: float
    b: float
    counts_json: bytes  # the batch's terms counted: [term, entries, ...] (see the header)
    vectors: Sequence[bytes]


class Put(NamedTuple):
    """``status``: 1 written (``stale``: the session's stale ids, on the last batch), 0 an
    entry changed since it was read, 2 entries sent without a vector no longer have theirs
    (``missing``: their ids)."""

    status: int
    stale: list[Any]
    missing: list[Any]


def _put(call: MemoryPut, reply: list[Any]) -> Put:
    if reply[0] == 1:
        return Put(1, list(reply[2:]), [])
    if reply[0] == 2:
        return Put(2, [], list(reply[1:]))
    return Put(int(reply[0]), [], [])


MEMORY_PUT = Script("memory_put", MemoryPut, keys=9, reply=_put, more_keys=True, more_args=True)


# -- memory_delete.lua -----------------------------------------------------------------------


class MemoryDelete(NamedTuple):
    entries: str
    deleted: str
    texts: str
    ingestion: str  # the entries zset again when there is no ingestion set
    stats: str
    df: str
    context: str
    referenced: Sequence[str]
    tombstone: int
    postings: int
    spare_ingesting: int
    entries_json: bytes


class Deleted(NamedTuple):
    """``done``: False when an entry changed since it was read (nothing written)."""

    done: bool
    removed: int


def _deleted(call: MemoryDelete, reply: list[Any]) -> Deleted:
    return Deleted(True, int(reply[1])) if reply[0] == 1 else Deleted(False, 0)


MEMORY_DELETE = Script("memory_delete", MemoryDelete, keys=8, reply=_deleted, more_keys=True)


# -- memory_vector.lua -----------------------------------------------------------------------


class MemoryVector(NamedTuple):
    entries: Sequence[str]
    model: str
    rows: Sequence[Any]  # per entry: the content embedded, its vkey, its vector


class VectorsSet(NamedTuple):
    stored: int
    skipped: int


MEMORY_VECTOR = Script(
    "memory_vector",
    MemoryVector,
    keys=1,
    reply=lambda call, reply: VectorsSet(int(reply[0]), int(reply[1])),
    more_keys=True,
    more_args=True,
)


# -- memory_vectors.lua ----------------------------------------------------------------------


class MemoryVectors(NamedTuple):
    entries: Sequence[str]


MEMORY_VECTORS: Script[MemoryVectors, list[Any]] = Script(
    "memory_vectors", MemoryVectors, keys=1, reply=raw, more_keys=True
)


# -- memory_rank.lua -------------------------------------------------------------------------


class MemoryRank(NamedTuple):
    stats: str
    texts: str
    df: str
    context: str
    postings: Sequence[str]
    filter: str  # memory/_filters.py's Compiled.lua()
    limit: int
    read_budget: int
    substring_cap: int
    substring_weight: float
    candidates: int
    expand: int
    author_weight: float
    k1: float
    b: float
    terms: Sequence[Any]  # their number, then per term (see the header)


class Ranked(NamedTuple):
    """The user's entries, the postings read, and the best (id, score) pairs."""

    total: int
    read: int
    hits: list[tuple[Any, Any]]


def _ranked(call: MemoryRank, reply: list[Any]) -> Ranked:
    hits = list(zip(reply[2::2], reply[3::2], strict=True))
    return Ranked(int(reply[0]), int(reply[1]), hits)


MEMORY_RANK = Script(
    "memory_rank", MemoryRank, keys=5, reply=_ranked, more_keys=True, more_args=True
)


# -- memory_rescore.lua ----------------------------------------------------------------------


class MemoryRescore(NamedTuple):
    context: str
    holding: Sequence[str]  # entry hashes holding a query word's grams
    filter: str  # memory/_filters.py's Compiled.lua()
    limit: int
    indexed: int
    author_weight: float
    substring_weight: float
    average_length: float
    k1: float
    b: float
    expand: int
    terms: Sequence[Any]  # their number, then per term, then the candidates (see the header)


def _scored(call: MemoryRescore, reply: list[Any]) -> list[tuple[Any, Any]]:
    """The best (id, score) pairs."""
    return list(zip(reply[::2], reply[1::2], strict=True))


MEMORY_RESCORE = Script(
    "memory_rescore", MemoryRescore, keys=2, reply=_scored, more_keys=True, more_args=True
)


# -- memory_facts.lua ------------------------------------------------------------------------


class MemoryFacts(NamedTuple):
    entries: str
    texts: str
    stats: str
    df: str
    context: str
    facts: str
    expiry: str
    watermark: str
    read_events: str
    records: str
    referenced: Sequence[str]
    postings: int
    k1: float
    b: float
    seen_mark: str  # '' none yet, '*' not checked
    new_mark: str  # '' left as it is
    history_size: int
    now_ms: int
    operations: bytes
    read: bytes
    vectors: Sequence[bytes]


class FactsApplied(NamedTuple):
    """``status``: 1 applied, 0 a fact is not at the revision seen (``fact`` names it), 3
    the watermark moved (or an event was read already)."""

    status: int
    fact: Any = None


MEMORY_FACTS = Script(
    "memory_facts",
    MemoryFacts,
    keys=11,
    reply=lambda call, reply: FactsApplied(int(reply[0]), reply[1] if reply[0] == 0 else None),
    more_keys=True,
    more_args=True,
)


# -- memory_related.lua -----------------------------------------------------------------------


class MemoryRelated(NamedTuple):
    stats: str
    texts: str
    df: str
    context: str
    facts: str
    expiry: str
    records: str
    postings: Sequence[str]  # memory_rank.lua's, with how = 'rank'
    most: int
    now_ms: int
    most_due: int
    how: str  # 'rank', 'ids' or 'ask'
    choice: Sequence[Any]  # memory_rank.lua's ARGV ('rank'), or the ids' number, then them


class Related(NamedTuple):
    """The facts past their time to live, then those shown, as (id, record) pairs (a record
    is None when the fact is gone); None: more facts than are shown, and ``how`` was 'ask'."""

    due: list[tuple[Any, Any]]
    shown: list[tuple[Any, Any]]


def _related(call: MemoryRelated, reply: list[Any]) -> Related | None:
    if reply[0] == 2:
        return None
    due = int(reply[1])
    found = list(zip(reply[2::2], reply[3::2], strict=True))
    return Related(found[:due], found[due:])


MEMORY_RELATED = Script(
    "memory_related", MemoryRelated, keys=8, reply=_related, more_keys=True, more_args=True
)


SCRIPTS: tuple[Script[Any, Any], ...] = (
    MEMORY_DELETE,
    MEMORY_FACTS,
    MEMORY_PUT,
    MEMORY_RANK,
    MEMORY_RELATED,
    MEMORY_RESCORE,
    MEMORY_VECTOR,
    MEMORY_VECTORS,
)
