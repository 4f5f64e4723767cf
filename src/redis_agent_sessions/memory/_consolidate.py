"""Consolidation: a session's new events through the generator, into the user's facts.

Each step reads how far the session was read (its watermark), hands the next events and the
user's most related facts to the generator, checks what it answers, and applies it with the
watermark moved, in one script (see ``_facts``). When another worker changed a fact it
touched or read the same events first, nothing is written and the step starts again from
what is stored now: the generator runs again on fresh facts, at most ``ATTEMPTS`` times.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from redis_agent_sessions._redis.codec import check_id
from redis_agent_sessions._redis.memory_calls import MEMORY_RELATED, first_referenced
from redis_agent_sessions.errors import (
    ConsolidationConflictError,
    GenerationError,
    InvalidInputError,
)
from redis_agent_sessions.memory._facts import (
    ATTEMPTS,
    Change,
    FactStore,
    Related,
    Stored,
    backoff,
    new_fact_id,
)
from redis_agent_sessions.memory._generators import (
    FactSource,
    GenerationRequest,
    MemoryGenerator,
    MemoryOperation,
    checked_operations,
)
from redis_agent_sessions.memory._ranking import MAX_QUERY_TERMS, IndexRanker, PlainRanker, prepare
from redis_agent_sessions.memory._request_options import (
    MergeStrategy,
    MetadataValue,
    RequestOptions,
    check_labels,
    check_metadata,
    check_revision_ttl,
    check_strategy,
    merged_metadata,
)
from redis_agent_sessions.models import Event, Session

if TYPE_CHECKING:
    from redis_agent_sessions.memory._encoding import Doc

__all__ = ["Consolidator", "FactSettings", "check_background", "checked_events"]

EVENTS_PER_STEP = 50
"""Events one generation reads at most: a long session is read in steps, each applied."""
RELATED = 30
"""Stored facts a generation is shown at most (those most related to its events)."""
_QUERY_CHARS = 4_000


@dataclass(frozen=True)
class FactSettings:
    """How a memory service learns facts (with a generator)."""

    topics: Sequence[str] | None = None
    """The topics to keep facts about, told to the generator and enforced on its answer."""
    ttl_seconds: int | None = None
    """Forget a fact this long after its last change (a generator's operation may say
    otherwise); None keeps facts until deleted."""
    keep_events: bool = False
    """Also keep every event as an entry, as without a generator (both are searched)."""
    history: int = 10
    """Revisions of a fact kept in its history."""
    disable_consolidation: bool = False
    """Only add facts, never update or delete one: the generator is shown no stored fact
    (Memory Bank's ``disable_consolidation``)."""
    # -- revisions and metadata (Memory Bank's; a request's custom_metadata may say otherwise) --
    revision_ttl: float | None = None
    """Seconds a revision stays in its fact's history after it was written (Memory Bank's
    ``revision_ttl``); None keeps it while the history has room."""
    revision_labels: Mapping[str, str] | None = None
    """Labels on every revision written (a request's own ``revision_labels`` are merged
    over them, key by key)."""
    metadata: Mapping[str, MetadataValue] | None = None
    """Metadata for the facts every request writes (a request's own ``metadata`` is
    merged over it, key by key), applied by ``metadata_merge_strategy``."""
    metadata_merge_strategy: MergeStrategy = "OVERWRITE"
    """How a request's metadata meets a changed fact's: ``OVERWRITE`` replaces it, ``MERGE``
    adds to it (the request's keys win), ``REQUIRE_EXACT_MATCH`` changes only facts whose
    metadata is the request's (the generator is shown no other)."""
    # -- background generation (memory/_jobs.py) --
    mode: Literal["inline", "background"] = "inline"
    """``inline``: adding a session runs the generator in the call; ``background``: it
    records a job, run by a [`FactWorker`][] (docs/facts.md)."""
    trigger_events: int | None = None
    """Background: a session's job waits until it has this many new events (None: none)."""
    trigger_idle_seconds: float | None = None
    """Background: or until no request came for it this long (None: none)."""
    max_backlog: int = 10_000
    """Background: jobs waiting per app, at most; each of its shards refuses past its share
    (``BacklogFullError``)."""

    def __post_init__(self) -> None:
        check_background(self)
        # Copies: a caller's dict changed later must not change the settings.
        checked: dict[str, Any] = {
            "revision_labels": None
            if self.revision_labels is None
            else check_labels(self.revision_labels),
            "metadata": None if self.metadata is None else check_metadata(self.metadata),
            "metadata_merge_strategy": check_strategy(self.metadata_merge_strategy),
        }
        if self.revision_ttl is not None:
            checked["revision_ttl"] = check_revision_ttl(self.revision_ttl)
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def applied(self, options: RequestOptions | None) -> RequestOptions:
        """A request's options completed by these settings: what its generation writes."""
        given = options or RequestOptions()
        labels = {**(self.revision_labels or {}), **(given.revision_labels or {})}
        metadata = None
        if self.metadata is not None or given.metadata is not None:
            metadata = {**(self.metadata or {}), **(given.metadata or {})}
        return RequestOptions(
            labels,
            metadata,
            given.metadata_merge_strategy or self.metadata_merge_strategy,
            given.revision_ttl or self.revision_ttl,
        )


class Consolidator:
    def __init__(
        self,
        facts: FactStore,
        generator: MemoryGenerator,
        settings: FactSettings,
        *,
        ranker: IndexRanker | PlainRanker,
        embed: Callable[[str, str, list[Doc]], Awaitable[None]],
        telemetry: Any = None,
    ) -> None:
        self.facts = facts
        self.generator = generator
        self.settings = settings
        self._ranker = ranker
        self._embed = embed
        self._telemetry = telemetry
        """With telemetry on: the generator's calls get spans of their own (model time),
        inside the operation's span (which also holds the Redis time)."""
        self._name = str(getattr(generator, "name", type(generator).__name__))

    async def session(
        self, app: str, user: str, session: Session, options: RequestOptions | None = None
    ) -> int:
        """Read the session's events not read yet, step by step; the generations run, and
        write what ``options`` (the request's own) and the settings say."""
        sid = session.id
        applied = self.settings.applied(options)
        steps = 0
        while True:
            for attempt in range(ATTEMPTS):
                mark = await self.facts.watermark(app, user, sid)
                start = _position(mark, session.events)
                events = session.events[start : start + EVENTS_PER_STEP]
                if not events:
                    return steps
                end = start + len(events)
                new_mark = f"{end}\t{events[-1].id}"
                outcome = await self._step(app, user, sid, events, mark, new_mark, applied)
                if outcome == "applied" and end >= len(session.events):
                    return steps + 1  # all read: no need to ask the watermark again
                if outcome == "applied":
                    steps += 1
                    break
                if outcome == "fact changed":
                    await backoff(attempt)
            else:
                raise ConsolidationConflictError(
                    f"the facts of user {user!r} (app {app!r}) kept changing during "
                    f"{ATTEMPTS} generations from session {sid!r}; nothing of this step "
                    f"(events {start + 1} to {end}) was written, earlier steps stay"
                )

    async def events(
        self,
        app: str,
        user: str,
        sid: str,
        events: Sequence[Event],
        options: RequestOptions | None = None,
    ) -> int:
        """Events given one by one (``add_events_to_memory``): those not read yet, in steps;
        each step marks its events read in the session, so one given again is skipped."""
        pending = list(events)
        applied = self.settings.applied(options)
        steps = 0
        while pending:
            for attempt in range(ATTEMPTS):
                unread = await self.facts.unread(app, user, sid, [e.id for e in pending])
                pending = [e for e in pending if e.id in unread]
                step = pending[:EVENTS_PER_STEP]
                if not step:
                    return steps
                read = [e.id for e in step]
                outcome = await self._step(app, user, sid, step, "*", "", applied, read)
                if outcome == "applied":
                    steps += 1
                    pending = pending[len(step) :]
                    break
                if outcome == "fact changed":
                    await backoff(attempt)
            else:
                raise ConsolidationConflictError(
                    f"the facts of user {user!r} (app {app!r}) kept changing during "
                    f"{ATTEMPTS} generations; nothing of this step ({len(step)} events) was "
                    "written, earlier steps stay"
                )
        return steps

    async def _step(
        self,
        app: str,
        user: str,
        sid: str,
        events: Sequence[Event],
        mark: str,
        new_mark: str,
        applied: RequestOptions,
        read: Sequence[str] = (),
    ) -> str:
        now = time.time()
        said = [
            e for e in events if not e.partial and e.content is not None and e.content.text.strip()
        ]
        related = await self._related(app, user, said, now)
        changes = [Change.of("expire", f) for f in related.due]
        if said:
            # With consolidation off the generator is shown no fact, so it may only add
            # (Memory Bank's disable_consolidation); REQUIRE_EXACT_MATCH shows it only the
            # facts whose metadata is the request's, so it changes no other.
            exact = applied.metadata_merge_strategy == "REQUIRE_EXACT_MATCH"
            shown = {
                f.fact.id: f
                for f in related.shown
                if not self.settings.disable_consolidation
                and (f.fact.expires is None or f.fact.expires > now)
                and not (exact and f.fact.metadata != (applied.metadata or {}))
            }
            request = GenerationRequest(
                app_name=app, user_id=user, session_id=sid, events=list(said),
                facts=[f.fact for f in shown.values()],
                topics=None if self.settings.topics is None else list(self.settings.topics),
            )  # fmt: skip
            ops = await self._generate(request)
            changes += await self._changes(app, user, sid, ops, request, shown, now, applied)
        outcome = await self.facts.apply(
            app, user, changes, session_id=sid, seen_mark=mark, new_mark=new_mark, now=now,
            read=read,
        )  # fmt: skip
        if self._telemetry is not None and said:
            self._telemetry.count("facts.generations", outcome=outcome.replace(" ", "_"))
        return outcome

    async def _generate(self, request: GenerationRequest) -> list[MemoryOperation]:
        """The generator's checked answer; with telemetry, in a span of its own."""
        if self._telemetry is None:
            return await self._answer(request)
        about = {
            "generator": self._name,
            "generator.events": len(request.events),
            "generator.facts_shown": len(request.facts),
        }
        with self._telemetry.step("generate_memories", about) as span:
            ops = await self._answer(request)
            span.set_attribute("redis_agent_sessions.generator.operations", len(ops))
            return ops

    async def _answer(self, request: GenerationRequest) -> list[MemoryOperation]:
        try:
            answer = await self.generator.generate(request)
        except GenerationError:
            raise
        except Exception as exc:  # a model's client fails in its own ways
            raise GenerationError(f"the generator failed: {type(exc).__name__}: {exc}") from exc
        return checked_operations(answer, request, self.settings.topics)

    async def _related(self, app: str, user: str, events: Sequence[Event], now: float) -> Related:
        """The user's facts past their time to live, and those most related to ``events``:
        all when they are few, else the best ranked for the events' words (the generator
        may only change these). One script call on the plain backend, which ranks in it;
        the search module's ranking takes its own round trips, when the facts are many."""
        query = " ".join(e.content.text for e in events if e.content is not None)
        terms = prepare(query[:_QUERY_CHARS])[:MAX_QUERY_TERMS]
        depth, ranker, facts = RELATED * 4, self._ranker, self.facts
        if not terms:  # turns with no word to rank by (";)") are shown the newest facts
            found = await facts.related(app, user, now=now, most=RELATED, ranked=[], ranking=None)
        elif isinstance(ranker, PlainRanker):
            first = first_referenced(MEMORY_RELATED)
            ranking = ranker.call(app, user, terms, depth, first=first)
            found = await facts.related(
                app, user, now=now, most=RELATED, ranked=None, ranking=ranking
            )
        else:
            found = await facts.related(app, user, now=now, most=RELATED, ranked=None, ranking=None)
            if found is None:  # more facts than are shown: the search module ranks them
                ranked = [i for i, _ in (await ranker.rank(app, user, terms, depth)).hits]
                found = await facts.related(
                    app, user, now=now, most=RELATED, ranked=ranked, ranking=None
                )
        assert found is not None
        return found

    async def _changes(
        self,
        app: str,
        user: str,
        sid: str,
        ops: Sequence[MemoryOperation],
        request: GenerationRequest,
        shown: dict[str, Stored],
        now: float,
        applied: RequestOptions,
    ) -> list[Change]:
        changes: list[Change] = []
        strategy = applied.metadata_merge_strategy or "OVERWRITE"
        kept_for = applied.revision_ttl
        revision_expires = now + kept_for if kept_for else None
        for op in ops:
            if op.action == "delete":
                assert op.fact_id is not None
                changes.append(Change.of("delete", shown[op.fact_id]))
                continue
            ids = (
                [e.id for e in request.events]
                if op.source_event_ids is None
                else op.source_event_ids
            )
            ttl = op.ttl_seconds or self.settings.ttl_seconds
            expires_ms = int((now + ttl) * 1000) if ttl else 0
            stored = shown[op.fact_id] if op.fact_id is not None else None
            was = None if stored is None else stored.fact
            fact_id = op.fact_id or new_fact_id()
            assert op.fact is not None
            doc, record = self.facts.entry(
                app, user, fact_id=fact_id, text_=op.fact, topics=op.topics,
                revision=1 if was is None else was.revision + 1,
                created=now if was is None else was.created, now=now, expires_ms=expires_ms,
                sources=[FactSource(session_id=sid, event_ids=list(ids))],
                metadata=merged_metadata(strategy, {} if was is None else was.metadata,
                                         applied.metadata),
                revision_labels=applied.revision_labels or {},
                revision_expires=revision_expires,
            )  # fmt: skip
            changes.append(
                Change(
                    op.action, fact_id, 0 if was is None else was.revision, doc, expires_ms, was,
                    sig="" if stored is None else stored.sig, record=record,
                )
            )  # fmt: skip
        await self._embed(app, user, [c.doc for c in changes if c.doc is not None])
        return changes


def check_background(settings: FactSettings) -> None:
    """The background settings make sense, else InvalidInputError."""
    if settings.mode not in ("inline", "background"):
        raise InvalidInputError(f"mode must be 'inline' or 'background': {settings.mode!r}")
    for name in ("trigger_events", "trigger_idle_seconds", "max_backlog"):
        value = getattr(settings, name)
        if value is not None and (isinstance(value, bool) or not value > 0):
            raise InvalidInputError(f"{name} must be positive: {value!r}")


def checked_events(events: Sequence[Event]) -> None:
    """Events the watermark can count and name (as the session store keeps them)."""
    for event in events:
        if not isinstance(event, Event):
            raise InvalidInputError(f"not an event: {type(event).__name__}")
        check_id("event id", event.id)


def _position(mark: str, events: Sequence[Event]) -> int:
    """Where the events not read yet start: after the count the watermark records, when
    the event there is the one it names; else after that event wherever it is (a session
    read in another order); else (it is gone: the session was rewound) at the count."""
    if not mark:
        return 0
    count_, _, last = mark.partition("\t")
    count = int(count_) if count_.isdigit() else 0
    if 0 < count <= len(events) and events[count - 1].id == last:
        return count
    for i in range(len(events) - 1, -1, -1):
        if events[i].id == last:
            return i + 1
    return min(count, len(events))
