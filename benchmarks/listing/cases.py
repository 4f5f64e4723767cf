"""Seeding the sessions, and the timed cases: pages, one user's sessions, the whole app."""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from benchmarks.harness import internals, timing
from benchmarks.harness.timing import Stats, settled_gc
from benchmarks.harness.workloads import in_chunks, make_page_event, user_name
from benchmarks.listing import APP, CHUNK, PAGE_SIZE, SEED, Plan, progress
from redis_agent_sessions import RedisSessionService, Session

# -- seeding ---------------------------------------------------------------------------------


async def seed(service: RedisSessionService, plan: Plan) -> dict[str, float]:
    def create(i: int) -> Callable[[], Awaitable[Session]]:
        return lambda: service.create_session(
            app_name=APP,
            user_id=user_name(i, plan.users),
            state={"topic": "flights", "step": "start", "n": i},
        )

    started = time.perf_counter()
    sessions: list[Session] = await in_chunks(
        [create(i) for i in range(plan.sessions)], "create_session", CHUNK, progress
    )
    created = time.perf_counter()
    order = list(range(plan.sessions))
    random.Random(SEED).shuffle(order)

    def append(i: int) -> Callable[[], Awaitable[Any]]:
        return lambda: service.append_event(sessions[i], make_page_event(i))

    await in_chunks([append(i) for i in order], "append_event", CHUNK, progress)
    appended = time.perf_counter()
    sessions.clear()  # let the seeded copies go before timing
    return {
        "create_s": created - started,
        "append_s": appended - created,
        "total_s": appended - started,
        "calls_per_s": 2 * plan.sessions / (appended - started),
    }


async def check_seeded(service: RedisSessionService, client: Redis, plan: Plan) -> None:
    keys = internals.key_space(service)
    for index in (keys.app_sessions(APP), keys.app_updated(APP)):
        count = await client.zcard(index)
        if count != plan.sessions:
            raise RuntimeError(f"{index} holds {count} sessions, not {plan.sessions}")


# -- timed cases -----------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    call: Callable[[], Awaitable[Any]]


async def deep_token(service: RedisSessionService, pages: int) -> tuple[str, set[str]]:
    """The token after ``pages`` pages by update, and the ids those pages held."""
    token: str | None = None
    seen: set[str] = set()
    for _ in range(pages):
        page = await service.list_sessions_page(app_name=APP, page_size=PAGE_SIZE, page_token=token)
        seen.update(s.id for s in page.sessions)
        if page.next_page_token is None:
            raise RuntimeError(f"the walk ended before {pages} pages")
        token = page.next_page_token
    assert token is not None
    return token, seen


async def check_pages(
    service: RedisSessionService, client: Redis, plan: Plan, token: str, seen: set[str], user: str
) -> None:
    """The pages the benchmark times hold what they should (checked once, untimed)."""
    first = await service.list_sessions_page(app_name=APP, page_size=PAGE_SIZE)
    times = [s.last_update_time for s in first.sessions]
    if len(times) != PAGE_SIZE or times != sorted(times, reverse=True):
        raise RuntimeError("the first page is not 100 sessions newest first by update")
    top: list[Any] = await client.zrange(
        internals.key_space(service).app_updated(APP), 0, 0, desc=True, withscores=True
    )
    newest = float(top[0][1])
    if abs(times[0] - newest) > 1e-3:
        raise RuntimeError("the first page does not start at the last updated session")
    deep = await service.list_sessions_page(app_name=APP, page_size=PAGE_SIZE, page_token=token)
    if len(deep.sessions) != PAGE_SIZE or seen & {s.id for s in deep.sessions}:
        raise RuntimeError("the deep page repeats sessions of the pages before it")
    if deep.sessions[0].last_update_time > first.sessions[-1].last_update_time:
        raise RuntimeError("the deep page is not further down the walk")
    mine = await service.list_sessions_page(app_name=APP, user_id=user, page_size=PAGE_SIZE)
    expected = plan.sessions // plan.users
    if len(mine.sessions) != min(PAGE_SIZE, expected) or any(
        s.user_id != user for s in mine.sessions
    ):
        raise RuntimeError(f"{user}'s page is not {expected} sessions of {user}")
    listed = await service.list_sessions(app_name=APP, user_id=user)
    if len(listed.sessions) != expected:
        raise RuntimeError(f"list_sessions({user}) found {len(listed.sessions)}, not {expected}")


async def bench_cases(
    service: RedisSessionService, client: Redis, plan: Plan
) -> tuple[dict[str, Stats], dict[str, list[int]], int]:
    user = user_name(plan.users // 2, plan.users)
    progress(f"following {plan.deep_pages} pages by update for the deep token")
    token, seen = await deep_token(service, plan.deep_pages)
    await check_pages(service, client, plan, token, seen, user)
    deep_at = plan.deep_pages * PAGE_SIZE

    async def first_updated() -> Any:
        return await service.list_sessions_page(app_name=APP, page_size=PAGE_SIZE)

    async def first_created() -> Any:
        return await service.list_sessions_page(
            app_name=APP, page_size=PAGE_SIZE, order_by="created"
        )

    async def deep_updated() -> Any:
        return await service.list_sessions_page(app_name=APP, page_size=PAGE_SIZE, page_token=token)

    async def user_page() -> Any:
        return await service.list_sessions_page(app_name=APP, user_id=user, page_size=PAGE_SIZE)

    async def user_list() -> Any:
        return await service.list_sessions(app_name=APP, user_id=user)

    per_user = plan.sessions // plan.users
    cases = [
        Case("list_sessions_page, first page, by update (newest first)", first_updated),
        Case("list_sessions_page, first page, by creation (newest first)", first_created),
        Case(
            f"list_sessions_page, by update, page after {deep_at:,} sessions "
            f"({plan.deep_pages} pages in)",
            deep_updated,
        ),
        Case(f"list_sessions_page, one user's first page ({per_user} sessions)", user_page),
        Case(f"list_sessions(user_id=one user) (all {per_user} of them)", user_list),
    ]
    trips = {c.name: await internals.pipelines_per_call(c.call) for c in cases}
    per_round = max(1, plan.calls // plan.rounds)
    samples = timing.Rounds()
    for round_no in range(plan.rounds):
        progress(f"timing round {round_no + 1}/{plan.rounds}")
        for case in timing.rotate(cases, round_no):  # the order rotates from round to round
            samples.add(
                case.name, round_no, await timing.time_calls(case.call, per_round, plan.warmup)
            )
    return {c.name: samples.stats(c.name) for c in cases}, trips, deep_at


async def bench_full_list(service: RedisSessionService, plan: Plan) -> dict[str, Any]:
    """``list_sessions(app_name)``: every session of the app, a few times at most."""
    samples: list[int] = []
    count = 0
    for _ in range(plan.full_list_max):
        progress(f"list_sessions(app_name) over {plan.sessions:,} sessions")
        with settled_gc():
            start = time.perf_counter_ns()
            listed = await service.list_sessions(app_name=APP)
            samples.append(time.perf_counter_ns() - start)
        count = len(listed.sessions)
        del listed
        progress(f"... {samples[-1] / 1e9:.2f} s")
        if sum(samples) > 20e9:
            break
    if count != plan.sessions:
        raise RuntimeError(f"list_sessions(app_name) found {count}, not {plan.sessions}")
    return {
        "sessions": count,
        "runs": len(samples),
        "seconds": [round(s / 1e9, 3) for s in samples],
        "median_s": timing.median_of(samples) / 1e9,
        "min_s": min(samples) / 1e9,
    }
