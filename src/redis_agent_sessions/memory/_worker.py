"""FactWorker: runs background generation's jobs (memory/_jobs.py) in the caller's process.

It reads jobs with its consumer group (``XREADGROUP``), a few at a time (no more than it has
free slots: the others stay for other workers), and takes over those of a worker that
stopped answering for ``visibility_timeout`` (``XAUTOCLAIM``). While it holds a job it says
so every third of that time, so no other worker claims it. Each job takes its user's lease
first (no two workers generate for one user at once; the facts' compare-and-set stays the
guarantee), runs ``Consolidator`` as an inline call would (each step applied atomically, the
watermark moved with it) and only then is acknowledged: a worker killed mid-job leaves it
to be claimed again, and what it had applied is not applied twice (the watermark says so).

A job that fails is tried again after a pause that doubles; after ``max_attempts`` it goes to
the dead letters with its last error, and the user's other jobs go on. Nothing here polls
faster than ``poll_interval``, and an idle worker slows its polling down to a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import check_id, text
from redis_agent_sessions._redis.jobs_calls import Started
from redis_agent_sessions._redis.lost import raise_if_cancelled
from redis_agent_sessions.errors import InvalidInputError, PermissionDeniedError
from redis_agent_sessions.keys import JobKeys, unescape
from redis_agent_sessions.memory._consolidate import Consolidator
from redis_agent_sessions.memory._generators import MemoryGenerator
from redis_agent_sessions.memory._jobs import GROUP, Job
from redis_agent_sessions.memory._request_options import RequestOptions
from redis_agent_sessions.memory._service import MemoryServiceBase
from redis_agent_sessions.models import Event, Session

__all__ = ["FactWorker"]

_log = logging.getLogger("redis_agent_sessions.facts")
_APPS_EVERY = 30.0
"""Seconds between looks at the app registry (workers not given their apps)."""
_IDLE_POLL = 1.0
_LOST = (RedisConnectionError, RedisTimeoutError, OSError)


class FactWorker:
    """Runs background generation's jobs until [`stop`][] (or SIGTERM, from the CLI).

    Args:
        memory: the memory service whose requests it runs (its client, key prefix, fact
            settings and generator).
        generator: the model to run (default: the service's).
        concurrency: jobs at once (each is mostly a model's call: waiting).
        apps: the apps whose jobs it runs (default: every app in the session store's
            registry, looked at again every 30 s).
        visibility_timeout: seconds after which a job of a worker that stopped answering
            is taken over (a living worker says it holds its jobs every third of it).
        max_attempts: attempts before a job goes to the dead letters.
        retry_delay: seconds before the first retry; each next one waits twice as long
            (at most 5 minutes).
        poll_interval: seconds between looks for new jobs while busy (up to 1 s idle).
        sweep_interval: seconds between moves of deferred jobs that are due (triggers,
            retries) into the streams.
        grace: seconds [`stop`][] lets running jobs finish; then they are released
            (queued again for another worker).
        backlog_interval: seconds between its reads of its apps' queues for the telemetry
            gauges ``facts.jobs.backlog`` and ``facts.jobs.oldest_age`` (telemetry on only).
    """

    def __init__(
        self,
        memory: MemoryServiceBase[Any, Any, Any, Any],
        *,
        generator: MemoryGenerator | None = None,
        concurrency: int = 4,
        apps: Sequence[str] | None = None,
        visibility_timeout: float = 60.0,
        max_attempts: int = 5,
        retry_delay: float = 1.0,
        poll_interval: float = 0.1,
        sweep_interval: float = 1.0,
        grace: float = 30.0,
        backlog_interval: float = 15.0,
    ) -> None:
        engine = memory._memory
        self._generator = generator or engine.generator
        if not isinstance(self._generator, MemoryGenerator):
            raise InvalidInputError("a FactWorker needs a generator (its own or the service's)")
        numbers: dict[str, object] = {"concurrency": concurrency, "max_attempts": max_attempts}
        numbers |= {"visibility_timeout": visibility_timeout, "retry_delay": retry_delay}
        numbers |= {"poll_interval": poll_interval, "sweep_interval": sweep_interval}
        numbers |= {"backlog_interval": backlog_interval}
        for name, value in numbers.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InvalidInputError(f"{name} must be positive: {value!r}")
        self._engine = engine
        self._client = engine.client
        self._queue = engine.jobs
        self._keys = engine.keys
        self._apps = None if apps is None else [check_id("app_name", a) for a in apps]
        self.concurrency = int(concurrency)
        self.visibility_ms = int(visibility_timeout * 1000)
        self.max_attempts = int(max_attempts)
        self._retry = retry_delay
        self._poll = poll_interval
        self._sweep_every = sweep_interval
        self._grace = grace
        self._backlog_every = backlog_interval
        self.name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        """This worker's consumer name in the group (and its lease tokens' start)."""
        self.counts: Counter[str] = Counter()
        """Jobs ended, by outcome: done, retry, dead, gone, released; and claimed, and
        waited (for another job of their user)."""
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._held: dict[Job, str] = {}
        self._shards: list[tuple[str, int]] = []
        self._grouped: set[tuple[str, int]] = set()
        """The shards whose consumer group this worker made (or found)."""
        self._next = 0
        self._fatal: PermissionDeniedError | None = None

    async def __aenter__(self) -> FactWorker:
        self._task = asyncio.create_task(self.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()
        await self._task

    def stop(self) -> None:
        """Stop taking jobs; [`run`][] returns once the running ones finished (or, after
        ``grace``, were released). Safe from a signal handler."""
        self._stopping.set()
        self._wake.set()

    async def run(self) -> None:
        """Run jobs until [`stop`][]."""
        tasks: set[asyncio.Task[None]] = set()
        beat = asyncio.create_task(self._heartbeat())
        # Its own task: the loop below sleeps while every slot is busy, which is when the
        # backlog matters most.
        watch = asyncio.create_task(self._watch_backlog())
        next_apps = next_sweep = next_claim = 0.0
        pause = self._poll
        try:
            while not self._stopping.is_set():
                now = time.monotonic()
                try:
                    if now >= next_apps:
                        await self._discover()
                        next_apps = now + _APPS_EVERY
                    if now >= next_sweep:
                        await self._sweep()
                        next_sweep = now + self._sweep_every
                    free = self.concurrency - len(tasks)
                    found: list[Job] = []
                    if free > 0 and now >= next_claim:
                        found = await self._claim(free)
                        next_claim = now + self.visibility_ms / 2000
                    if free > len(found):
                        found += await self._read(free - len(found))
                except NoPermissionError as exc:
                    self._refused(_scripts.permission_error(exc, None))
                    break
                except PermissionDeniedError as exc:
                    self._refused(exc)
                    break
                except (*_LOST, ResponseError) as exc:
                    _log.warning("facts worker %s: %s; trying again", self.name, exc)
                    next_apps, found = 0.0, []  # groups made again (a stream may be gone)
                    self._grouped.clear()
                for job in found:
                    task = asyncio.create_task(self._run_job(job))
                    tasks.add(task)
                    task.add_done_callback(self._ended(tasks))
                if found:
                    pause = self._poll
                    if len(tasks) < self.concurrency:
                        continue  # there may be more
                self._wake.clear()
                wait = pause if len(tasks) < self.concurrency else None
                try:
                    await asyncio.wait_for(self._wake.wait(), wait)
                except asyncio.TimeoutError:
                    pause = min(pause * 2, _IDLE_POLL)
        finally:
            await self._drain(tasks)
            beat.cancel()
            # Told to stop, not only cancelled: a cancellation that lands inside a redis-py
            # call can be swallowed there (seen with fakeredis), and the watch would go on.
            self._stopping.set()
            watch.cancel()
            await asyncio.gather(beat, watch, return_exceptions=True)
            await self._leave()
            if self._engine.telemetry is not None:
                self._engine.telemetry.backlog(self.name, [])  # its readings end with it
        if self._fatal is not None:
            raise self._fatal

    def _ended(self, tasks: set[asyncio.Task[None]]) -> Any:
        def ended(task: asyncio.Task[None]) -> None:
            tasks.discard(task)
            self._wake.set()

        return ended

    async def _drain(self, tasks: set[asyncio.Task[None]]) -> None:
        """Running jobs finish within ``grace``; the others are released."""
        if tasks:
            _, late = await asyncio.wait(set(tasks), timeout=self._grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    # -- finding jobs ---------------------------------------------------------------------

    async def _discover(self) -> None:
        """The apps' shards, each stream's consumer group made (from its first entry)."""
        apps = self._apps
        if apps is None:
            apps = [unescape(text(a)) for a in await self._client.zrange(self._keys.apps(), 0, -1)]
        if not apps and not self._shards:
            _log.warning(
                "facts worker %s: no app in the registry %s yet (an app that only adds "
                "events must be named: apps=, --app)", self.name, self._keys.apps(),
            )  # fmt: skip
        shards = [(app, n) for app in apps for n in range(JobKeys.SHARDS)]
        for app, n in shards:
            if (app, n) in self._grouped:
                continue
            try:
                await self._client.xgroup_create(
                    self._keys.jobs(app, n).jobs, GROUP, id="0", mkstream=True
                )
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            self._grouped.add((app, n))
        self._shards = shards

    async def _read(self, free: int) -> list[Job]:
        """Up to ``free`` new jobs: one from each of ``free`` shards at once (taken in turn,
        after the last ones read: a busy shard does not starve the others), again from the
        next shards while slots stay free. Never more than there are free slots: what this
        worker does not run now stays for the others."""
        found: list[Job] = []
        count, tried = len(self._shards), 0
        while len(found) < free and tried < count:
            take = min(free - len(found), count - tried)
            picked = [self._shards[(self._next + tried + i) % count] for i in range(take)]
            tried += take
            for job in await asyncio.gather(*(self._one(app, n) for app, n in picked)):
                found += [job] if job is not None else []
        self._next = (self._next + tried) % max(1, count)
        return found

    async def _one(self, app: str, shard: int) -> Job | None:
        stream = self._keys.jobs(app, shard).jobs
        reply = await self._client.xreadgroup(GROUP, self.name, {stream: ">"}, count=1)
        for _, entries in reply or []:
            for entry, fields in entries:
                return self._job(app, shard, entry, fields)
        return None

    async def _claim(self, free: int) -> list[Job]:
        """Jobs of workers that stopped answering for the visibility timeout."""
        found: list[Job] = []
        for app, n in self._shards:
            if len(found) >= free:
                break
            reply = await self._client.xautoclaim(
                self._keys.jobs(app, n).jobs, GROUP, self.name, self.visibility_ms,
                start_id="0-0", count=free - len(found),
            )  # fmt: skip
            found += [self._job(app, n, e, f, claimed=True) for e, f in reply[1] if f]
        self.counts["claimed"] += len(found)
        return found

    @staticmethod
    def _job(app: str, shard: int, entry: Any, fields: Any, claimed: bool = False) -> Job:
        found = {text(f): text(v) for f, v in fields.items()}
        return Job(app, shard, text(entry), found.get("job", ""), claimed, found.get("trace", ""))

    async def _sweep(self) -> None:
        await asyncio.gather(*(self._queue.sweep(app, n) for app, n in self._shards))

    async def _watch_backlog(self) -> None:
        """Every ``backlog_interval``, its apps' queues, for the telemetry gauges (telemetry
        on). A refused or failed read is logged and the gauges keep the last: telemetry
        never stops the jobs."""
        telemetry = self._engine.telemetry
        while telemetry is not None and not self._stopping.is_set():
            found = []
            try:
                for app in dict.fromkeys(app for app, _ in self._shards):
                    found += await self._queue.backlog(app)
            except (RedisError, PermissionDeniedError) as exc:
                raise_if_cancelled()
                _log.warning("facts worker %s: reading the backlog: %s", self.name, exc)
            else:
                if self._shards:
                    telemetry.backlog(self.name, found)
            # Soon again while the run loop has not found its apps yet.
            pause = self._backlog_every if self._shards else self._poll
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), pause)

    # -- running a job --------------------------------------------------------------------

    async def _run_job(self, job: Job) -> None:
        token = f"{self.name}/{job.entry}"
        self._held[job] = token
        try:
            started = await self._start(job, token)
            telemetry = self._engine.telemetry
            if started is not None and telemetry is None:
                await self._consolidate(job, token, started)
            elif started is not None:
                # Its own trace, linked to the request's (which ended long ago).
                lag = time.time() - started.queued_ms / 1000 if started.queued_ms else 0.0
                about = {
                    "app_name": job.app,
                    "job.kind": job.kind,
                    "job.attempts": started.attempts,
                }
                with telemetry.job(job.trace, lag, about):
                    await self._consolidate(job, token, started)
        except asyncio.CancelledError:
            # Past the grace: queued again for another worker (what it applied stays, and
            # the watermark keeps it from being applied twice).
            await asyncio.shield(self._end(job, token, "release"))
            raise
        except _LOST as exc:
            # Left pending: claimed again after the visibility timeout (by any worker).
            _log.warning("facts worker %s: job %s: %s", self.name, job.name, exc)
        except PermissionDeniedError as exc:
            self._refused(exc)  # left pending, as above
        except NoPermissionError as exc:
            self._refused(_scripts.permission_error(exc, None))
        finally:
            self._held.pop(job, None)

    def _refused(self, exc: PermissionDeniedError) -> None:
        """The ACL user lacks a command: no job can run; [`run`][] stops and raises it."""
        if self._fatal is None:
            self._fatal = exc
        self.stop()

    async def _start(self, job: Job, token: str) -> Started | None:
        """Started (failed attempts, its events, the ms it was queued at, 0: not known, and
        its options); None when there is nothing to run."""
        for attempt in range(1_000_000):
            started = await self._queue.start(job, token, self.visibility_ms)
            if started.status == -1:
                await self._ack(job)  # ended meanwhile by a worker that claimed it
                return None
            if started.status == 1:
                return started
            if self._stopping.is_set():
                await self._end(job, token, "release")
                return None
            # Another job of the user is running: wait for its end. The pause grows only to
            # a tenth of a second: a longer one would idle this slot past that end.
            self.counts["waited"] += attempt == 0
            await asyncio.sleep(random.uniform(0.5, 1) * min(0.1, 0.01 * 2**attempt))
        return None

    async def _consolidate(self, job: Job, token: str, started: Started) -> None:
        tries, raw = started.attempts, list(started.events)
        if job.claimed and tries >= self.max_attempts:
            error = f"its worker stopped answering during {tries} attempts"
            await self._end(job, token, "dead", error=error)
            return
        try:
            options = RequestOptions.from_json(started.options)
            learner = await self._engine.writes.learner(job.app, job.user, self._generator)
            assert isinstance(learner, Consolidator)
            if job.kind == "e":
                # Given twice before a worker came: read once, as inline calls would.
                given: dict[str, Event] = {}
                for event in map(Event.model_validate_json, raw):
                    given.setdefault(event.id, event)
                events = list(given.values())
                await learner.events(job.app, job.user, job.session_id, events, options)
                await self._end(job, token, "done", read=len(raw))
                return
            session = await self._stored(job)
            if session is None:
                await self._end(job, token, "gone")
                return
            await learner.session(job.app, job.user, session, options)
        except (asyncio.CancelledError, PermissionDeniedError, *_LOST):
            raise
        except Exception as exc:  # a model's failure, a bad answer, corrupt data: retried
            error = f"{type(exc).__name__}: {exc}"
            _log.warning("facts worker %s: job %s failed: %s", self.name, job.name, error)
            delay = min(300.0, self._retry * 2**tries)
            await self._end(job, token, "failed", error=error, retry_ms=int(delay * 1000))
            return
        # The event-count trigger counts from here; without it, no mark is kept.
        marked = self._engine.fact_settings.trigger_events is not None
        await self._end(job, token, "done", read=len(session.events) if marked else -1)

    async def _stored(self, job: Job) -> Session | None:
        """The session as the session store has it (None: it is not there)."""
        k = self._keys.session(job.app, job.user, job.session_id)
        pipe = self._client.pipeline(transaction=False)
        pipe.exists(k.meta)
        pipe.xrange(k.events)
        exists, entries = await _scripts.execute(pipe, [k.meta, k.events])
        if not exists:
            return None
        events = [
            Event.model_validate_json(v)
            for _, fields in entries
            for f, v in fields.items()
            if text(f) == "event"
        ]
        return Session(id=job.session_id, app_name=job.app, user_id=job.user, events=events)

    async def _end(self, job: Job, token: str, outcome: Any, **details: Any) -> None:
        said = await self._queue.finish(job, token, outcome, attempts=self.max_attempts, **details)
        self.counts[said] += 1
        if self._engine.telemetry is not None:
            self._engine.telemetry.count("facts.jobs", outcome=said)
        if said == "dead":
            _log.error("facts worker %s: job %s is in the dead letters", self.name, job.name)

    async def _ack(self, job: Job) -> None:
        await self._client.xack(self._keys.jobs(job.app, job.shard).jobs, GROUP, job.entry)

    # -- holding and leaving --------------------------------------------------------------

    async def _heartbeat(self) -> None:
        """Every third of the visibility timeout: this worker still holds its jobs."""
        while True:
            await asyncio.sleep(self.visibility_ms / 3000)
            # A cancel the cluster client's retry swallowed leaves only this trace (see
            # EventStream's watch); sleeping again would not raise it.
            raise_if_cancelled()
            for job, token in list(self._held.items()):
                try:
                    await self._queue.touch(job, self.name, token, self.visibility_ms)
                except PermissionDeniedError as exc:
                    self._refused(exc)
                except RedisError as exc:
                    # Cancelled when the worker stops: redis-py may have made that a timeout.
                    raise_if_cancelled()
                    _log.warning("facts worker %s: heartbeat: %s", self.name, exc)

    async def _leave(self) -> None:
        """Leave the groups where this worker holds nothing (a killed worker's name stays,
        harmless, until a worker that claims its jobs has taken them all)."""
        for app, n in self._shards:
            stream = self._keys.jobs(app, n).jobs
            try:
                held = await self._client.xpending_range(
                    stream, GROUP, min="-", max="+", count=1, consumername=self.name
                )
                if not held:
                    await self._client.xgroup_delconsumer(stream, GROUP, self.name)
            except NoPermissionError as exc:
                self._refused(_scripts.permission_error(exc, stream))
            except RedisError as exc:
                _log.warning("facts worker %s: leaving %s: %s", self.name, stream, exc)
