"""Background generation's queue: jobs in Redis Streams, one consumer group of workers.

An app's jobs are spread over ``JobKeys.SHARDS`` shards, each its own hash tag
(``{<app>:%j<n>}``, inside the app's ACL key rules), the shard chosen by a stable hash of
(app, user): every script here touches one shard, so it runs on a cluster as on one node,
and all of a user's jobs are in one shard (one lease, one count to wait on).

A job is named by what it is for, ``<kind>:<user>:<session>``: ``s`` reads the session
from the session store (same key prefix) when it runs, ``e`` consolidates events given one
by one (``add_events_to_memory``), kept in a list beside it until a worker has read them.
A job is in one state at a time: deferred (its trigger not reached, or a retry's pause),
queued (one stream entry, waiting for a worker), or active (a worker's, until it is
acknowledged; asked for again meanwhile, it is queued again when it ends). So requests
coalesce: one job per session waits, however many times the session was added. Its options
(revision labels, metadata: ``_request_options``) are its newest request's, kept beside it
until its last run ends: the one generation that serves several requests writes what the
last of them asked for.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import text
from redis_agent_sessions._redis.jobs_calls import (
    JOBS_DUE,
    JOBS_ENQUEUE,
    JOBS_FINISH,
    JOBS_LETTER,
    JOBS_START,
    JOBS_TOUCH,
    JobsDue,
    JobsEnqueue,
    JobsFinish,
    JobsLetter,
    JobsStart,
    JobsTouch,
    Started,
)
from redis_agent_sessions.errors import (
    BacklogFullError,
    GenerationError,
    GenerationTimeoutError,
    PayloadTooLargeError,
)
from redis_agent_sessions.keys import JobKeys, KeySpace, escape, unescape
from redis_agent_sessions.memory._consolidate import FactSettings
from redis_agent_sessions.memory._request_options import RequestOptions
from redis_agent_sessions.models import Event, Session

__all__ = ["GROUP", "DeadLetter", "Job", "JobQueue", "ShardBacklog"]

GROUP = "workers"
"""The consumer group every worker reads the job streams in."""
MAX_JOB_EVENTS = 10_000
"""Events given one by one that may wait for one job (past it: BacklogFullError)."""
EVENTS_PER_JOB = 500
"""Events one job reads at most (the rest: the same job again, at once)."""
DEAD_LETTERS_KEPT = 10_000
"""Dead letters kept per shard (about: the stream is trimmed as they are added)."""
_POLL, _POLL_MAX = 0.02, 0.25
"""Seconds between a waiter's looks: the first, and the longest as it backs off."""

Finish = Literal["done", "failed", "dead", "gone", "release"]


@dataclass(frozen=True)
class Job:
    """One job a worker read from a shard's stream."""

    app: str
    shard: int
    entry: str
    """Its stream entry's id."""
    name: str
    """``<kind>:<user>:<session>``, escaped."""
    claimed: bool = False
    """Taken over from a worker that stopped answering (counts as an attempt)."""
    trace: str = ""
    """The W3C traceparent of the request that queued it ('' without telemetry)."""

    @property
    def kind(self) -> str:
        return self.name[0]

    @property
    def user(self) -> str:
        return unescape(self.name.split(":")[1])

    @property
    def session_id(self) -> str:
        return unescape(self.name.split(":")[2])


@dataclass(frozen=True)
class ShardBacklog:
    """What one shard of an app's queue holds (``redis-agent-sessions facts jobs``)."""

    app: str
    shard: int
    queued: int
    """Jobs waiting for a worker."""
    active: int
    """Jobs a worker started and has not ended."""
    deferred: int
    """Jobs waiting for their trigger or a retry's pause."""
    pending: int
    """Stream entries delivered to a worker and not acknowledged (active, or a dead
    worker's, to be claimed again)."""
    oldest_age: float | None
    """Seconds the oldest queued job has waited (None: none is)."""
    dead_letters: int
    dropped: int
    """Jobs dropped because their session was gone."""


@dataclass(frozen=True)
class DeadLetter:
    """A job that failed its last attempt, with its last error."""

    id: str
    """``<shard>/<entry id>``: what ``retry`` and ``drop`` take."""
    app: str
    user: str
    session_id: str
    kind: Literal["session", "events"]
    error: str
    attempts: int
    at: float
    """When it failed the last time (epoch seconds)."""


class JobQueue:
    """The queue's scripts and reads, for the service (enqueue, wait), the workers and the
    operators."""

    def __init__(self, client: Any, keys: KeySpace, settings: FactSettings, max_bytes: int):
        self._redis = client
        self.keys = keys
        self.settings = settings
        self._max_bytes = max_bytes
        self.telemetry: Any = None
        """The instrumented service's Telemetry (telemetry on): a job keeps the trace that
        asked for it, and a worker's span links to it."""
        self._enqueue_script = _scripts.register(client, JOBS_ENQUEUE)
        self._start_script = _scripts.register(client, JOBS_START)
        self._finish_script = _scripts.register(client, JOBS_FINISH)
        self._due_script = _scripts.register(client, JOBS_DUE)
        self._touch_script = _scripts.register(client, JOBS_TOUCH)
        self._letter_script = _scripts.register(client, JOBS_LETTER)

    def shard_keys(self, app: str, user: str) -> tuple[int, JobKeys]:
        shard = self.keys.job_shard(app, user)
        return shard, self.keys.jobs(app, shard)

    # -- requests -------------------------------------------------------------------------

    async def session(
        self, app: str, user: str, session: Session, options: RequestOptions | None = None
    ) -> int:
        """A job to consolidate the session as the session store has it when the job runs
        (what the session holds now is not sent); 1 queued, 2 merged, 3 deferred. The
        signature is the Consolidator's: the engine hands requests to either."""
        count = len(session.events)
        return await self._enqueue(app, user, "s", session.id, count, [], options)

    async def events(
        self,
        app: str,
        user: str,
        sid: str,
        events: Sequence[Event],
        options: RequestOptions | None = None,
    ) -> int:
        """A job to consolidate ``events`` (kept beside it until a worker reads them)."""
        given = []
        for event in events:
            raw = event.model_dump_json(exclude_none=True)
            if len(raw) > self._max_bytes:
                raise PayloadTooLargeError(f"event {event.id!r}", len(raw), self._max_bytes)
            given.append(raw)
        return await self._enqueue(app, user, "e", sid, 0, given, options)

    async def _enqueue(
        self,
        app: str,
        user: str,
        kind: str,
        sid: str,
        count: int,
        given: list[str],
        options: RequestOptions | None,
    ) -> int:
        shard, k = self.shard_keys(app, user)
        s = self.settings
        idle = s.trigger_idle_seconds
        idle_ms = 0 if idle is None else max(1, int(idle * 1000))
        job = JobKeys.member(kind, user, sid)
        call = JobsEnqueue(
            k.jobs, k.queued, k.active, k.again, k.due, k.users, k.marks,
            events=self.keys.job_events(app, shard, user, sid),
            options=self.keys.job_options(app, shard, job),
            job=job,
            user=escape(user),
            now_ms=_now_ms(),
            max_waiting=math.ceil(s.max_backlog / JobKeys.SHARDS),
            session_events=count,
            event_trigger=s.trigger_events or 0,
            idle_ms=idle_ms,
            max_events=MAX_JOB_EVENTS,
            traceparent="" if self.telemetry is None else self.telemetry.traceparent(),
            request="" if options is None else options.to_json(),
            given=given,
        )  # fmt: skip
        done = await _scripts.run(self._enqueue_script, call)
        if done.status == -5:
            raise BacklogFullError(
                f"background generation's queue of app {app!r} is full for user {user!r}: "
                f"{done.waiting} jobs wait in its shard {shard} (max_backlog {s.max_backlog} "
                f"over {JobKeys.SHARDS} shards); nothing was recorded. The workers are behind"
            )
        if done.status == -7:
            raise BacklogFullError(
                f"{done.waiting} events of session {sid!r} (user {user!r}, app {app!r}) already "
                f"wait for a worker (at most {MAX_JOB_EVENTS}); nothing was recorded"
            )
        return done.status

    # -- waiting --------------------------------------------------------------------------

    async def wait(
        self, app: str, user: str, session_id: str | None, timeout: float, flush: bool
    ) -> None:
        """Until no job of the session (or of the user) is deferred, queued or running."""
        shard, k = self.shard_keys(app, user)
        names = [] if session_id is None else [JobKeys.member(c, user, session_id) for c in "se"]
        started = _now_ms()
        if flush:
            flushing = names or [escape(user) + ":"]
            call = JobsDue(k.jobs, k.queued, k.active, k.again, k.due, started, 0, flushing)
            await _scripts.run(self._due_script, call)
        deadline, pause = time.monotonic() + timeout, _POLL
        while True:
            pipe = self._redis.pipeline(transaction=False)
            if names:
                for name in names:
                    for key in (k.queued, k.active, k.due, k.failed):
                        pipe.zscore(key, name)
            else:
                pipe.zscore(k.users, escape(user))
            found = await _scripts.execute(pipe, [k.queued])
            if names:
                open_ = [s is not None for i, s in enumerate(found) if i % 4 != 3]
                failed = [(n, s) for n, s in zip(names, found[3::4], strict=True) if s is not None]
            else:
                open_, failed = [bool(found[0])], []
            if not any(open_):
                for name, _ in failed:  # its last job is a dead letter (not retried since)
                    raise GenerationError(await self._dead_reason(app, shard, name))
                return
            left = deadline - time.monotonic()
            if left <= 0:
                whose = f"session {session_id!r}" if session_id is not None else "the user"
                raise GenerationTimeoutError(
                    f"after {timeout:g} s, jobs of {whose} (user {user!r}, app {app!r}) are "
                    "still queued, deferred or running; they go on"
                )
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, _POLL_MAX)

    async def _dead_reason(self, app: str, shard: int, name: str) -> str:
        for letter in await self.dead_letters(app, shards=[shard]):
            if JobKeys.member(letter.kind[0], letter.user, letter.session_id) == name:
                return (
                    f"background generation for session {letter.session_id!r} of user "
                    f"{letter.user!r} failed {letter.attempts} times and is in the dead "
                    f"letters ({letter.id}): {letter.error}"
                )
        return f"background generation of {name!r} failed and is in the dead letters"

    # -- workers --------------------------------------------------------------------------

    def job_keys(self, job: Job) -> tuple[JobKeys, str, str, str]:
        """The shard's keys, the job's events list and options, and its user's lease."""
        k = self.keys.jobs(job.app, job.shard)
        events = self.keys.job_events(job.app, job.shard, job.user, job.session_id)
        options = self.keys.job_options(job.app, job.shard, job.name)
        return k, events, options, self.keys.job_lease(job.app, job.shard, job.user)

    async def start(self, job: Job, token: str, lease_ms: int) -> Started:
        k, events, options, lease = self.job_keys(job)
        call = JobsStart(
            k.jobs, k.queued, k.active, k.tries, lease, events, options, job.name, job.entry,
            token, lease_ms, _now_ms(), EVENTS_PER_JOB, int(job.claimed),
        )  # fmt: skip
        return await _scripts.run(self._start_script, call)

    async def finish(
        self,
        job: Job,
        token: str,
        outcome: Finish,
        *,
        read: int = 0,
        error: str = "",
        attempts: int = 5,
        retry_ms: int = 1000,
    ) -> str:
        k, events, options, lease = self.job_keys(job)
        call = JobsFinish(
            k.jobs, k.queued, k.active, k.again, k.due, k.users, k.marks, k.tries, k.failed,
            k.dead, k.dropped, events, lease, options, job.name, escape(job.user), job.entry,
            GROUP, token, _now_ms(), outcome, read, error[:2000], attempts, retry_ms,
            DEAD_LETTERS_KEPT,
        )  # fmt: skip
        return text(await _scripts.run(self._finish_script, call))

    async def touch(self, job: Job, consumer: str, token: str, lease_ms: int) -> bool:
        k, _, _, lease = self.job_keys(job)
        call = JobsTouch(k.jobs, lease, GROUP, consumer, job.entry, token, lease_ms)
        return await _scripts.run(self._touch_script, call) == 1

    async def sweep(self, app: str, shard: int, limit: int = 100) -> int:
        """Deferred jobs of the shard whose time has come, into the stream."""
        k = self.keys.jobs(app, shard)
        call = JobsDue(k.jobs, k.queued, k.active, k.again, k.due, _now_ms(), limit, [])
        return await _scripts.run(self._due_script, call)

    # -- operators ------------------------------------------------------------------------

    async def backlog(self, app: str) -> list[ShardBacklog]:
        """Each shard's counts, in one pipeline."""
        pipe = self._redis.pipeline(transaction=False)
        shards = [self.keys.jobs(app, n) for n in range(JobKeys.SHARDS)]
        for k in shards:
            pipe.zcard(k.queued)
            pipe.zcard(k.active)
            pipe.zcard(k.due)
            pipe.zrange(k.queued, 0, 0, withscores=True)
            pipe.xlen(k.dead)
            pipe.get(k.dropped)
        replies = await _scripts.execute(pipe, [k.queued for k in shards for _ in range(6)])
        pending = await asyncio.gather(*(self._pending(k.jobs) for k in shards))
        now, out = time.time(), []
        for n, at in enumerate(range(0, len(replies), 6)):
            queued, active, due, oldest, dead, dropped = replies[at : at + 6]
            out.append(
                ShardBacklog(
                    app, n, int(queued), int(active), int(due), pending[n],
                    max(0.0, now - oldest[0][1] / 1000) if oldest else None,
                    int(dead), int(dropped or 0),
                )
            )  # fmt: skip
        return out

    async def _pending(self, stream: str) -> int:
        try:
            summary = await self._redis.xpending(stream, GROUP)
        except Exception as exc:  # no stream, or no group yet: nothing was ever read
            if "NOGROUP" in str(exc) or "no such key" in str(exc):
                return 0
            raise
        return int(summary["pending"])

    async def dead_letters(
        self, app: str, *, shards: Sequence[int] | None = None, limit: int = 1000
    ) -> list[DeadLetter]:
        """The app's dead letters, oldest first (at most ``limit`` per shard)."""
        out = []
        for n in range(JobKeys.SHARDS) if shards is None else shards:
            for entry, raw in await self._redis.xrange(self.keys.jobs(app, n).dead, count=limit):
                fields = {text(f): text(v) for f, v in raw.items()}
                name = fields.get("job", "?:?:?")
                kind, user, sid = [*name.split(":"), "", "", ""][:3]
                out.append(
                    DeadLetter(
                        f"{n}/{text(entry)}", app, unescape(user), unescape(sid),
                        "events" if kind == "e" else "session", fields.get("error", ""),
                        int(fields.get("attempts", "0")), int(fields.get("at", "0")) / 1000,
                    )
                )  # fmt: skip
        return out

    async def answer_letter(self, app: str, letter_id: str, action: str) -> DeadLetter | None:
        """Retry or drop one dead letter; None when there is none of that id."""
        shard_, _, entry = letter_id.partition("/")
        if not shard_.isdigit() or int(shard_) >= JobKeys.SHARDS or not entry:
            return None
        shard = int(shard_)
        found = [d for d in await self.dead_letters(app, shards=[shard]) if d.id == letter_id]
        if not found:
            return None
        letter, k = found[0], self.keys.jobs(app, shard)
        name = JobKeys.member(letter.kind[0], letter.user, letter.session_id)
        call = JobsLetter(
            k.jobs, k.queued, k.active, k.again, k.due, k.users, k.failed, k.dead, k.marks,
            self.keys.job_events(app, shard, letter.user, letter.session_id),
            self.keys.job_options(app, shard, name), entry, action, _now_ms(), name,
        )  # fmt: skip
        return letter if await _scripts.run(self._letter_script, call) else None


def _now_ms() -> int:
    return int(time.time() * 1000)
