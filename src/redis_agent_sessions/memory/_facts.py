"""Learned facts in Redis: read back, and changed in one atomic step per (app, user).

A fact is a memory entry (``fact-<hex>``, found by the same ranking as any entry) with a few
fields of its own: its revision, topics, sources and expiry. Its record (the user's fact
records hash) holds what a generator is shown of it and what its entry is found by, so a
consolidation step reads the facts it shows in the script that chooses them
(``memory_related.lua``) and changes them without reading them again. ``memory_facts.lua``
applies a generation's operations all or nothing, each checked against the revision the
generator saw, keeps what a fact said before (a bounded history) and moves the session's
watermark in the same step, so two workers never lose an update or apply one twice.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from pydantic import ValidationError

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import _check_json, text
from redis_agent_sessions._redis.memory_calls import (
    MEMORY_FACTS,
    MEMORY_RANK,
    MEMORY_RELATED,
    MemoryFacts,
    MemoryRank,
    MemoryRelated,
    first_referenced,
    first_vector,
)
from redis_agent_sessions.errors import (
    ConsolidationConflictError,
    CorruptDataError,
    GenerationError,
)
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory._analysis import K1, B, analyse, text_terms
from redis_agent_sessions.memory._docs import content_json
from redis_agent_sessions.memory._encoding import Doc, ScriptKeys, iso_timestamp, make_doc
from redis_agent_sessions.memory._generators import Fact, FactRevision, FactSource
from redis_agent_sessions.memory._request_options import MetadataValue
from redis_agent_sessions.memory._store import MemoryStore
from redis_agent_sessions.memory._vectors import RETRIEVAL_KEY
from redis_agent_sessions.models import Content, Part

__all__ = ["Change", "FactStore", "Outcome", "Related", "Stored", "new_fact_id", "revisions"]

FACT_PREFIX = "fact-"
ATTEMPTS = 5
_BACKOFF, _BACKOFF_CAP = 0.05, 1.0
"""Seconds: the first pause after a conflict at most, and the longest."""
DUE = 50
"""Facts past their time to live forgotten by one change at most."""

Outcome = Literal["applied", "fact changed", "watermark moved"]


async def backoff(attempt: int) -> None:
    """A random pause after the ``attempt``-th conflict (0 first), growing: workers that
    keep meeting on one user's facts stop starting their generations together."""
    await asyncio.sleep(random.uniform(0, min(_BACKOFF_CAP, _BACKOFF * 2**attempt)))


def new_fact_id() -> str:
    return FACT_PREFIX + uuid.uuid4().hex


@dataclass(frozen=True, slots=True)
class Stored:
    """A fact as its record holds it: what a generator is shown, and what its entry is
    found by (``own|tf|dl|au|grams``, compared by the script that changes it)."""

    fact: Fact
    sig: str


@dataclass(frozen=True, slots=True)
class Related:
    """What a consolidation step reads (``memory_related.lua``): the facts past their time
    to live, and those shown to the generator."""

    due: list[Stored]
    shown: list[Stored]


@dataclass
class Change:
    """One operation, ready for the script."""

    action: Literal["add", "update", "delete", "expire"]
    fact_id: str
    seen: int
    """The revision the generator saw (0 for an add)."""
    doc: Doc | None = None
    """add and update: the entry as it will be stored."""
    expires_ms: int = 0
    was: Fact | None = None
    """update: the fact as it was, for its history."""
    sig: str = ""
    """update, delete and expire: what its entry was found by when the generator saw it."""
    record: bytes = b""
    """add and update: the fact's record as it will be stored."""

    @classmethod
    def of(cls, action: Literal["update", "delete", "expire"], stored: Stored) -> Change:
        return cls(action, stored.fact.id, stored.fact.revision, sig=stored.sig)


def revisions(key: str, raws: Sequence[Any], now: float) -> list[FactRevision]:
    """A history list's revisions, but those past their time: a change of the fact removes
    them (memory_facts.lua), and the list expires with its last one, so until then they
    are only skipped."""
    out = []
    for raw in raws:
        try:
            revision = FactRevision.model_validate_json(raw)
        except ValidationError as exc:
            raise CorruptDataError(key, f"not a fact revision: {exc}") from exc
        if revision.expires is None or revision.expires > now:
            out.append(revision)
    return out


class FactStore:
    """Reads facts, and applies changes with ``memory_facts.lua``."""

    def __init__(self, client: Any, keys: KeySpace, store: MemoryStore, history: int) -> None:
        self._redis = client
        self.keys = keys
        self._store = store
        self.history_size = history
        self._script = _scripts.register(client, MEMORY_FACTS)
        self._related = _scripts.register(client, MEMORY_RELATED)

    # -- reads ----------------------------------------------------------------------------

    async def read(self, app: str, user: str, ids: Sequence[str]) -> list[Fact | None]:
        """The stored facts of ``ids`` (None where there is none)."""
        return [None if s is None else s.fact for s in await self.stored(app, user, ids)]

    async def stored(self, app: str, user: str, ids: Sequence[str]) -> list[Stored | None]:
        """The records of ``ids`` (None where there is none)."""
        if not ids:
            return []
        raw = await self._redis.hmget(self.keys.memory_fact_records(app, user), list(ids))
        return [self._parse(app, user, memory_id, r) for memory_id, r in zip(ids, raw, strict=True)]

    def _parse(self, app: str, user: str, memory_id: str, raw: Any) -> Stored | None:
        if raw is None:
            return None
        try:
            record = orjson.loads(raw)
            sig = record.pop("sig")
            if not isinstance(sig, str) or record.get("id") != memory_id:
                raise ValueError(f"not the record of {memory_id!r}")
            return Stored(Fact.model_validate(record), sig)
        except (TypeError, ValueError, AttributeError, KeyError, ValidationError) as exc:
            key = self.keys.memory_fact_records(app, user)
            raise CorruptDataError(key, f"not a stored fact: {exc}") from exc

    async def related(
        self,
        app: str,
        user: str,
        *,
        now: float,
        most: int,
        ranked: Sequence[str] | None,
        ranking: MemoryRank | None,
    ) -> Related | None:
        """The facts past their time to live and the ``most`` most related, in one script
        call: all when they are few; else the facts among the ``ranked`` ids (the search
        module's ranking) or those ``ranking`` (the plain backend's ``memory_rank.lua`` call,
        its postings numbered as this script's, from ``first_referenced(MEMORY_RELATED)``)
        finds, in order; the newest when none is. None when there are more than ``most``
        and neither is given (rank, then ask again)."""
        k = self.keys
        postings: Sequence[str] = []
        choice: list[Any] = []
        if ranking is not None:
            how, postings = "rank", ranking.postings
            choice = MEMORY_RANK.split(ranking)[1]
        elif ranked is not None:
            how, choice = "ids", [len(ranked), *ranked]
        else:
            how = "ask"
        call = MemoryRelated(
            stats=k.memory_stats(app, user),
            texts=k.memory_texts(app, user),
            df=k.memory_df(app, user),
            context=k.memory_context(app, user),
            facts=k.memory_facts(app, user),
            expiry=k.memory_fact_expiry(app, user),
            records=k.memory_fact_records(app, user),
            postings=postings,
            most=most,
            now_ms=int(now * 1000),
            most_due=DUE,
            how=how,
            choice=choice,
        )
        found = await _scripts.run(self._related, call)
        if found is None:
            return None

        def parsed(pairs: list[tuple[Any, Any]]) -> list[Stored]:
            facts = [self._parse(app, user, text(memory_id), raw) for memory_id, raw in pairs]
            return [f for f in facts if f is not None]

        return Related(parsed(found.due), parsed(found.shown))

    async def ids(self, app: str, user: str, limit: int = -1) -> list[str]:
        """The user's fact ids, most recently changed first."""
        stop = -1 if limit < 0 else limit - 1
        return [
            text(m) for m in await self._redis.zrevrange(self.keys.memory_facts(app, user), 0, stop)
        ]

    async def which(self, app: str, user: str, ids: Sequence[str]) -> list[str]:
        """Those of ``ids`` that are facts."""
        if not ids:
            return []
        key = self.keys.memory_facts(app, user)
        pipe = self._redis.pipeline(transaction=False)
        for memory_id in ids:  # ZSCORE each: the least-privilege line has no ZMSCORE
            pipe.zscore(key, memory_id)
        scores = await pipe.execute()
        return [memory_id for memory_id, s in zip(ids, scores, strict=True) if s is not None]

    async def due(self, app: str, user: str, now: float, limit: int = DUE) -> list[Stored]:
        """Facts whose time to live is over (forgotten at the next change or search)."""
        ids = [
            text(m)
            # ZRANGE BYSCORE: the least-privilege line grants ZRANGE, not ZRANGEBYSCORE.
            for m in await self._redis.zrange(
                self.keys.memory_fact_expiry(app, user),
                "-inf",
                int(now * 1000),
                byscore=True,
                offset=0,
                num=limit,
            )
        ]
        return [f for f in await self.stored(app, user, ids) if f is not None]

    async def unread(self, app: str, user: str, session_id: str, ids: Sequence[str]) -> set[str]:
        """Those of the events ``ids`` (given one by one) not read in the session yet."""
        key = self.keys.memory_read_events(app, user, session_id)
        pipe = self._redis.pipeline(transaction=False)
        for event_id in ids:  # SISMEMBER each: the least-privilege line has no SMISMEMBER
            pipe.sismember(key, event_id)
        found = await pipe.execute() if ids else []
        return {event_id for event_id, seen in zip(ids, found, strict=True) if not seen}

    async def watermark(self, app: str, user: str, session_id: str) -> str:
        raw = await self._redis.get(self.keys.memory_watermark(app, user, session_id))
        return "" if raw is None else text(raw)

    async def history(self, app: str, user: str, fact_id: str) -> list[FactRevision]:
        """What the fact said before, newest first (none past its ``expires``)."""
        key = self.keys.memory_fact_history(app, user, fact_id)
        return revisions(key, await self._redis.lrange(key, 0, -1), time.time())

    # -- writes ---------------------------------------------------------------------------

    def entry(
        self,
        app: str,
        user: str,
        *,
        fact_id: str,
        text_: str,
        topics: Sequence[str],
        revision: int,
        created: float,
        now: float,
        expires_ms: int,
        sources: Sequence[FactSource],
        metadata: Mapping[str, MetadataValue] | None = None,
        revision_labels: Mapping[str, str] | None = None,
        revision_expires: float | None = None,
    ) -> tuple[Doc, bytes]:
        """The entry a fact is stored as (found like any entry, and saying what it is), and
        its record."""
        source_list = [s.model_dump() for s in sources]
        expires = expires_ms / 1000 if expires_ms else None
        about = {
            "revision": revision,
            "topics": list(topics),
            "sources": source_list,
            "expires": expires,
        }
        # Its metadata beside what the library says of it, as ADK's Memory Bank service
        # returns a memory's metadata in custom_metadata.
        meta = {**(metadata or {}), RETRIEVAL_KEY: {"fact": about}}
        _check_json(meta, "in custom_metadata")  # the generator's topics: JSON must hold them
        doc = make_doc(
            app_name=app,
            user_id=user,
            memory_id=fact_id,
            session_id="",
            author=None,
            ts=now,
            iso=iso_timestamp(now),
            text_=text_,
            content_json=content_json(Content(role="user", parts=[Part(text=text_)])),
            meta=meta,
            analysed=analyse(text_terms(text_), (), None),
        )
        if doc is None:
            raise GenerationError(f"the fact {text_[:80]!r} has no word it could be found by")
        doc.fields.update(
            kind="fact",
            rev=str(revision),
            topics=orjson.dumps(list(topics)).decode(),
            sources=orjson.dumps(source_list).decode(),
            expires=str(expires_ms) if expires_ms else "",
            created=repr(created),
        )
        fact = Fact(
            id=fact_id, text=text_, topics=list(topics), revision=revision, created=created,
            updated=now, expires=expires, sources=list(sources), metadata=dict(metadata or {}),
            revision_labels=dict(revision_labels or {}), revision_expires=revision_expires,
        )  # fmt: skip
        return doc, orjson.dumps({"sig": doc.sig, **fact.model_dump(mode="json")})

    async def apply(
        self,
        app: str,
        user: str,
        changes: Sequence[Change],
        *,
        session_id: str | None,
        seen_mark: str,
        new_mark: str,
        now: float,
        read: Sequence[str] = (),
    ) -> Outcome:
        """Apply ``changes`` and set the session's watermark from ``seen_mark`` to
        ``new_mark`` (no session, or ``seen_mark`` ``*``: not checked; ``new_mark`` '': left
        as it is), and mark the events ``read`` (given one by one, not as a session) read
        in the session, unless one already is; all or nothing."""
        k = self.keys
        sid = session_id if session_id is not None else ""
        ks = ScriptKeys(first_referenced(MEMORY_FACTS))
        ops: list[dict[str, Any]] = []
        vectors: list[bytes] = []
        for change in changes:
            op: dict[str, Any] = {
                "id": change.fact_id,
                "a": change.action,
                "k": ks.ref(k.memory_entry(app, user, change.fact_id)),
                "h": ks.ref(k.memory_fact_history(app, user, change.fact_id)),
                "rev": "" if change.action == "add" else str(change.seen),
                "o": [],
            }
            if change.doc is not None:
                op.update(self._store.entry_op(ks, app, user, change.doc))
                op["exp"] = change.expires_ms
                op["rec"] = change.record.decode()
                if change.doc.vkey is not None and change.doc.vec is not None:
                    op["v"] = first_vector(MEMORY_FACTS) + len(vectors)
                    vectors.append(change.doc.vec)
            if change.action != "add":
                # The script compares it with the entry as stored: read once, with the record.
                op["x"] = change.sig
                postings = self._store.stored_postings(app, user, change.sig.split("|"))
                op["o"] = [ks.ref(key) for key in postings]
            if change.was is not None:
                old = change.was
                was = FactRevision(
                    revision=old.revision, text=old.text, topics=old.topics, updated=old.updated,
                    sources=old.sources, labels=old.revision_labels, expires=old.revision_expires,
                )  # fmt: skip
                op["was"] = was.model_dump_json()
                # The script keeps it (and the history) by this time, without parsing it.
                op["hx"] = 0 if old.revision_expires is None else int(old.revision_expires * 1000)
            ops.append(op)
        call = MemoryFacts(
            entries=k.memory_entries(app, user),
            texts=k.memory_texts(app, user),
            stats=k.memory_stats(app, user),
            df=k.memory_df(app, user),
            context=k.memory_context(app, user),
            facts=k.memory_facts(app, user),
            expiry=k.memory_fact_expiry(app, user),
            watermark=k.memory_watermark(app, user, sid),
            read_events=k.memory_read_events(app, user, sid),
            records=k.memory_fact_records(app, user),
            referenced=ks.keys,
            postings=int(self._store.postings),
            k1=K1,
            b=B,
            seen_mark="*" if session_id is None else seen_mark,
            new_mark=new_mark,
            history_size=self.history_size,
            now_ms=int(now * 1000),
            operations=orjson.dumps(ops),
            read=orjson.dumps(list(read)),
            vectors=vectors,
        )
        applied = await _scripts.run(self._script, call)
        if applied.status == 1:
            return "applied"
        return "watermark moved" if applied.status == 3 else "fact changed"

    async def delete(self, app: str, user: str, fact_id: str) -> bool:
        """Forget one fact and its history (``delete_memory``); False when it is gone."""
        for attempt in range(ATTEMPTS):
            [stored] = await self.stored(app, user, [fact_id])
            if stored is None:
                return False
            change = Change.of("delete", stored)
            outcome = await self.apply(
                app, user, [change], session_id=None, seen_mark="", new_mark="", now=time.time()
            )
            if outcome == "applied":
                return True
            await backoff(attempt)
        raise ConsolidationConflictError(f"fact {fact_id!r} kept changing; it was not deleted")

    async def expire(self, app: str, user: str, now: float) -> None:
        """Forget the facts whose time to live is over (another worker may be at it too)."""
        for _ in range(ATTEMPTS):
            due = await self.due(app, user, now)
            if not due:
                return
            changes = [Change.of("expire", f) for f in due]
            await self.apply(
                app, user, changes, session_id=None, seen_mark="", new_mark="", now=now
            )

    async def forget_all(self, app: str, user: str) -> None:
        """After every entry of the user is deleted: the facts' own keys."""
        ids = await self.ids(app, user)
        keys = [self.keys.memory_fact_history(app, user, i) for i in ids]
        keys += [
            self.keys.memory_facts(app, user),
            self.keys.memory_fact_expiry(app, user),
            self.keys.memory_fact_records(app, user),
        ]
        for at in range(0, len(keys), 500):
            await self._redis.delete(*keys[at : at + 500])
