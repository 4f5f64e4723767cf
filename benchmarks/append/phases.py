"""The timed phases: raw EVALSHA, the append floor, appends by history, full reads, throughput."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from benchmarks.append import (
    APP,
    GET_SESSION_EVENTS,
    HISTORY_SIZES,
    HSET_XADD_LUA,
    RECENT,
    TRIVIAL_LUA,
    Plan,
    progress,
)
from benchmarks.harness import internals, timing
from benchmarks.harness.timing import Stats, settled_gc, summarize
from benchmarks.harness.workloads import Workload, events_for, make_event
from redis_agent_sessions import GetSessionConfig, RedisSessionService, Session


async def time_appends(service: RedisSessionService, pairs: list[tuple[Session, Any]]) -> list[int]:
    samples: list[int] = []
    with settled_gc():
        await timing.timed_appends(service, pairs, samples)
    return samples


@dataclass
class AppendCase:
    history: int
    sessions: int
    history_range: str
    stats: Stats


async def bench_raw(client: Redis, prefix: str, plan: Plan) -> dict[str, Stats]:
    trivial = await client.script_load(TRIVIAL_LUA)
    hset_xadd = await client.script_load(HSET_XADD_LUA)
    sample = make_event(1, "raw")
    payload = sample.__pydantic_serializer__.to_json(sample, exclude_none=True)
    keys = (f"{prefix}:raw:hash", f"{prefix}:raw:stream")
    counter = iter(range(10**9))

    async def call_trivial() -> Any:
        return await client.evalsha(trivial, 0)

    async def call_hset_xadd() -> Any:
        return await client.evalsha(hset_xadd, 2, *keys, f"f{next(counter) % 64}", b'"v"', payload)

    return {
        "return 1": summarize(await timing.time_calls(call_trivial, plan.raw_calls, plan.warmup)),
        "HSET + XADD": summarize(
            await timing.time_calls(call_hset_xadd, plan.raw_calls, plan.warmup)
        ),
    }


async def bench_floor(work: Workload, client: Redis, prefix: str, plan: Plan) -> dict[str, Stats]:
    """The append floor, interleaved so that drift hits all alike: per round one raw
    EVALSHA of ``return 1``, one of a script doing HSET+XADD (both packed by redis-py, as
    any caller's), one append_event to a session holding 1 event, and one more with the
    script call packed by redis-py instead of hiredis (what hiredis packing saves)."""
    trivial = await client.script_load(TRIVIAL_LUA)
    hset_xadd = await client.script_load(HSET_XADD_LUA)
    sample = make_event(1, "raw")
    payload = sample.__pydantic_serializer__.to_json(sample, exclude_none=True)
    keys = (f"{prefix}:floor:hash", f"{prefix}:floor:stream")
    sessions = await work.sessions_with(2 * plan.appends, 1)
    pairs = events_for(sessions, 2 * plan.appends)
    await work.fill(await work.new_session(), plan.warmup)
    clock = time.perf_counter_ns
    names = ("return 1", "HSET + XADD", "append_event", "append_event, redis-py packing")
    samples: dict[str, list[int]] = {name: [] for name in names}
    with settled_gc():
        for i in range(plan.appends):
            stamps = [clock()]
            await client.evalsha(trivial, 0)
            stamps.append(clock())
            await client.evalsha(hset_xadd, 2, *keys, f"f{i % 64}", b'"v"', payload)
            stamps.append(clock())
            await work.service.append_event(*pairs[2 * i])
            stamps.append(clock())
            with internals.redis_py_packing():
                await work.service.append_event(*pairs[2 * i + 1])
            stamps.append(clock())
            for name, start, end in zip(names, stamps, stamps[1:], strict=False):
                samples[name].append(end - start)
    return {name: summarize(taken) for name, taken in samples.items()}


async def bench_appends(work: Workload, plan: Plan) -> list[AppendCase]:
    cases = []
    scratch = await work.new_session()
    for history in HISTORY_SIZES:
        # Enough sessions that each grows by at most 10 % while measured (history 1: one
        # append per session, so every measured append really meets exactly 1 event).
        count = max(1, math.ceil(plan.appends / max(1, history // 10)))
        progress(f"building {count} session(s) with {history} events each")
        sessions = await work.sessions_with(count, history)
        pairs = events_for(sessions, plan.appends)
        await work.fill(scratch, plan.warmup)  # warm-up, untimed
        stats = summarize(await time_appends(work.service, pairs))
        top = max(len(s.events) for s in sessions) - 1
        span = f"{history}" if top == history else f"{history}..{top}"
        cases.append(AppendCase(history, count, span, stats))
        progress(f"append at {history}: p50 {stats.p50_us:.1f} us")
    return cases


async def fetch(
    service: RedisSessionService, session: Session, config: GetSessionConfig | None = None
) -> Session | None:
    return await service.get_session(
        app_name=APP, user_id=session.user_id, session_id=session.id, config=config
    )


async def bench_get_session(work: Workload, plan: Plan) -> dict[str, Stats]:
    progress(f"building a session with {GET_SESSION_EVENTS} events for get_session")
    session = await work.new_session()
    await work.fill(session, GET_SESSION_EVENTS)
    recent = GetSessionConfig(num_recent_events=RECENT)
    full_copy = await fetch(work.service, session)
    recent_copy = await fetch(work.service, session, recent)
    if full_copy is None or len(full_copy.events) != GET_SESSION_EVENTS:
        raise RuntimeError("get_session did not return the 1000-event session")
    if recent_copy is None or len(recent_copy.events) != RECENT:
        raise RuntimeError(f"get_session did not return the last {RECENT} events")

    async def full() -> Any:
        return await fetch(work.service, session)

    async def last() -> Any:
        return await fetch(work.service, session, recent)

    warm = max(5, plan.warmup // 10)
    return {
        "full": summarize(await timing.time_calls(full, plan.get_full_calls, warm)),
        f"last {RECENT}": summarize(
            await timing.time_calls(last, plan.get_recent_calls, plan.warmup)
        ),
    }


@dataclass
class ThroughputCase:
    mode: str
    tasks: int
    appends: int
    per_second: float
    p50_us: float
    p99_us: float


async def bench_throughput(
    work: Workload, merge: RedisSessionService, plan: Plan
) -> list[ThroughputCase]:
    cases = []
    for mode, service, task_counts in (
        ("own session per task (reject)", work.service, (1, 4, 16)),
        ("one shared session (merge)", merge, (4, 16)),
    ):
        for tasks in task_counts:
            per_task = plan.throughput_appends // tasks
            if service is merge:
                copies = await shared_copies(work, merge, tasks)
            else:
                copies = [await work.new_session() for _ in range(tasks)]
            batches = [events_for([c], per_task) for c in copies]
            await work.fill(await work.new_session(), plan.warmup)
            samples: list[int] = []
            with settled_gc():
                start = time.perf_counter_ns()
                await asyncio.gather(*(timing.timed_appends(service, b, samples) for b in batches))
                elapsed = (time.perf_counter_ns() - start) / 1e9
            total = per_task * tasks
            stats = summarize(samples)
            rate = total / elapsed
            cases.append(ThroughputCase(mode, tasks, total, rate, stats.p50_us, stats.p99_us))
            progress(f"{mode}, {tasks} task(s): {rate:,.0f} appends/s")
    return cases


async def shared_copies(work: Workload, merge: RedisSessionService, count: int) -> list[Session]:
    """``count`` copies of one new session, one per task, like separate workers hold.

    Under the merge policy every append applies, each state key taking the last writer.
    """
    first = await work.new_session(merge)
    copies = []
    for _ in range(count):
        copy = await merge.get_session(app_name=APP, user_id=first.user_id, session_id=first.id)
        if copy is None:
            raise RuntimeError("the shared session vanished")
        copies.append(copy)
    return copies
