"""Memory entries in Redis: encoding, batched atomic writes and deletes, reading back.

Both backends store the same entry hashes; the plain backend also keeps per-word
postings, which a write must update for the words the entry had before. Those keys
are only known after reading the entry, so writes are optimistic: the script is sent
assuming the stored words equal the new ones (true for re-ingested events), and when
they do not it writes nothing, the stored words are read, and the batch is re-sent
with them, compare-and-set style.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from redis.exceptions import NoPermissionError

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import _check_json, text
from redis_agent_sessions._redis.memory_calls import (
    MEMORY_DELETE,
    MEMORY_PUT,
    MEMORY_VECTOR,
    MemoryDelete,
    MemoryPut,
    MemoryVector,
    first_referenced,
    first_vector,
)
from redis_agent_sessions.errors import CorruptDataError, InvalidInputError, RedisSessionsError
from redis_agent_sessions.keys import KeySpace, escape
from redis_agent_sessions.memory._analysis import ANALYSIS, K1, Analysed, B
from redis_agent_sessions.memory._text import entry_grams, lowered_text, searchable_words

__all__ = ["Doc", "MemoryStore", "StoredEntry", "make_doc", "owner_tag"]

UNKNOWN_SESSION_ID = "__unknown_session_id__"
"""Where ADK files events added without a session id."""
BATCH_ENTRIES = 200
VECTOR_BATCH_ENTRIES = 32
"""With vectors on the search backend: the module indexes each vector as it is written, inside
the script (~0.65 ms per 384-dimensional entry into HNSW on RediSearch 2.10,
benchmarks/semantic.py), so a batch of 32 holds Redis ~20 ms, not 130."""
_BATCH_BYTES = 1 << 20
_STALE_BATCH = 500
_INGEST_TTL = 3600
_ATTEMPTS = 8
_ENTRY_FIELDS = ("id", "author", "timestamp", "content", "meta", "expires")
_SIG_FIELDS = ("own", "tf", "dl", "au", "grams", "words")


@functools.lru_cache(maxsize=65536)
def _escaped(term: str) -> str:
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
    analysed: Analysed
    grams: list[str]
    text: str
    """Lowercased text when a substring search may need it (non-ASCII words), else ''."""
    raw: str = ""
    """The text as given: what an embedder embeds."""
    context: str = ""
    """The entry's field of the context hash (``keys.memory_context``)."""
    vkey: str | None = None
    """With an embedder: what the vector is made from (model, dimension, text)."""
    vec: bytes | None = None
    """The vector to store; None with a ``vkey`` keeps the one stored under that key."""
    keep_vector: bool = False
    """Without a ``vkey``: keep the stored vector as it is (reindexing)."""

    @property
    def sig(self) -> str:
        f = self.fields
        return f"{f['own']}|{f['tf']}|{f['dl']}|{f['au']}|{f['grams']}"


@dataclass(slots=True)
class StoredEntry:
    id: str
    author: str | None
    timestamp: str | None
    content: dict[str, Any]
    meta: dict[str, Any]
    expires: float | None = None
    """A learned fact's end of life (epoch seconds)."""


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
) -> Doc | None:
    """The encoded entry, or None when it has no term to be found by."""
    if not analysed.tf:
        return None
    _check_json(meta, "in custom_metadata")
    _check_json(author, "of the author")  # a lone surrogate cannot be sent
    grams = set() if text_.isascii() else entry_grams(searchable_words(text_))
    lower = lowered_text(text_)
    fields = {
        "id": memory_id,
        "app_name": app_name,
        "user_id": user_id,
        "app": owner_tag(app_name),
        "user": owner_tag(user_id),
        "session": session_id,
        "author": "" if author is None else "=" + author,
        "ts": repr(ts),
        "timestamp": "" if iso is None else "=" + iso,
        "content": content_json.decode(),
        "meta": orjson.dumps(meta).decode(),
        "lower": lower,
        "own": analysed.encoded_own(),
        "tf": analysed.encoded_tf(),
        "dl": str(analysed.length),
        "terms": analysed.indexed_terms(),
        "au": " ".join(analysed.authors),
        "grams": " " + " ".join(sorted(grams)) + " ",
        "an": str(ANALYSIS),
    }
    near = orjson.dumps(list(neighbours)).decode()
    context = "\t".join((repr(ts), fields["dl"], fields["au"], near, fields["tf"]))
    return Doc(
        memory_id, ts, fields, analysed, sorted(grams), lower if grams else "", text_, context
    )


def stored_sig(row: Sequence[Any]) -> str | None:
    """What an entry read as (own, tf, dl, au, grams, words) is found by, as the scripts
    spell it; None when it does not exist."""
    own, tf, dl, au, grams, words = row[:6]
    if tf is not None:
        return f"{text(own or '')}|{text(tf)}|{text(dl)}|{text(au or '')}|{text(grams or '')}"
    if words is not None:
        return f"v1|{text(words)}|{text(grams or '')}"
    return None


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
class _Keys:
    """The keys a script call names by their position in KEYS (its ``referenced``), from
    ``first`` on (:func:`first_referenced`)."""

    first: int
    keys: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    def ref(self, key: str) -> int:
        if key not in self.index:
            self.index[key] = self.first + len(self.keys)
            self.keys.append(key)
        return self.index[key]


def batches(docs: Sequence[Doc], entries: int = BATCH_ENTRIES) -> Iterator[list[Doc]]:
    """Runs of docs bounded in count and bytes, so one script never blocks Redis long."""
    batch: list[Doc] = []
    size = 0
    for doc in docs:
        doc_size = sum(len(v) for v in doc.fields.values()) + len(doc.vec or b"")
        if batch and (len(batch) >= entries or size + doc_size > _BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(doc)
        size += doc_size
    if batch:
        yield batch


class MemoryStore:
    """Writes, deletes and reads entry hashes (and postings when ``postings``)."""

    def __init__(self, client: Any, keys: KeySpace, *, postings: bool) -> None:
        self._redis = client
        self.keys = keys
        self.postings = postings
        self._put = _scripts.register(client, MEMORY_PUT)
        self._delete = _scripts.register(client, MEMORY_DELETE)
        self._vectors = _scripts.register(client, MEMORY_VECTOR)

    def _postings(self, ks: _Keys, app: str, user: str, doc: Doc) -> list[list[int]]:
        """The postings a doc is added to, its own terms': [key index, quarter weight]."""
        if not self.postings:
            return []
        # Thousands of keys per batch: the user's part of the name is built once.
        base = self.keys.memory_term(app, user, "")
        tf = doc.analysed.tf
        return [[ks.ref(base + _escaped(t)), tf[t]] for t in sorted(doc.analysed.own)]

    def _gram_keys(self, app: str, user: str, grams: Sequence[str]) -> list[str]:
        if not self.postings:
            return []
        return [self.keys.memory_gram(app, user, g) for g in grams]

    def stored_postings(self, app: str, user: str, row: Sequence[Any]) -> list[str]:
        """The postings an entry read as (own, tf, dl, au, grams, words) is in."""
        own, tf, _, _, grams, words = row[:6]
        if not self.postings or (tf is None and words is None):
            return []
        grams_ = self._gram_keys(app, user, text(grams or "").split())
        if tf is None:  # indexed by 0.1: one word posting per ASCII word
            ascii_words = [w for w in text(words).split() if w.isascii()]
            return [self.keys.memory_word(app, user, w) for w in ascii_words] + grams_
        terms = [pair.rpartition(":")[0] for pair in text(own or "").split()]
        return [self.keys.memory_term(app, user, t) for t in terms] + grams_

    async def read(self, app: str, user: str, ids: Sequence[str], *fields: str) -> list[Any]:
        """HMGET of ``fields`` of each entry (None values when it does not exist)."""
        return await self._read(app, user, ids, *fields)

    async def _read(self, app: str, user: str, ids: Sequence[str], *fields: str) -> list[Any]:
        pipe = self._redis.pipeline(transaction=False)
        for memory_id in ids:
            pipe.hmget(self.keys.memory_entry(app, user, memory_id), *fields)
        return list(await pipe.execute())

    def entry_op(self, ks: _Keys, app: str, user: str, doc: Doc) -> dict[str, Any]:
        """How the write scripts receive an entry (memory_put.lua's ops); ``v``, the ARGV
        index of its vector, is the caller's to set."""
        op: dict[str, Any] = {
            "id": doc.id,
            "k": ks.ref(self.keys.memory_entry(app, user, doc.id)),
            "ts": repr(doc.ts),
            "f": [v for item in doc.fields.items() for v in item],
            "sig": doc.sig,
            "c": [*sorted(doc.analysed.tf), *doc.analysed.authors],
            "dl": doc.analysed.length,
            "p": self._postings(ks, app, user, doc),
            "cx": doc.context,
            "g": [ks.ref(k) for k in self._gram_keys(app, user, doc.grams)],
            "o": [],
            "t": doc.text,
        }
        if doc.keep_vector and doc.vkey is None:
            op["kv"] = 1
        if doc.vkey is not None:
            op["vk"] = doc.vkey
            op["v"] = 0
        return op

    async def put(
        self,
        app: str,
        user: str,
        docs: Sequence[Doc],
        *,
        mode: str,
        session_id: str | None,
        ingest: str | None = None,
        final: bool = False,
        embed: Callable[[list[Doc]], Awaitable[None]] | None = None,
    ) -> list[str]:
        """Write one batch; on ``final``, the session's ids this ingestion did not see.

        A doc with a ``vkey`` but no ``vec`` keeps the vector stored under that key; when
        it is gone, ``embed`` is asked for it and the batch sent again."""
        entries = self.keys.memory_entries(app, user)
        session_key = (
            entries if session_id is None else self.keys.memory_session(app, user, session_id)
        )
        stored: list[Any] | None = None
        for _ in range(_ATTEMPTS):
            ks = _Keys(first_referenced(MEMORY_PUT))
            ops = []
            vectors: list[bytes] = []
            for i, doc in enumerate(docs):
                op = self.entry_op(ks, app, user, doc)
                if doc.vkey is not None and doc.vec is not None:
                    op["v"] = first_vector(MEMORY_PUT) + len(vectors)
                    vectors.append(doc.vec)
                if stored is not None and (sig := stored_sig(stored[i])) is not None:
                    op["x"] = sig
                    op["o"] = [ks.ref(k) for k in self.stored_postings(app, user, stored[i])]
                ops.append(op)
            call = MemoryPut(
                entries=entries,
                deleted=self.keys.memory_deleted(app, user),
                session=session_key,
                ingestion=ingest or entries,
                texts=self.keys.memory_texts(app, user),
                stats=self.keys.memory_stats(app, user),
                df=self.keys.memory_df(app, user),
                context=self.keys.memory_context(app, user),
                referenced=ks.keys,
                mode=mode,
                postings=int(self.postings),
                record_session=int(session_id is not None),
                ingestion_ttl=_INGEST_TTL if ingest else 0,
                final=int(final),
                stale_limit=_STALE_BATCH,
                entries_json=orjson.dumps(ops),
                k1=K1,
                b=B,
                vectors=vectors,
            )
            put = await _scripts.run(self._put, call)
            if put.status == 1:
                return [text(x) for x in put.stale]
            if put.status == 2 and embed is not None:
                missing = {text(x) for x in put.missing}
                await embed([doc for doc in docs if doc.id in missing])
                continue
            stored = await self._read(app, user, [d.id for d in docs], *_SIG_FIELDS)
        raise RedisSessionsError("memory entries kept changing during the write; gave up")

    async def stored_vectors(
        self, app: str, user: str, ids: Sequence[str]
    ) -> list[tuple[bytes | None, str, int]]:
        """(content JSON or None when gone, vkey or '', vector bytes) of each id."""
        pipe = self._redis.pipeline(transaction=False)
        for memory_id in ids:
            key = self.keys.memory_entry(app, user, memory_id)
            pipe.hmget(key, "content", "vkey")
            pipe.hstrlen(key, "vec")
        replies = await pipe.execute() if ids else []
        return [
            (row[0], text(row[1] or ""), int(size))
            for row, size in zip(replies[::2], replies[1::2], strict=True)
        ]

    async def set_vectors(
        self, app: str, user: str, model: str, rows: Sequence[tuple[str, bytes, str, bytes]]
    ) -> tuple[int, int]:
        """Store (id, content embedded, vkey, vector) where the content is unchanged:
        (stored, skipped)."""
        call = MemoryVector(
            entries=[self.keys.memory_entry(app, user, memory_id) for memory_id, *_ in rows],
            model=model,
            rows=[x for _, content, vkey, vector in rows for x in (content, vkey, vector)],
        )
        done = await _scripts.run(self._vectors, call)
        return done.stored, done.skipped

    async def vector_keys(self, app: str, user: str, ids: Sequence[str]) -> list[Any]:
        """(id, vkey) stored for each id: None id when the entry does not exist."""
        return await self._read(app, user, ids, "id", "vkey")

    async def delete(
        self,
        app: str,
        user: str,
        ids: Sequence[str],
        *,
        tombstone: bool,
        only_session: str | None = None,
        ingest: str | None = None,
    ) -> int:
        """Delete entries by id; with ``only_session``, only those still of that session."""
        entries = self.keys.memory_entries(app, user)
        for _ in range(_ATTEMPTS):
            rows = await self._read(app, user, ids, *_SIG_FIELDS, "session")
            ks = _Keys(first_referenced(MEMORY_DELETE))
            ops = []
            for memory_id, row in zip(ids, rows, strict=True):
                session = row[6]
                owner = only_session if only_session is not None else text(session or "")
                op: dict[str, Any] = {
                    "id": memory_id,
                    "k": ks.ref(self.keys.memory_entry(app, user, memory_id)),
                    "s": ks.ref(self.keys.memory_session(app, user, owner)) if owner else 0,
                    "o": [ks.ref(k) for k in self.stored_postings(app, user, row)],
                }
                if (sig := stored_sig(row)) is not None:
                    op["x"] = sig
                if only_session is not None:
                    op["only"] = only_session
                ops.append(op)
            call = MemoryDelete(
                entries=entries,
                deleted=self.keys.memory_deleted(app, user),
                texts=self.keys.memory_texts(app, user),
                ingestion=ingest or entries,
                stats=self.keys.memory_stats(app, user),
                df=self.keys.memory_df(app, user),
                context=self.keys.memory_context(app, user),
                referenced=ks.keys,
                tombstone=int(tombstone),
                postings=int(self.postings),
                spare_ingesting=int(ingest is not None),
                entries_json=orjson.dumps(ops),
            )
            deleted = await _scripts.run(self._delete, call)
            if deleted.done:
                return deleted.removed
        raise RedisSessionsError("memory entries kept changing during the delete; gave up")

    async def delete_all(self, app: str, user: str) -> None:
        entries = self.keys.memory_entries(app, user)
        while ids := [text(m) for m in await self._ids(entries)]:
            await self.delete(app, user, ids, tombstone=True)

    async def _ids(self, entries: str) -> list[Any]:
        try:
            found: list[Any] = await self._redis.zrange(entries, 0, _STALE_BATCH - 1)
        except NoPermissionError as exc:
            raise _scripts.permission_error(exc, entries, "zrange") from exc
        return found

    async def fetch(self, app: str, user: str, ids: Sequence[str]) -> list[StoredEntry]:
        """The entries still stored, in the order of ``ids``."""
        out = []
        for memory_id, row in zip(
            ids, await self._read(app, user, ids, *_ENTRY_FIELDS), strict=True
        ):
            if row[0] is None:
                continue
            key = self.keys.memory_entry(app, user, memory_id)
            author, stamp = text(row[1] or ""), text(row[2] or "")
            try:
                content, meta = orjson.loads(row[3]), orjson.loads(row[4])
            except (TypeError, orjson.JSONDecodeError) as exc:
                raise CorruptDataError(key, f"entry content is not JSON: {exc}") from exc
            out.append(
                StoredEntry(
                    memory_id,
                    author[1:] if author else None,
                    stamp[1:] if stamp else None,
                    content,
                    meta,
                    int(row[5]) / 1000 if row[5] else None,
                )
            )
        return out
