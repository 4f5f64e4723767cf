"""Memory entries in Redis: batched atomic writes and deletes, reading back (the entries
as the scripts take them: ``_encoding``).

Both backends store the same entry hashes; the plain backend also keeps per-word
postings, which a write must update for the words the entry had before. Those keys
are only known after reading the entry, so writes are optimistic: the script is sent
assuming the stored words equal the new ones (true for re-ingested events), and when
they do not it writes nothing, the stored words are read, and the batch is re-sent
with them, compare-and-set style.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from redis.exceptions import NoPermissionError

from redis_agent_sessions._redis import prebuilt
from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import text
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
from redis_agent_sessions.errors import CorruptDataError, RedisSessionsError
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory._analysis import K1, B
from redis_agent_sessions.memory._encoding import (
    Batcher,
    Doc,
    ScriptKeys,
    owner_tag,
    stored_sig,
)
from redis_agent_sessions.memory._filters import entry_tokens

__all__ = ["CAPPED", "NONE", "PLAIN", "MemoryStore", "StoredEntry"]

_STALE_BATCH = 500
_INGEST_TTL = 3600
NONE, PLAIN, CAPPED = 0, 1, 2
"""The postings a store keeps (the write scripts' ``postings`` argument)."""
_ATTEMPTS = 8
_ENTRY_FIELDS = ("id", "author", "timestamp", "content", "meta", "expires")
_SIG_FIELDS = ("own", "tf", "dl", "au", "grams")
_FIRST_BATCH = 32
"""Entries of the first batch of a long write: Redis starts on it while the next is made."""
_TURN_EVERY = 8
"""Entries analysed between two turns of the event loop while a batch is made."""


_Made = tuple[list[Doc], MemoryPut]
"""A batch, and its script call."""


@dataclass(frozen=True, slots=True)
class _Write:
    """What every batch of one write shares."""

    app: str
    user: str
    mode: str
    session_id: str | None
    ingest: str | None
    embed: Callable[[list[Doc]], Awaitable[None]] | None


@dataclass(slots=True)
class StoredEntry:
    id: str
    author: str | None
    timestamp: str | None
    content: dict[str, Any]
    meta: dict[str, Any]
    expires: float | None = None
    """A learned fact's end of life (epoch seconds)."""


def doc_tokens(doc: Doc, indexed: Sequence[str]) -> list[str]:
    """The filter tokens a doc is written with (``_filters.entry_tokens``)."""
    f = doc.fields
    fact = f.get("kind") == "fact"
    author = f.get("author", "")
    return entry_tokens(
        kind="fact" if fact else "event",
        author=author[1:] if author else None,
        session=f.get("session", ""),
        topics=orjson.loads(f["topics"]) if fact and f.get("topics") else (),
        meta=orjson.loads(f["meta"]) if indexed and f.get("meta") else {},
        indexed=indexed,
    )


class MemoryStore:
    """Writes, deletes and reads entry hashes, and postings: ``postings`` is ``PLAIN`` (its
    terms', grams' and texts), ``CAPPED`` (the search backend's: each term's best only, what
    ``memory_rank.lua`` may read of them) or ``NONE``."""

    def __init__(
        self, client: Any, keys: KeySpace, *, postings: int, indexed: Sequence[str] = ()
    ) -> None:
        self._redis = client
        self.keys = keys
        self.postings = postings
        self.plain = postings == PLAIN
        self.indexed = tuple(indexed)
        """The ``custom_metadata`` fields entries are written with filter tokens of."""
        self._put_script = _scripts.register(client, MEMORY_PUT)
        self._delete = _scripts.register(client, MEMORY_DELETE)
        self._vectors = _scripts.register(client, MEMORY_VECTOR)

    def _postings(self, ks: ScriptKeys, app: str, user: str, doc: Doc) -> list[int]:
        """The postings a doc is added to, its own terms': key index, quarter weight, ...
        (flat: a pair each cost the write script's JSON decode a table per posting)."""
        if not self.postings:
            return []
        # Thousands of keys per batch: the user's part of the name is built once.
        base = self.keys.memory_term(app, user, "")
        tf = doc.analysed.tf
        return [x for t in doc.analysed.own for x in (ks.posting(base, t), tf[t])]

    def _gram_keys(self, app: str, user: str, grams: Sequence[str]) -> list[str]:
        if not self.plain:
            return []
        return [self.keys.memory_gram(app, user, g) for g in grams]

    def stored_postings(self, app: str, user: str, row: Sequence[Any]) -> list[str]:
        """The postings an entry read as (own, tf, dl, au, grams) is in."""
        own, tf, _, _, grams = row[:5]
        if not self.postings or tf is None:
            return []
        grams_ = self._gram_keys(app, user, text(grams or "").split())
        terms = [pair.rpartition(":")[0] for pair in text(own or "").split()]
        return [self.keys.memory_term(app, user, t) for t in terms] + grams_

    async def read(self, app: str, user: str, ids: Sequence[str], *fields: str) -> list[Any]:
        """HMGET of ``fields`` of each entry (None values when it does not exist)."""
        return await self._read(app, user, ids, *fields)

    async def _read(self, app: str, user: str, ids: Sequence[str], *fields: str) -> list[Any]:
        commands = [("HMGET", self.keys.memory_entry(app, user, i), *fields) for i in ids]
        # Packed by hiredis where script calls are (a search reads its results so).
        replies = await prebuilt.pipelined(self._redis, commands)
        if replies is not None:
            return replies
        pipe = self._redis.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return list(await pipe.execute())

    def entry_op(self, ks: ScriptKeys, app: str, user: str, doc: Doc) -> dict[str, Any]:
        """How the write scripts receive an entry (memory_put.lua's ops); ``v``, the ARGV
        index of its vector, is the caller's to set."""
        fields = [v for item in doc.fields.items() for v in item]
        if not self.plain:
            # What the search module indexes (the owners' tags, the terms) and the substring
            # check reads: the plain backend has postings and its texts hash instead.
            fields += ["app", owner_tag(app), "user", owner_tag(user), "lower", doc.lower]
            fields += ["terms", doc.analysed.indexed_terms()]
        tokens = doc_tokens(doc, self.indexed)
        fields += ["fx", ",".join(tokens)]
        op: dict[str, Any] = {
            "id": doc.id,
            "k": ks.ref(self.keys.memory_entry(app, user, doc.id)),
            "ts": repr(doc.ts),
            "f": fields,
            "own": doc.own,
            "tf": doc.tf,
            "au": doc.au,
            "gr": doc.gram_field,
            "nb": doc.near,
            "c": [*doc.analysed.tf, *doc.analysed.authors],
            "dl": doc.analysed.length,
            "p": self._postings(ks, app, user, doc),
            "g": [ks.ref(k) for k in self._gram_keys(app, user, doc.grams)],
            "o": [],
            "t": doc.text,
            "fx": " ".join(tokens),
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
        write = _Write(app, user, mode, session_id, ingest, embed)
        return await self._put(write, docs, self._call(write, docs, final, None))

    async def put_all(
        self,
        app: str,
        user: str,
        docs: Iterable[Doc],
        *,
        entries: int,
        many: bool = False,
        mode: str,
        session_id: str | None,
        ingest: str | None = None,
        embed: Callable[[list[Doc]], Awaitable[None]] | None = None,
    ) -> list[str]:
        """``put`` of ``docs`` in batches of at most ``entries`` (with ``ingest``, at
        least one, the last ``final``): the stale ids of the last. While Redis runs one
        batch, the next is made here (``docs`` may analyse entries as they are asked for)
        and encoded, so the client's work and the script's overlap instead of adding up;
        with ``many`` (more than one batch), the first batch is small, so that Redis starts
        soon."""
        write = _Write(app, user, mode, session_id, ingest, embed)
        batcher = Batcher(entries, first=_FIRST_BATCH if many else None)
        pending = iter(docs)

        async def made() -> _Made | None:
            # The event loop gets a turn every few entries: the call before is sent in
            # those turns (one over 64 KiB takes several, and Redis starts on it only once
            # it has all of it), and the worker's other tasks are not held up.
            for n in itertools.count():
                if n % _TURN_EVERY == 0:
                    await asyncio.sleep(0)
                doc = next(pending, None)
                if doc is None:
                    break
                if (batch := batcher.add(doc)) is not None:
                    return batch, self._call(write, batch, False, None)
            # An ingestion sends at least one batch, the last one told it is.
            last = batcher.rest()
            if not last and ingest is None:
                return None
            return last, self._call(write, last, ingest is not None, None)

        current = await made()
        stale: list[str] = []
        while current is not None:
            batch, call = current
            running = asyncio.ensure_future(self._put(write, batch, call))
            try:
                after = None if call.final else await made()
            except BaseException:
                await asyncio.gather(running, return_exceptions=True)
                raise
            stale = await running
            current = after
        return stale

    def _call(
        self, write: _Write, docs: Sequence[Doc], final: bool, stored: list[Any] | None
    ) -> MemoryPut:
        """One ``memory_put.lua`` call (``stored``: the entries' sig fields as read after a
        refusal)."""
        app, user = write.app, write.user
        entries = self.keys.memory_entries(app, user)
        ks = ScriptKeys(first_referenced(MEMORY_PUT))
        ops = []
        vectors: list[bytes] = []
        counts: Counter[str] = Counter()
        for i, doc in enumerate(docs):
            op = self.entry_op(ks, app, user, doc)
            counts.update(op.pop("c"))
            if doc.vkey is not None and doc.vec is not None:
                op["v"] = first_vector(MEMORY_PUT) + len(vectors)
                vectors.append(doc.vec)
            if stored is not None and (sig := stored_sig(stored[i])) is not None:
                op["x"] = sig
                op["o"] = [ks.ref(k) for k in self.stored_postings(app, user, stored[i])]
            ops.append(op)
        sid = write.session_id
        return MemoryPut(
            entries=entries,
            deleted=self.keys.memory_deleted(app, user),
            session=entries if sid is None else self.keys.memory_session(app, user, sid),
            ingestion=write.ingest or entries,
            texts=self.keys.memory_texts(app, user),
            stats=self.keys.memory_stats(app, user),
            df=self.keys.memory_df(app, user),
            context=self.keys.memory_context(app, user),
            referenced=ks.keys,
            mode=write.mode,
            postings=int(self.postings),
            record_session=int(write.session_id is not None),
            ingestion_ttl=_INGEST_TTL if write.ingest else 0,
            final=int(final),
            stale_limit=_STALE_BATCH,
            entries_json=orjson.dumps(ops),
            counts_json=orjson.dumps([x for item in counts.items() for x in item]),
            k1=K1,
            b=B,
            vectors=vectors,
        )

    async def _put(self, write: _Write, docs: Sequence[Doc], call: MemoryPut) -> list[str]:
        """Send ``call`` (of ``docs``); when it wrote nothing, send them again as the
        script asked (with their vectors, or after reading what is stored)."""
        final = call.final == 1
        for _ in range(_ATTEMPTS):
            put = await _scripts.run(self._put_script, call)
            if put.status == 1:
                return [text(x) for x in put.stale]
            stored = None
            if put.status == 2 and write.embed is not None:
                missing = {text(x) for x in put.missing}
                await write.embed([doc for doc in docs if doc.id in missing])
            else:
                stored = await self._read(write.app, write.user, [d.id for d in docs], *_SIG_FIELDS)
            call = self._call(write, docs, final, stored)
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
            ks = ScriptKeys(first_referenced(MEMORY_DELETE))
            ops = []
            for memory_id, row in zip(ids, rows, strict=True):
                session = row[5]
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
