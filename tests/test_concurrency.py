"""Many writers on one session and one user's shared keys, on a real Redis.

Asyncio tasks and OS processes append concurrently; nothing may be lost, the stored
state must equal the fold of the stored events' deltas, and under the reject policy
every attempt either lands or is told it was stale.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from typing import Any

import pytest

from _backends import backend
from _servers import skip_without
from redis_agent_sessions import (
    Event,
    EventActions,
    RedisSessionService,
    SessionServiceConfig,
    StaleSessionError,
)
from redis_agent_sessions.state import merge_state, split_state_delta

pytestmark = [pytest.mark.real, pytest.mark.slow]
APP, USER = "race_app", "alice"


@pytest.fixture
async def url(monkeypatch: pytest.MonkeyPatch) -> Any:
    """REDIS_URL, for writers opening clients of their own; its database is empty before and
    after the test."""
    async with backend("real", monkeypatch):
        yield skip_without("REDIS_URL")


async def writer(
    url: str, name: str, session_ids: list[str], rounds: int, policy: str
) -> dict[str, int]:
    """Appends ``rounds`` events per session; under reject, reloads and retries when stale."""
    counts = {"landed": 0, "stale": 0}
    config = SessionServiceConfig(stale_policy=policy)  # type: ignore[arg-type]
    async with RedisSessionService.from_url(url, config=config) as service:
        for i in range(rounds):
            for sid in session_ids:
                delta = {f"{name}:last": i, f"user:{name}": i, "user:shared": f"{name}-{i}"}
                event = Event(author=name, actions=EventActions(state_delta=delta))
                while True:
                    session = await service.get_session(app_name=APP, user_id=USER, session_id=sid)
                    assert session is not None
                    try:
                        await service.append_event(session, event)
                    except StaleSessionError:
                        counts["stale"] += 1
                        continue
                    counts["landed"] += 1
                    break
    return counts


def process_writer(
    url: str, name: str, session_ids: list[str], rounds: int, policy: str
) -> dict[str, int]:
    return asyncio.run(writer(url, name, session_ids, rounds, policy))


async def check_fold(url: str, session_ids: list[str], expected_events: int) -> None:
    """Stored session state == the fold of its stored events' deltas; no event twice."""
    async with RedisSessionService.from_url(url) as service:
        user_state = await service.get_user_state(app_name=APP, user_id=USER)
        total = 0
        for sid in session_ids:
            session = await service.get_session(app_name=APP, user_id=USER, session_id=sid)
            assert session is not None
            fold: dict[str, Any] = {}
            for event in session.events:
                fold.update(split_state_delta(event.actions.state_delta).session)
            assert session.state == merge_state(fold, user_state, {})
            assert len({e.id for e in session.events}) == len(session.events)
            total += len(session.events)
        assert total == expected_events


@pytest.mark.parametrize("policy", ["reject", "merge"])
async def test_tasks_on_one_session_lose_nothing(url: str, policy: str) -> None:
    async with RedisSessionService.from_url(url) as service:
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
    writers, rounds = 8, 25
    results = await asyncio.gather(
        *(writer(url, f"w{i}", ["s"], rounds, policy) for i in range(writers))
    )
    assert sum(r["landed"] for r in results) == writers * rounds
    if policy == "merge":
        assert sum(r["stale"] for r in results) == 0
    await check_fold(url, ["s"], writers * rounds)
    async with RedisSessionService.from_url(url) as service:
        user_state = await service.get_user_state(app_name=APP, user_id=USER)
        assert {k: v for k, v in user_state.items() if k != "shared"} == {
            f"w{i}": rounds - 1 for i in range(writers)
        }


async def test_processes_on_one_session_and_one_users_keys(url: str) -> None:
    sessions = ["s1", "s2", "s3"]
    async with RedisSessionService.from_url(url) as service:
        for sid in sessions:
            await service.create_session(app_name=APP, user_id=USER, session_id=sid)
    procs, rounds = 4, 15
    ctx = multiprocessing.get_context("spawn")
    loop = asyncio.get_running_loop()
    with ctx.Pool(procs) as pool:
        results = await loop.run_in_executor(
            None,
            lambda: pool.starmap(
                process_writer,
                [(url, f"p{i}", sessions, rounds, "reject") for i in range(procs)],
            ),
        )
    assert sum(r["landed"] for r in results) == procs * rounds * len(sessions)
    await check_fold(url, sessions, procs * rounds * len(sessions))
    async with RedisSessionService.from_url(url) as service:
        user_state = await service.get_user_state(app_name=APP, user_id=USER)
        assert {k: v for k, v in user_state.items() if k != "shared"} == {
            f"p{i}": rounds - 1 for i in range(procs)
        }
        # Each writer's last append is its final round, so whichever landed last of all
        # left its value in the shared key.
        assert user_state["shared"] in {f"p{i}-{rounds - 1}" for i in range(procs)}


async def test_stale_attempts_write_nothing(url: str) -> None:
    """Every attempt lands or raises; the number of events equals the number that landed."""
    async with RedisSessionService.from_url(url) as service:
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
        copies = [
            await service.get_session(app_name=APP, user_id=USER, session_id="s") for _ in range(10)
        ]

        async def attempt(i: int, copy: Any) -> bool:
            event = Event(actions=EventActions(state_delta={"winner": i, f"user:try{i}": True}))
            try:
                await service.append_event(copy, event)
                return True
            except StaleSessionError:
                return False

        landed = await asyncio.gather(*(attempt(i, c) for i, c in enumerate(copies)))
        assert sum(landed) == 1
        session = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert session is not None
        assert len(session.events) == 1
        winner = landed.index(True)
        assert session.state == {"winner": winner, f"user:try{winner}": True}
