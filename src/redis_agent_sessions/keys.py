"""The one place where Redis key names are built.

Layout (default prefix ``ras``), with ``{...}`` being the Redis Cluster hash tag:

    ras:layout                                   string the layout version the store is in: "1"
    ras:apps                                     zset   app names (escaped) by first session's
                                                        creation time, for operators' listings
                                                        (written only for an app not listed)
    ras:{<app>}:app_state                        hash   app-scope state, field -> JSON
    ras:{<app>}:sessions                         zset   "<user>:<session>" by creation time
    ras:{<app>}:sessions_updated                 zset   "<user>:<session>" by last update time
                                                        (single node only)
    ras:{<app>}:sessions_expiry                  zset   "<user>:<session>" of sessions that expire,
                                                        by the ms time they do (a cluster's, by
                                                        the time to check: see sessions/_layout)
    ras:{<app>}:app_versions                     hash   cluster: app-state field -> version
    ras:{<app>}:app_applied                      hash   cluster: user -> last outbox id applied
    ras:{<app>}:app_pending                      zset   cluster: users whose app-scope writes may
                                                        wait in their outbox, by ms time of their
                                                        latest registration (for the sweep)
    ras:{<app>:<user>}:app_outbox                stream cluster: app-scope writes not yet known
                                                        to be applied (one entry per operation)
    ras:{<app>:<user>}:user_state                hash   user-scope state, field -> JSON
    ras:{<app>:<user>}:sessions                  zset   session ids by creation time
    ras:{<app>:<user>}:sessions_updated          zset   session ids by last update time
    ras:{<app>:<user>}:session:<id>              hash   metadata (id, app_name, user_id, rev,
                                                        expires, has_state, ...)
    ras:{<app>:<user>}:session:<id>:state        hash   session-scope state, field -> JSON
    ras:{<app>:<user>}:session:<id>:events       stream one entry per event, field "event" -> JSON
                                                        (and "schema" -> the writing models'
                                                        fingerprint: sessions/_trusted)
    ras:{<app>:<user>}:session:<id>:event_ids    hash   event id -> "<revision> <stream id>"
    ras:{<app>:<user>}:session:<id>:compactions  zset   "<stream id> <start> <end>" of each
                                                        compaction summary that counts, by start
    ras:mem:{<app>:<user>}:entry:<id>            hash   one memory entry (a search index document;
                                                        with an embedder also "vec" FLOAT32 bytes,
                                                        "vkey" and "vmodel")
    ras:mem:{<app>:<user>}:entries               zset   memory entry ids by timestamp
    ras:mem:{<app>:<user>}:session:<id>          set    entry ids that session contributed
    ras:mem:{<app>:<user>}:session:<id>:ingest:<token>  set  ids seen by one running ingestion
    ras:mem:{<app>:<user>}:deleted               set    deleted entry ids, never re-ingested
    ras:mem:{<app>:<user>}:facts                 zset   learned facts' ids (entries too), by change
    ras:mem:{<app>:<user>}:facts:expiry          zset   facts with a time to live, by when (ms)
    ras:mem:{<app>:<user>}:fact:<id>:history     list   what a fact said before, newest first (JSON)
    ras:mem:factrec:{<app>:<user>}               hash   fact id -> what a generator is shown of it
                                                        and what a change compares (JSON)
    ras:mem:{<app>:<user>}:session:<id>:facts    string "<events processed>\t<last event id>": the
                                                        generator's watermark in that session
    ras:mem:{<app>:<user>}:session:<id>:facts:read  set  ids of events given it one by one
    ras:mem:{<app>:<user>}:texts                 hash   plain backend: entry id -> lowercased text
    ras:mem:stats:{<app>:<user>}                 hash   n (entries), len (their total length,
                                                        in quarter words)
    ras:mem:df:{<app>:<user>}                    hash   term -> entries found by it with their
                                                        context (@<author>: entries by them)
    ras:mem:ctx:{<app>:<user>}                   hash   entry id -> what a search scores it by:
                                                        "<ts>\t<length>\t<author terms>\t<JSON
                                                        neighbour ids>\t<term>:<quarters> ..."
    ras:mem:{<app>:<user>}:term:<term>           zset   plain backend: entry ids saying the term,
                                                        by its BM25 weight in them (in
                                                        ten-thousandths: integers)
    ras:mem:{<app>:<user>}:gram:<gram>           zset   plain backend: entry ids holding a CJK
                                                        character or pair, by time
    ras:mem:backend                              string "search" or "plain", set on first use
    ras:mem:idx                                  (RediSearch index over ras:mem:{ hashes)
    ras:mem:{<app>:}:idx                         (memory_index="per_app": one index per app,
                                                        over ras:mem:{<app>: hashes)
    ras:mem:{<app>:%i<n>}:idx                    (memory_index="per_app" on a cluster: the
                                                        app's index on the primary that owns
                                                        this tag, over its shard's entries)
    ras:mem:{<app>:<user>}:idx                   (cluster: one index per user, over its entries)
    ras:mem:vectors                              string JSON: dimensions and model of the
                                                        vectors, set by the first embedder
    ras:mem:vidx                                 (RediSearch vector index over the same hashes)
    ras:mem:{<app>:}:vidx                        (memory_index="per_app": one per app)
    ras:mem:{<app>:%i<n>}:vidx                   (per_app on a cluster: one per app and shard)
    ras:mem:{<app>:<user>}:vidx                  (cluster: one vector index per user)
    ras:mem:{<app>:%j<n>}:jobs                   stream background generation, shard n of
                                                        JobKeys.SHARDS (a user's jobs all in one)
    ras:mem:{<app>:%j<n>}:jobs:<state>           zset   job ("<s|e>:<user>:<session>") by ms:
                                                        queued, active, again, due, failed
    ras:mem:{<app>:%j<n>}:jobs:<count>           zset   users (open jobs), marks (event count at
                                                        the last job), tries (failed attempts)
    ras:mem:{<app>:%j<n>}:jobs:dead              stream dead letters: the job and its last error
    ras:mem:{<app>:%j<n>}:jobs:dropped           string jobs whose session was gone
    ras:mem:{<app>:%j<n>}:job:<job>:options      string a job's newest request's options (JSON)
    ras:mem:{<app>:%j<n>}:job:<user>:<session>:events  list  events given one by one, for a worker
    ras:mem:{<app>:%j<n>}:lease:<user>           string the worker generating for the user now

Identifiers are percent-encoded (``%``, ``:``, ``{``, ``}``, space and C0/C1 control
characters, each as its code point: ``%3A``, ``%85``), so no two different (app, user,
session) triples share a key, every key splits unambiguously on ``:``, and no input can
open or close a hash tag. Everything of one (app, user) shares a tag, so one script can
touch it all on a cluster; app-scope keys carry the app's own tag.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

from redis_agent_sessions.errors import InvalidInputError

__all__ = ["KeySpace", "SessionKeys", "check_prefix", "escape", "glob_escape", "unescape"]

_ESCAPES = {ord(c): f"%{ord(c):02X}" for c in "%:{} \x7f"}
_ESCAPES.update({i: f"%{i:02X}" for i in [*range(0x20), *range(0x80, 0xA0)]})
# Escapes name code points, not UTF-8 bytes, so decoding is per escape.
_ESCAPED = re.compile("%([0-9A-F]{2})")


def escape(identifier: str) -> str:
    """Percent-encode the characters that would make a key ambiguous or forge a hash tag."""
    return identifier.translate(_ESCAPES)


def glob_escape(text: str) -> str:
    """``text`` matched literally in a SCAN MATCH pattern (a glob: a prefix holding
    ``* ? [ ]`` or ``\\`` must match only itself)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def unescape(part: str) -> str:
    """Inverse of ``escape``."""
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), part)


@dataclass(frozen=True, slots=True)
class SessionKeys:
    """Every key one session's operations touch."""

    meta: str
    state: str
    events: str
    event_ids: str
    compactions: str
    user_state: str
    user_sessions: str
    user_updated: str
    app_state: str
    app_sessions: str
    app_updated: str
    app_expiry: str
    app_member: str
    """This session's member in the app-wide index."""
    user_member: str
    """The user's field in the app's applied-outbox hash (cluster layout)."""
    app_outbox: str
    app_versions: str
    app_applied: str
    app_pending: str
    app_name: str
    """The app's name as given (not a key): for the work a write leaves to its layout."""


@dataclass(frozen=True, slots=True)
class JobKeys:
    """Every key of one shard of an app's background-generation queue (one hash tag)."""

    SHARDS: ClassVar[int] = 8
    """Shards per app, each its own hash tag, so a cluster spreads an app's jobs; every
    enqueuer and worker of a deployment must agree on it."""
    jobs: str
    queued: str
    active: str
    again: str
    due: str
    users: str
    marks: str
    tries: str
    failed: str
    dead: str
    dropped: str
    tag: str
    """The shard's keys' common start: ``<prefix>:mem:{<app>:%j<n>}``."""

    @staticmethod
    def member(kind: str, user_id: str, session_id: str) -> str:
        """A job's name in its shard: ``<kind>:<user>:<session>`` (escaped; kind ``s`` for
        a session, ``e`` for events given one by one)."""
        return f"{kind}:{escape(user_id)}:{escape(session_id)}"


LAYOUT_WORDS = ("apps", "mem", "demo")
"""What a key may say right after ``<prefix>:`` besides a hash tag (see the layout above)."""


def check_prefix(prefix: object) -> str:
    """``prefix`` if keys built under it are never another prefix's, else InvalidInputError.

    Keys under ``a`` continue ``a:{``, ``a:apps``, ``a:mem:`` or ``a:demo:``, so a prefix
    ``a:mem`` would build ``a:mem:{<app>:<user>}:session:<id>``, the memory set of that
    session under ``a``. A prefix may hold ``:`` (the demo nests its own under the URL's),
    but no part after the first may be one of those words, and none may open a hash tag.
    """
    if not isinstance(prefix, str):
        raise InvalidInputError(f"key prefix must be a string, got {type(prefix).__name__}")
    if not prefix or "{" in prefix or "}" in prefix:
        raise InvalidInputError(
            f"key prefix must be non-empty and contain no '{{' or '}}': {prefix!r}"
        )
    clash = [part for part in prefix.split(":")[1:] if part in LAYOUT_WORDS]
    if clash:
        raise InvalidInputError(
            f"key prefix {prefix!r} has {clash[0]!r} after a ':': no part of a prefix but "
            f"its first may be {', '.join(map(repr, LAYOUT_WORDS))}, or its keys would be "
            "those of the shorter prefix before it"
        )
    return prefix


@dataclass(frozen=True, slots=True)
class KeySpace:
    """Builds keys under one prefix."""

    prefix: str = "ras"

    def __post_init__(self) -> None:
        check_prefix(self.prefix)

    def _app(self, app_name: str) -> str:
        return f"{self.prefix}:{{{escape(app_name)}}}"

    def _user(self, app_name: str, user_id: str) -> str:
        return f"{self.prefix}:{{{escape(app_name)}:{escape(user_id)}}}"

    def layout(self) -> str:
        """The layout version this store is written in (see docs/layout-spec.md)."""
        return f"{self.prefix}:layout"

    def apps(self) -> str:
        """Every app that ever had a session (members are escaped app names)."""
        return f"{self.prefix}:apps"

    def app_state(self, app_name: str) -> str:
        return f"{self._app(app_name)}:app_state"

    def app_sessions(self, app_name: str) -> str:
        return f"{self._app(app_name)}:sessions"

    def app_updated(self, app_name: str) -> str:
        return f"{self._app(app_name)}:sessions_updated"

    def app_expiry(self, app_name: str) -> str:
        """Sessions of the app that expire, by when (see ``sessions/_layout.py``)."""
        return f"{self._app(app_name)}:sessions_expiry"

    def app_versions(self, app_name: str) -> str:
        return f"{self._app(app_name)}:app_versions"

    def app_applied(self, app_name: str) -> str:
        return f"{self._app(app_name)}:app_applied"

    def app_pending(self, app_name: str) -> str:
        """Cluster layout: the registry of users whose app-scope writes may be unapplied."""
        return f"{self._app(app_name)}:app_pending"

    def app_outbox(self, app_name: str, user_id: str) -> str:
        return f"{self._user(app_name, user_id)}:app_outbox"

    def user_state(self, app_name: str, user_id: str) -> str:
        return f"{self._user(app_name, user_id)}:user_state"

    def user_sessions(self, app_name: str, user_id: str) -> str:
        return f"{self._user(app_name, user_id)}:sessions"

    def user_updated(self, app_name: str, user_id: str) -> str:
        return f"{self._user(app_name, user_id)}:sessions_updated"

    def session(self, app_name: str, user_id: str, session_id: str) -> SessionKeys:
        return _session_keys(self, app_name, user_id, session_id)

    def _memory(self, app_name: str, user_id: str) -> str:
        # Its own namespace, so the search index's prefix covers entry hashes only.
        return f"{self.prefix}:mem:{{{escape(app_name)}:{escape(user_id)}}}"

    def memory_index(self) -> str:
        """Name of the RediSearch index (not a key)."""
        return f"{self.prefix}:mem:idx"

    def memory_index_prefix(self) -> str:
        """The key prefix the RediSearch index covers."""
        return f"{self.prefix}:mem:{{"

    def memory_user_index(self, app_name: str, user_id: str) -> str:
        """Name of one (app, user)'s RediSearch index (cluster layout; not a key, but a
        cluster routes it by its hash tag to the shard holding that user's entries)."""
        return f"{self._memory(app_name, user_id)}:idx"

    def memory_user_index_prefix(self, app_name: str, user_id: str) -> str:
        """The key prefix one (app, user)'s index covers: its entry hashes."""
        return f"{self._memory(app_name, user_id)}:entry:"

    def memory_app_index(self, app_name: str) -> str:
        """Name of one app's RediSearch index (``memory_index="per_app"``; not a key, but
        named like the app's memory keys, so an ACL key pattern of the app covers it: the
        empty user part cannot be a user's, whose ids are never empty)."""
        return f"{self._memory(app_name, '')}:idx"

    def memory_app_index_prefix(self, app_name: str) -> str:
        """The key prefix one app's index covers: its users' memory keys."""
        return f"{self.prefix}:mem:{{{escape(app_name)}:"

    def memory_app_shard_index(self, app_name: str, n: int) -> str:
        """Name of one app's RediSearch index on one primary of a cluster (``per_app``): its
        hash tag ``{<app>:%i<n>}`` picks the primary (no user's tag: an escaped user id never
        holds ``%`` and a letter), and the app's ACL key pattern covers it."""
        return f"{self.prefix}:mem:{{{escape(app_name)}:%i{n}}}:idx"

    def memory_app_shard_vector_index(self, app_name: str, n: int) -> str:
        """Name of one app's vector index on one primary (as ``memory_app_shard_index``)."""
        return f"{self.prefix}:mem:{{{escape(app_name)}:%i{n}}}:vidx"

    def memory_app_vector_index(self, app_name: str) -> str:
        """Name of one app's vector index (``memory_index="per_app"``)."""
        return f"{self._memory(app_name, '')}:vidx"

    def app_acl_keys(self, app_name: str) -> list[str]:
        """The key rules (``ACL SETUSER``) of a Redis user limited to one app: its sessions,
        state and memory (with ``memory_index="per_app"`` the names of its search indexes
        too), and read-only, the records every app shares: the registry of app names (an
        operator lists the app: ``redis-agent-sessions tenant create``), the layout version
        and the memory's backend and vector records (written once, by an admin)."""
        app, prefix = glob_escape(escape(app_name)), glob_escape(self.prefix)
        own = [
            f"~{prefix}:{{{app}}}:*",
            f"~{prefix}:{{{app}:*",
            *(
                f"~{prefix}:mem:{part}{{{app}:*"
                for part in ("", "stats:", "df:", "ctx:", "factrec:")
            ),
        ]
        records = [self.apps(), self.layout(), self.memory_backend(), self.memory_vectors()]
        return own + [f"%R~{glob_escape(key)}" for key in records]

    def memory_vector_index(self) -> str:
        """Name of the RediSearch vector index (not a key), over the same hashes."""
        return f"{self.prefix}:mem:vidx"

    def memory_user_vector_index(self, app_name: str, user_id: str) -> str:
        """Name of one (app, user)'s vector index (cluster layout; routed like ``idx``)."""
        return f"{self._memory(app_name, user_id)}:vidx"

    def memory_vectors(self) -> str:
        """String key recording the dimensions and model of stored vectors (JSON)."""
        return f"{self.prefix}:mem:vectors"

    def memory_entries_pattern(self, app_name: str | None = None) -> str:
        """SCAN MATCH pattern of every (app, user)'s entries zset, or of one app's users'."""
        owner = "*" if app_name is None else f"{glob_escape(escape(app_name))}:*"
        return f"{glob_escape(self.prefix)}:mem:{{{owner}}}:entries"

    def memory_owner(self, entries_key: str) -> tuple[str, str] | None:
        """(app, user) of an entries zset key, None when the key is not one."""
        head, tail = f"{self.prefix}:mem:{{", "}:entries"
        if not (entries_key.startswith(head) and entries_key.endswith(tail)):
            return None
        app, sep, user = entries_key[len(head) : -len(tail)].partition(":")
        return (unescape(app), unescape(user)) if sep and ":" not in user else None

    def memory_backend(self) -> str:
        """String key recording the memory backend every worker must use."""
        return f"{self.prefix}:mem:backend"

    def memory_entry(self, app_name: str, user_id: str, memory_id: str) -> str:
        return f"{self._memory(app_name, user_id)}:entry:{escape(memory_id)}"

    def memory_entries(self, app_name: str, user_id: str) -> str:
        return f"{self._memory(app_name, user_id)}:entries"

    def memory_session(self, app_name: str, user_id: str, session_id: str) -> str:
        return f"{self._memory(app_name, user_id)}:session:{escape(session_id)}"

    def memory_ingest(self, app_name: str, user_id: str, session_id: str, token: str) -> str:
        return f"{self.memory_session(app_name, user_id, session_id)}:ingest:{escape(token)}"

    def memory_deleted(self, app_name: str, user_id: str) -> str:
        return f"{self._memory(app_name, user_id)}:deleted"

    def memory_facts(self, app_name: str, user_id: str) -> str:
        return f"{self._memory(app_name, user_id)}:facts"

    def memory_fact_expiry(self, app_name: str, user_id: str) -> str:
        return f"{self._memory(app_name, user_id)}:facts:expiry"

    def memory_fact_records(self, app_name: str, user_id: str) -> str:
        """Each fact as a consolidation step reads it: outside the index's prefix, as stats."""
        return f"{self.prefix}:mem:factrec:{{{escape(app_name)}:{escape(user_id)}}}"

    def memory_fact_history(self, app_name: str, user_id: str, fact_id: str) -> str:
        return f"{self._memory(app_name, user_id)}:fact:{escape(fact_id)}:history"

    def memory_watermark(self, app_name: str, user_id: str, session_id: str) -> str:
        """How far the generator has read a session (a string: not a search document)."""
        return f"{self.memory_session(app_name, user_id, session_id)}:facts"

    def memory_read_events(self, app_name: str, user_id: str, session_id: str) -> str:
        """The events given one by one (``add_events_to_memory``): a set, none read twice."""
        return f"{self.memory_session(app_name, user_id, session_id)}:facts:read"

    def memory_texts(self, app_name: str, user_id: str) -> str:
        return f"{self._memory(app_name, user_id)}:texts"

    def memory_context(self, app_name: str, user_id: str) -> str:
        """What a search scores each entry by (its time, length, author terms, neighbours and
        terms in context: see ``_scoring.lua``); outside the index's prefix, as ``memory_stats``."""
        return f"{self.prefix}:mem:ctx:{{{escape(app_name)}:{escape(user_id)}}}"

    def memory_term(self, app_name: str, user_id: str, term: str) -> str:
        """Plain backend: the entries saying an analysed term, by its weight in each."""
        return f"{self._memory(app_name, user_id)}:term:{escape(term)}"

    def memory_stats(self, app_name: str, user_id: str) -> str:
        """The user's entry count and total (quarter) length: outside the index's prefix."""
        return f"{self.prefix}:mem:stats:{{{escape(app_name)}:{escape(user_id)}}}"

    def memory_df(self, app_name: str, user_id: str) -> str:
        """How many entries are found by each term with their context (``@``-terms: by each
        author); outside the index's prefix, as ``memory_stats``."""
        return f"{self.prefix}:mem:df:{{{escape(app_name)}:{escape(user_id)}}}"

    def memory_gram(self, app_name: str, user_id: str, gram: str) -> str:
        return f"{self._memory(app_name, user_id)}:gram:{escape(gram)}"

    def job_shard(self, app_name: str, user_id: str) -> int:
        """The shard of the user's background-generation jobs: a stable hash of (app, user),
        the same in every process (CRC-32, not Python's salted ``hash``)."""
        owner = f"{app_name}\0{user_id}".encode("utf-8", "surrogatepass")
        return zlib.crc32(owner) % JobKeys.SHARDS

    def jobs(self, app_name: str, shard: int) -> JobKeys:
        """One shard of the app's queue: its tag ``{<app>:%j<n>}`` is no user's (an escaped
        id never holds ``%`` and a letter) and is inside the app's ACL key rules."""
        tag = f"{self.prefix}:mem:{{{escape(app_name)}:%j{shard}}}"
        jobs = f"{tag}:jobs"
        return JobKeys(
            jobs=jobs, queued=f"{jobs}:queued", active=f"{jobs}:active", again=f"{jobs}:again",
            due=f"{jobs}:due", users=f"{jobs}:users", marks=f"{jobs}:marks",
            tries=f"{jobs}:tries", failed=f"{jobs}:failed", dead=f"{jobs}:dead",
            dropped=f"{jobs}:dropped", tag=tag,
        )  # fmt: skip

    def job_events(self, app_name: str, shard: int, user_id: str, session_id: str) -> str:
        """Events given one by one, waiting for a worker (newest first)."""
        tag = self.jobs(app_name, shard).tag
        return f"{tag}:job:{escape(user_id)}:{escape(session_id)}:events"

    def job_options(self, app_name: str, shard: int, job: str) -> str:
        return f"{self.jobs(app_name, shard).tag}:job:{job}:options"

    def job_lease(self, app_name: str, shard: int, user_id: str) -> str:
        """Which worker generates for the user now (a string with a time to live)."""
        return f"{self.jobs(app_name, shard).tag}:lease:{escape(user_id)}"

    def demo(self, *parts: str) -> str:
        """Control keys of the demo's dispatcher and workers (queues, results, signals)."""
        return ":".join([self.prefix, "demo", *map(escape, parts)])


# Workers append to the same few sessions over and over: building the names is a
# measurable share of an append, so recently used ones are kept.
@lru_cache(maxsize=4096)
def _session_keys(space: KeySpace, app_name: str, user_id: str, session_id: str) -> SessionKeys:
    user = space._user(app_name, user_id)
    meta = f"{user}:session:{escape(session_id)}"
    return SessionKeys(
        meta=meta,
        state=f"{meta}:state",
        events=f"{meta}:events",
        event_ids=f"{meta}:event_ids",
        compactions=f"{meta}:compactions",
        user_state=f"{user}:user_state",
        user_sessions=f"{user}:sessions",
        user_updated=f"{user}:sessions_updated",
        app_state=space.app_state(app_name),
        app_sessions=space.app_sessions(app_name),
        app_updated=space.app_updated(app_name),
        app_expiry=space.app_expiry(app_name),
        app_member=app_member(user_id, session_id),
        user_member=escape(user_id),
        app_outbox=f"{user}:app_outbox",
        app_versions=space.app_versions(app_name),
        app_applied=space.app_applied(app_name),
        app_pending=space.app_pending(app_name),
        app_name=app_name,
    )


def app_member(user_id: str, session_id: str) -> str:
    """A session's member in its app-wide index: ``<user>:<session>``, both escaped."""
    return f"{escape(user_id)}:{escape(session_id)}"


def split_app_member(member: str) -> tuple[str, str]:
    """Inverse of ``app_member``."""
    user, _, session = member.partition(":")
    return unescape(user), unescape(session)
