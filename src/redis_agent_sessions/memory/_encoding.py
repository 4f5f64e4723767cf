"""Memory entries encoded for the write scripts: what each is found by (``Doc``), the
runs a script takes at once (``batches``), and the KEYS of one call."""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from redis_agent_sessions._redis.codec import text
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.keys import escape
from redis_agent_sessions.memory._analysis import Analysed, analysis_id
from redis_agent_sessions.memory._text import entry_grams, lowered_text, searchable_words

__all__ = [
    "BATCH_ENTRIES",
    "UNKNOWN_SESSION_ID",
    "VECTOR_BATCH_ENTRIES",
    "Batcher",
    "Doc",
    "ScriptKeys",
    "batches",
    "escaped_term",
    "iso_timestamp",
    "make_doc",
    "owner_tag",
    "parse_iso",
    "stored_sig",
]

UNKNOWN_SESSION_ID = "__unknown_session_id__"
"""Where ADK files events added without a session id."""
BATCH_ENTRIES = 200
VECTOR_BATCH_ENTRIES = 32
"""With vectors on the search backend: the module indexes each vector as it is written, inside
the script (~0.65 ms per 384-dimensional entry into HNSW on RediSearch 2.10,
benchmarks/semantic.py), so a batch of 32 holds Redis ~20 ms, not 130."""
_BATCH_BYTES = 1 << 20
_BATCH_TERMS = 20_000


@functools.lru_cache(maxsize=65536)
def escaped_term(term: str) -> str:
    return escape(term)


@functools.lru_cache(maxsize=4096)
def owner_tag(value: str) -> str:
    """A TAG value for an app or user id: hex, so no input needs query escaping."""
    return hashlib.blake2b(value.encode(), digest_size=16).hexdigest()


@dataclass(slots=True)
class Doc:
    """One entry, encoded for the write script."""

    id: str
    ts: float
    fields: dict[str, str]
    """The entry hash's fields but those it is found by (the script adds those)."""
    analysed: Analysed
    grams: list[str]
    text: str
    """Lowercased text when a substring search may need it (non-ASCII words), else ''."""
    raw: str = ""
    """The text as given: what an embedder embeds, unless ``vtexts`` says otherwise."""
    lower: str = ""
    """The text lowercased: the search backend's substring check reads it from the hash."""
    own: str = ""
    """``own``: its terms, ``term:count`` (the postings it is in)."""
    tf: str = ""
    """``tf``: its terms with the context, ``term:quarters`` (what it is scored by)."""
    au: str = ""
    """``au``: its author's terms."""
    gram_field: str = ""
    """``grams``: its grams, space-separated and -enclosed."""
    near: str = "[]"
    """Its neighbours' ids (JSON), for its field of the context hash."""
    vkey: str | None = None
    """With an embedder: what the vector is made from (model, dimension, text)."""
    vec: bytes | None = None
    """The vector to store; None with a ``vkey`` keeps the one stored under that key."""
    keep_vector: bool = False
    """Without a ``vkey``: keep the stored vector as it is (reindexing)."""
    vtexts: tuple[str, ...] = ()
    """A turn with neighbours: the texts whose vectors are summed into its own
    (``_vectors.vector_texts``); empty: ``raw`` alone."""

    @property
    def embedded(self) -> tuple[str, ...]:
        """The texts its vector is made from."""
        return self.vtexts or (self.raw,)

    @property
    def sig(self) -> str:
        """What it is found by, as the scripts spell it (``entry_sig``)."""
        return f"{self.own}|{self.tf}|{self.analysed.length}|{self.au}|{self.gram_field}"


def make_doc(
    *,
    app_name: str,
    user_id: str,
    memory_id: str,
    session_id: str,
    author: str | None,
    ts: float,
    iso: str | None,
    text_: str,
    content_json: bytes,
    meta: dict[str, Any],
    analysed: Analysed,
    neighbours: Sequence[str] = (),
    analysis: str | None = None,
) -> Doc | None:
    """The encoded entry, or None when it has no term to be found by. ``meta`` and
    ``author`` are the caller's to check (``_docs.check_entry``): JSON can hold them."""
    if not analysed.tf:
        return None
    grams = set() if text_.isascii() else entry_grams(searchable_words(text_))
    lower = lowered_text(text_)
    fields = {
        "id": memory_id,
        "app_name": app_name,
        "user_id": user_id,
        "session": session_id,
        "author": "" if author is None else "=" + author,
        "ts": repr(ts),
        "timestamp": "" if iso is None else "=" + iso,
        "content": content_json.decode(),
        "meta": orjson.dumps(meta).decode(),
        "an": analysis_id() if analysis is None else analysis,
    }
    ordered = sorted(grams)
    return Doc(
        memory_id, ts, fields, analysed, ordered, lower if grams else "", text_, lower,
        own=analysed.encoded_own(), tf=analysed.encoded_tf(), au=" ".join(analysed.authors),
        gram_field=" " + " ".join(ordered) + " ", near=orjson.dumps(list(neighbours)).decode(),
    )  # fmt: skip


def stored_sig(row: Sequence[Any]) -> str | None:
    """What an entry read as (own, tf, dl, au, grams) is found by, as the scripts spell it;
    None when it does not exist."""
    own, tf, dl, au, grams = row[:5]
    if tf is None:
        return None
    return f"{text(own or '')}|{text(tf)}|{text(dl)}|{text(au or '')}|{text(grams or '')}"


def iso_timestamp(ts: float) -> str:
    """ADK's rendering of an event time: local time, no zone."""
    return datetime.fromtimestamp(ts).isoformat()


def parse_iso(value: str) -> float:
    try:
        ts = datetime.fromisoformat(value).timestamp()
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"memory timestamp is not ISO-8601: {value!r}") from exc
    if not math.isfinite(ts):
        raise InvalidInputError(f"memory timestamp out of range: {value!r}")
    return ts


@dataclass
class ScriptKeys:
    """The keys a script call names by their position in KEYS (its call object's
    ``referenced``), which follow its fixed keys: the first is KEYS[``first``]
    (``memory_calls.first_referenced``)."""

    first: int
    keys: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    postings: dict[str, int] = field(default_factory=dict)
    """term -> the index of its posting key (a batch names the same terms again and again:
    each key is built once)."""

    def ref(self, key: str) -> int:
        if key not in self.index:
            self.index[key] = self.first + len(self.keys)
            self.keys.append(key)
        return self.index[key]

    def posting(self, base: str, term: str) -> int:
        """The index of the posting key ``base`` + the escaped ``term``."""
        found = self.postings.get(term)
        if found is None:
            found = self.postings[term] = self.ref(base + escaped_term(term))
        return found


class Batcher:
    """Docs into runs bounded in count (the first to ``first``, when given), bytes and terms
    (a posting each, on the plain backend), so one script never blocks Redis long. A run is
    done when the doc after it does not fit: the last is known when the docs run out."""

    def __init__(self, entries: int = BATCH_ENTRIES, first: int | None = None) -> None:
        self._entries = entries
        self._bound = entries if first is None else first
        self._batch: list[Doc] = []
        self._size = self._terms = 0

    def add(self, doc: Doc) -> list[Doc] | None:
        """Take ``doc``: the run before it when it does not fit there (it starts the next)."""
        doc_size = sum(len(v) for v in doc.fields.values()) + len(doc.vec or b"")
        doc_size += len(doc.own) + len(doc.tf) + len(doc.near)
        doc_terms = len(doc.analysed.tf) + len(doc.grams)
        done = None
        batch = self._batch
        full = self._size + doc_size > _BATCH_BYTES or self._terms + doc_terms > _BATCH_TERMS
        if batch and (len(batch) >= self._bound or full):
            done, self._batch, self._size, self._terms = batch, [], 0, 0
            self._bound = self._entries
        self._batch.append(doc)
        self._size += doc_size
        self._terms += doc_terms
        return done

    def rest(self) -> list[Doc]:
        """The run being filled, now done (empty when it has no doc)."""
        done, self._batch, self._size, self._terms = self._batch, [], 0, 0
        return done


def batches(
    docs: Iterable[Doc], entries: int = BATCH_ENTRIES, first: int | None = None
) -> Iterator[list[Doc]]:
    """The runs of ``Batcher``."""
    batcher = Batcher(entries, first)
    for doc in docs:
        if (done := batcher.add(doc)) is not None:
            yield done
    if last := batcher.rest():
        yield last
