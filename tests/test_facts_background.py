"""Background generation: requests recorded as jobs in Redis Streams, run by FactWorkers.

On fakeredis (also checking that every script stays in one hash slot, as a cluster
demands), Redis 7, Redis 8.2 with search, Valkey and both clusters: a request returns
without the model; a worker applies it; requests for a queued session coalesce; waiting;
events given one by one; a poison job reaches the dead letters while other users' jobs
finish, and a retry applies it; a deleted session's job is dropped and counted; the backlog's
bound refuses with a typed error and writes nothing; both triggers; a dead worker's job is
claimed after the visibility timeout; no two jobs of one user run at once.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis
from redis.exceptions import TimeoutError as RedisTimeoutError

from _acl import acl_user, readme_rules
from _backends import backend, pick
from redis_agent_sessions import (
    BacklogFullError,
    Content,
    Event,
    FactJobs,
    FactSettings,
    FactWorker,
    GenerationError,
    GenerationRequest,
    GenerationTimeoutError,
    InvalidInputError,
    MemoryOperation,
    Part,
    PermissionDeniedError,
    RedisMemoryService,
    RedisSessionService,
    Session,
)
from redis_agent_sessions.keys import JobKeys, KeySpace
from redis_agent_sessions.memory._jobs import GROUP, Job

APP = "bg_app"
KEYS = KeySpace()
QUICK = {"poll_interval": 0.01, "sweep_interval": 0.02, "retry_delay": 0.01}
"""A worker's pace in these tests: every wait is short."""
WAIT = 20.0
"""The most a wait_for_generation may take here (a failing test, not a timing)."""


@pytest.fixture(
    params=pick("fake", "fake-slots", "real", "search", "cluster", "valkey", "valkey-cluster")
)
async def client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    async with backend(request.param, monkeypatch) as opened:
        yield opened


class Model:
    """A scripted model: one fact per event ("said <text>"), recording its calls; a user in
    ``poison`` makes it fail, and ``hold`` keeps every call waiting until set."""

    def __init__(self, poison: Sequence[str] = (), slow: float = 0.01) -> None:
        self.slow = slow
        self.requests: list[GenerationRequest] = []
        self.poison = set(poison)
        self.hold: asyncio.Event | None = None
        self.called = asyncio.Event()
        self.running: dict[str, int] = {}
        self.most_at_once = 0

    async def generate(self, request: GenerationRequest) -> list[MemoryOperation]:
        self.requests.append(request)
        self.called.set()
        user = request.user_id
        self.running[user] = self.running.get(user, 0) + 1
        self.most_at_once = max(self.most_at_once, self.running[user])
        try:
            if self.hold is not None:
                await self.hold.wait()
            await asyncio.sleep(self.slow)
            if user in self.poison:
                raise RuntimeError(f"the model cannot answer for {user}")
            return [
                MemoryOperation(action="add", fact=f"said {e.content.text}")
                for e in request.events
                if e.content is not None
            ]
        finally:
            self.running[user] -= 1


def said(text: str) -> Event:
    return Event(author="user", content=Content(role="user", parts=[Part(text=text)]))


def services(
    client: Any, model: Model, backend: Any = "auto", **settings: Any
) -> tuple[RedisSessionService, RedisMemoryService]:
    facts = FactSettings(mode="background", **settings)
    memory = RedisMemoryService(client, generator=model, facts=facts, backend=backend)
    return RedisSessionService(client), memory


async def session_with(sessions: RedisSessionService, user: str, *texts: str) -> Session:
    session = await sessions.create_session(app_name=APP, user_id=user)
    for words in texts:
        await sessions.append_event(session, said(words))
    return session


async def facts(memory: RedisMemoryService, user: str) -> list[str]:
    return sorted(f.text for f in await memory.list_facts(app_name=APP, user_id=user))


async def open_jobs(memory: RedisMemoryService) -> list[tuple[int, int, int, int]]:
    """(queued, active, deferred, pending) of every shard that has any."""
    found = await FactJobs(memory).backlog(APP)
    return [(b.queued, b.active, b.deferred, b.pending) for b in found if b.queued or b.active
            or b.deferred or b.pending]  # fmt: skip


async def test_a_request_is_a_job_that_a_worker_applies_once(client: Any) -> None:
    model = Model()
    sessions, memory = services(client, model)
    session = await session_with(sessions, "ann", "I like tea")
    await memory.add_session_to_memory(session)
    for words in ("I like jazz", "I like rain"):
        await sessions.append_event(session, said(words))
        await memory.add_session_to_memory(session)  # the queued job reads them all
    assert model.requests == []
    assert await facts(memory, "ann") == []
    assert await open_jobs(memory) == [(1, 0, 0, 0)]

    async with FactWorker(memory, **QUICK) as worker:
        await memory.wait_for_generation(
            app_name=APP, user_id="ann", session_id=session.id, timeout=WAIT
        )
    assert await facts(memory, "ann") == ["said I like jazz", "said I like rain", "said I like tea"]
    assert len(model.requests) == 1
    assert worker.counts["done"] == 1
    assert await open_jobs(memory) == []
    mark = await client.get(KEYS.memory_watermark(APP, "ann", session.id))
    assert mark.decode().startswith("3\t")


async def test_events_given_one_by_one_wait_beside_their_job(client: Any) -> None:
    model = Model()
    _, memory = services(client, model)
    first, second = said("I like tea"), said("I like jazz")
    await memory.add_events_to_memory(app_name=APP, user_id="bo", events=[first], session_id="s")
    await memory.add_events_to_memory(
        app_name=APP, user_id="bo", events=[first, second], session_id="s"
    )
    assert model.requests == []
    # No session of the app was ever created: the app is not in the registry, so named.
    async with FactWorker(memory, apps=[APP], **QUICK):
        await memory.wait_for_generation(app_name=APP, user_id="bo", timeout=WAIT)
    # The event given twice was read once: the session's read set says so.
    assert await facts(memory, "bo") == ["said I like jazz", "said I like tea"]
    assert [len(r.events) for r in model.requests] == [2]
    shard = KEYS.job_shard(APP, "bo")
    assert not await client.exists(KEYS.job_events(APP, shard, "bo", "s"))


async def test_waiting_without_a_worker_times_out_with_a_typed_error(client: Any) -> None:
    sessions, memory = services(client, Model())
    session = await session_with(sessions, "cy", "I like tea")
    await memory.add_session_to_memory(session)
    with pytest.raises(GenerationTimeoutError, match="still queued"):
        await memory.wait_for_generation(
            app_name=APP, user_id="cy", session_id=session.id, timeout=0.1
        )
    with pytest.raises(TimeoutError):  # also a builtin TimeoutError
        await memory.wait_for_generation(app_name=APP, user_id="cy", timeout=0)
    # Nothing queued for another session or user: no wait at all.
    await memory.wait_for_generation(app_name=APP, user_id="cy", session_id="other", timeout=0)
    await memory.wait_for_generation(app_name=APP, user_id="nobody", timeout=0)


async def test_a_poison_job_goes_to_the_dead_letters_and_a_retry_applies_it(client: Any) -> None:
    model = Model(poison=["bad"])
    sessions, memory = services(client, model)
    bad = await session_with(sessions, "bad", "I like poison")
    good = await session_with(sessions, "good", "I like tea")
    await memory.add_session_to_memory(bad)
    await memory.add_session_to_memory(good)
    async with FactWorker(memory, max_attempts=3, **QUICK) as worker:
        await memory.wait_for_generation(
            app_name=APP, user_id="good", session_id=good.id, timeout=WAIT
        )
        with pytest.raises(GenerationError, match=r"dead letters.*cannot answer for bad"):
            await memory.wait_for_generation(
                app_name=APP, user_id="bad", session_id=bad.id, timeout=WAIT
            )
    assert await facts(memory, "good") == ["said I like tea"]
    assert await facts(memory, "bad") == []
    assert worker.counts["retry"] == 2
    assert worker.counts["dead"] == 1
    jobs = FactJobs(memory)
    [letter] = await jobs.dead_letters(APP)
    assert (letter.user, letter.session_id, letter.kind) == ("bad", bad.id, "session")
    assert letter.attempts == 3
    assert "RuntimeError: the model cannot answer for bad" in letter.error

    model.poison.clear()  # the model is fixed: the operator retries
    assert (await jobs.retry(APP, letter.id)).id == letter.id
    assert await jobs.dead_letters(APP) == []
    with pytest.raises(InvalidInputError, match="no dead letter"):
        await jobs.retry(APP, letter.id)
    async with FactWorker(memory, **QUICK):
        await memory.wait_for_generation(
            app_name=APP, user_id="bad", session_id=bad.id, timeout=WAIT
        )
    assert await facts(memory, "bad") == ["said I like poison"]
    assert await open_jobs(memory) == []


async def test_a_dead_letter_can_be_dropped(client: Any) -> None:
    _, memory = services(client, Model(poison=["bad"]))
    await memory.add_events_to_memory(
        app_name=APP, user_id="bad", events=[said("I like poison")], session_id="s"
    )
    async with FactWorker(memory, max_attempts=1, apps=[APP], **QUICK):
        with pytest.raises(GenerationError):
            await memory.wait_for_generation(app_name=APP, user_id="bad", session_id="s")
    jobs = FactJobs(memory)
    [letter] = await jobs.dead_letters(APP)
    assert letter.kind == "events"
    shard = KEYS.job_shard(APP, "bad")
    assert await client.exists(KEYS.job_events(APP, shard, "bad", "s"))
    await jobs.drop(APP, letter.id)
    assert await jobs.dead_letters(APP) == []
    assert not await client.exists(KEYS.job_events(APP, shard, "bad", "s"))
    assert not await client.zscore(KEYS.jobs(APP, shard).marks, JobKeys.member("e", "bad", "s"))


async def test_a_job_whose_session_is_gone_is_dropped_and_counted(client: Any) -> None:
    model = Model()
    sessions, memory = services(client, model)
    session = await session_with(sessions, "di", "I like tea")
    await memory.add_session_to_memory(session)
    await sessions.delete_session(app_name=APP, user_id="di", session_id=session.id)
    never = Session(id="never-stored", app_name=APP, user_id="di", events=[said("hi")])
    await memory.add_session_to_memory(never)
    async with FactWorker(memory, **QUICK) as worker:
        await memory.wait_for_generation(app_name=APP, user_id="di", timeout=WAIT)
    assert model.requests == []
    assert worker.counts["gone"] == 2
    assert sum(b.dropped for b in await FactJobs(memory).backlog(APP)) == 2


async def test_the_backlog_is_bounded_and_refuses_without_writing(client: Any) -> None:
    sessions, memory = services(client, Model(), max_backlog=JobKeys.SHARDS)  # 1 per shard
    first = await session_with(sessions, "ed", "I like tea")
    second = await session_with(sessions, "ed", "I like jazz")
    await memory.add_session_to_memory(first)
    await memory.add_session_to_memory(first)  # coalesced: no new job
    shard = KEYS.job_shard(APP, "ed")
    before = await client.xlen(KEYS.jobs(APP, shard).jobs)
    with pytest.raises(BacklogFullError, match="full for user 'ed'"):
        await memory.add_session_to_memory(second)
    with pytest.raises(BacklogFullError):
        await memory.add_events_to_memory(
            app_name=APP, user_id="ed", events=[said("x")], session_id="s"
        )
    assert await client.xlen(KEYS.jobs(APP, shard).jobs) == before
    assert not await client.exists(KEYS.job_events(APP, shard, "ed", "s"))
    assert await open_jobs(memory) == [(1, 0, 0, 0)]


async def test_the_event_count_trigger_waits_for_enough_new_events(client: Any) -> None:
    model = Model()
    sessions, memory = services(client, model, trigger_events=3)
    session = await session_with(sessions, "fay", "one")
    await memory.add_session_to_memory(session)
    await sessions.append_event(session, said("two"))
    await memory.add_session_to_memory(session)
    assert await open_jobs(memory) == [(0, 0, 1, 0)]  # deferred
    async with FactWorker(memory, **QUICK):
        await asyncio.sleep(0.1)
        assert model.requests == []
        await sessions.append_event(session, said("three"))
        await memory.add_session_to_memory(session)  # 3 new events: due
        await memory.wait_for_generation(
            app_name=APP, user_id="fay", session_id=session.id, timeout=WAIT, flush=False
        )
        assert await facts(memory, "fay") == ["said one", "said three", "said two"]
        await sessions.append_event(session, said("four"))
        await memory.add_session_to_memory(session)  # 1 new: deferred again
        await asyncio.sleep(0.1)
        assert len(model.requests) == 1
        # A flush makes it due: "remember this now".
        await memory.wait_for_generation(
            app_name=APP, user_id="fay", session_id=session.id, timeout=WAIT
        )
    assert await facts(memory, "fay") == ["said four", "said one", "said three", "said two"]


async def test_the_idle_trigger_runs_a_session_left_alone(client: Any) -> None:
    model = Model()
    sessions, memory = services(client, model, trigger_idle_seconds=0.3)
    session = await session_with(sessions, "gus", "I like tea")
    await memory.add_session_to_memory(session)
    async with FactWorker(memory, **QUICK):
        await asyncio.sleep(0.05)
        await memory.add_session_to_memory(session)  # puts it off again
        assert model.requests == []
        await memory.wait_for_generation(
            app_name=APP, user_id="gus", session_id=session.id, timeout=WAIT, flush=False
        )
    assert await facts(memory, "gus") == ["said I like tea"]


async def test_a_dead_workers_job_is_claimed_after_the_visibility_timeout(client: Any) -> None:
    model = Model()
    sessions, memory = services(client, model)
    session = await session_with(sessions, "hal", "I like tea")
    await memory.add_session_to_memory(session)
    shard = KEYS.job_shard(APP, "hal")
    stream = KEYS.jobs(APP, shard).jobs
    # A worker read the job and died before starting it (it holds it in the group).
    await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    assert await client.xreadgroup(GROUP, "dead-worker", {stream: ">"}, count=1)
    async with FactWorker(memory, visibility_timeout=0.3, **QUICK) as worker:
        await memory.wait_for_generation(
            app_name=APP, user_id="hal", session_id=session.id, timeout=WAIT
        )
    assert worker.counts["claimed"] == 1
    assert await facts(memory, "hal") == ["said I like tea"]
    assert (await client.xpending(stream, GROUP))["pending"] == 0


async def test_no_two_jobs_of_one_user_run_at_once(client: Any) -> None:
    model = Model()
    sessions, memory = services(client, model)
    for i in range(3):
        await memory.add_session_to_memory(await session_with(sessions, "ivy", f"I like {i}"))
        await memory.add_session_to_memory(await session_with(sessions, f"u{i}", "I like tea"))
    async with FactWorker(memory, concurrency=6, **QUICK):
        for user in ("ivy", "u0", "u1", "u2"):
            await memory.wait_for_generation(app_name=APP, user_id=user, timeout=WAIT)
    assert model.most_at_once == 1
    assert await facts(memory, "ivy") == ["said I like 0", "said I like 1", "said I like 2"]


async def test_stopping_releases_what_a_worker_holds(client: Any) -> None:
    model = Model()
    model.hold = asyncio.Event()
    sessions, memory = services(client, model)
    session = await session_with(sessions, "jo", "I like tea")
    await memory.add_session_to_memory(session)
    worker = FactWorker(memory, grace=0.05, **QUICK)
    running = asyncio.create_task(worker.run())
    await model.called.wait()
    worker.stop()
    await running
    assert worker.counts["released"] == 1
    assert await open_jobs(memory) == [(1, 0, 0, 0)]  # queued again, for another worker
    model.hold.set()
    async with FactWorker(memory, **QUICK):
        await memory.wait_for_generation(
            app_name=APP, user_id="jo", session_id=session.id, timeout=WAIT
        )
    assert await facts(memory, "jo") == ["said I like tea"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"mode": "later"}, "mode must be"),
        ({"trigger_events": 0}, "trigger_events must be positive"),
        ({"trigger_idle_seconds": -1.0}, "trigger_idle_seconds must be positive"),
        ({"max_backlog": 0}, "max_backlog must be positive"),
    ],
)
def test_bad_background_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        FactSettings(**settings)


async def test_a_worker_needs_a_generator_and_sane_numbers() -> None:
    memory = RedisMemoryService(fakeredis.FakeAsyncRedis())
    with pytest.raises(InvalidInputError, match="needs a generator"):
        FactWorker(memory)
    bad: dict[str, Callable[[], Any]] = {
        "concurrency": lambda: FactWorker(memory, generator=Model(), concurrency=0),
        "visibility_timeout": lambda: FactWorker(memory, generator=Model(), visibility_timeout=0),
    }
    for name, make in bad.items():
        with pytest.raises(InvalidInputError, match=name):
            make()


# Task.cancelling is Python 3.11's: 3.10 cannot tell a cancel redis-py turned into a
# timeout from a real one, so the promise (and its test) starts at 3.11.
if sys.version_info >= (3, 11):

    @pytest.mark.fake
    async def test_a_cancel_that_redis_py_turns_into_a_timeout_still_ends_the_heartbeat() -> None:
        """Stopping cancels the heartbeat; a cancel that lands in redis-py's read can come
        out as its TimeoutError, which the heartbeat logs and goes on from otherwise."""
        memory = RedisMemoryService(fakeredis.FakeAsyncRedis())
        worker = FactWorker(memory, generator=Model(), visibility_timeout=0.06)
        touching = asyncio.Event()

        async def touch(*_: Any) -> None:
            touching.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                raise RedisTimeoutError("Timeout reading from the server") from None

        worker._queue.touch = touch  # type: ignore[method-assign]
        worker._held[Job(APP, 0, "1-0", "job", False, "")] = "token"
        beat = asyncio.create_task(worker._heartbeat())
        await asyncio.wait_for(touching.wait(), 10)
        beat.cancel()
        done, _ = await asyncio.wait({beat}, timeout=5)
        assert done, "the heartbeat went on after its cancel"
        assert beat.cancelled()


@pytest.mark.fake
async def test_inline_mode_records_no_job() -> None:
    client = fakeredis.FakeAsyncRedis()
    sessions = RedisSessionService(client)
    model = Model()
    memory = RedisMemoryService(client, generator=model)
    session = await session_with(sessions, "kim", "I like tea")
    await memory.add_session_to_memory(session)
    assert await facts(memory, "kim") == ["said I like tea"]
    assert not [k async for k in client.scan_iter(match="*jobs*")]
    await memory.wait_for_generation(app_name=APP, user_id="kim", timeout=0)


# -- the least-privilege ACL lines (docs/security.md) -------------------------------------

VALKEY = pytest.param("REDIS_VALKEY_URL", marks=pytest.mark.valkey)


@pytest.fixture(params=["REDIS_URL", VALKEY])
async def admin(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Redis]:
    kind = {"REDIS_URL": "acl", "REDIS_VALKEY_URL": "valkey-acl"}[request.param]
    async with backend(kind, monkeypatch) as client:
        yield client


@pytest.mark.real
@pytest.mark.acl
async def test_the_documented_lines_run_background_generation(admin: Redis) -> None:
    model = Model()
    # The agents record jobs with the facts line; only the workers need the background line.
    async with acl_user(admin, facts=True) as agent, acl_user(admin, background=True) as own:
        sessions, memory = services(agent, model, "plain")
        session = await session_with(sessions, "lin", "I like tea")
        await memory.add_session_to_memory(session)
        _, worker_memory = services(own, model, "plain")
        async with FactWorker(worker_memory, **QUICK):
            await memory.wait_for_generation(
                app_name=APP, user_id="lin", session_id=session.id, timeout=WAIT
            )
        assert await facts(memory, "lin") == ["said I like tea"]
        assert sum(b.queued for b in await FactJobs(worker_memory).backlog(APP)) == 0


@pytest.mark.real
@pytest.mark.acl
@pytest.mark.parametrize("command", readme_rules()["background"])
async def test_a_worker_lacking_one_command_of_the_line_is_refused_naming_it(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with backend("acl", monkeypatch) as client:
        model = Model(slow=0.25)  # past a heartbeat (a third of the visibility timeout)
        sessions, memory = services(client, model)
        await memory.add_session_to_memory(await session_with(sessions, "max", "I like tea"))
        refused: list[str] = []
        async with acl_user(client, background=True, without=command[1:]) as own:
            _, worker_memory = services(own, model, "plain")
            worker = FactWorker(worker_memory, visibility_timeout=0.3, grace=1.0, **QUICK)
            running = asyncio.create_task(worker.run())
            for _ in range(int(WAIT / 0.02)):  # until the job ended, or the worker stopped
                if running.done() or not await open_jobs(memory):
                    break
                await asyncio.sleep(0.02)
            worker.stop()
            try:
                await running
            except PermissionDeniedError as exc:
                refused.append(str(exc.command))
            try:
                await FactJobs(worker_memory).backlog(APP)
            except PermissionDeniedError as exc:
                refused.append(str(exc.command))
    assert command[1:].upper() in refused, refused


async def test_hostile_ids_round_trip_through_the_queue(client: Any) -> None:
    model = Model()
    sessions, memory = services(client, model)
    user, sid = "a:b{c}% d", "s:1}{x"
    session = await sessions.create_session(app_name=APP, user_id=user, session_id=sid)
    await sessions.append_event(session, said("I like tea"))
    await memory.add_session_to_memory(session)
    await memory.add_events_to_memory(
        app_name=APP, user_id=user, events=[said("I like jazz")], session_id=sid
    )
    async with FactWorker(memory, **QUICK):
        await memory.wait_for_generation(app_name=APP, user_id=user, session_id=sid, timeout=WAIT)
    assert await facts(memory, user) == ["said I like jazz", "said I like tea"]
    assert {(r.user_id, r.session_id) for r in model.requests} == {(user, sid)}


@pytest.mark.fake
async def test_a_client_decoding_responses_runs_the_queue() -> None:
    client = fakeredis.FakeAsyncRedis(decode_responses=True)
    model = Model(poison=["bad"])
    sessions, memory = services(client, model)
    good = await session_with(sessions, "ok", "I like tea")
    bad = await session_with(sessions, "bad", "I like poison")
    await memory.add_session_to_memory(good)
    await memory.add_session_to_memory(bad)
    async with FactWorker(memory, max_attempts=1, **QUICK):
        await memory.wait_for_generation(app_name=APP, user_id="ok", timeout=WAIT)
        with pytest.raises(GenerationError):
            await memory.wait_for_generation(app_name=APP, user_id="bad", session_id=bad.id)
    assert await facts(memory, "ok") == ["said I like tea"]
    [letter] = await FactJobs(memory).dead_letters(APP)
    assert letter.session_id == bad.id
    assert sum(b.dead_letters for b in await FactJobs(memory).backlog(APP)) == 1


@pytest.mark.fake
async def test_disable_consolidation_shows_the_generator_no_fact() -> None:
    client = fakeredis.FakeAsyncRedis()
    model = Model()
    facts_ = FactSettings(disable_consolidation=True)
    memory = RedisMemoryService(client, generator=model, facts=facts_)
    for text in ("I like tea", "I like jazz"):
        session = Session(id=text, app_name=APP, user_id="nia", events=[said(text)])
        await memory.add_session_to_memory(session)
    assert [r.facts for r in model.requests] == [[], []]  # so it can only add
    assert await facts(memory, "nia") == ["said I like jazz", "said I like tea"]


def test_the_url_carries_the_background_settings() -> None:
    url = (
        "redis://localhost:1/0?generator=import:facts_generators:likes&fact_mode=background"
        "&fact_trigger_events=3&fact_trigger_idle_seconds=2.5&fact_max_backlog=100"
        "&disable_consolidation=true"
    )
    settings = RedisMemoryService.from_url(url)._memory.fact_settings
    assert (settings.mode, settings.trigger_events, settings.trigger_idle_seconds) == (
        "background",
        3,
        2.5,
    )
    assert (settings.max_backlog, settings.disable_consolidation) == (100, True)
    bad = {
        "fact_mode=later": "mode must be 'inline' or 'background'",
        "fact_trigger_events=x": "fact_trigger_events must be an int",
        "fact_max_backlog=0": "max_backlog must be positive",
        "disable_consolidation=maybe": "disable_consolidation must be true or false",
    }
    base = "redis://localhost:1/0?generator=import:facts_generators:likes&"
    for query, message in bad.items():
        with pytest.raises(InvalidInputError, match=message):
            RedisMemoryService.from_url(base + query)
    with pytest.raises(InvalidInputError, match="fact_mode need a generator"):
        RedisMemoryService.from_url("redis://localhost:1/0?fact_mode=background")
