"""Background generation under a worker killed with ``kill -9`` mid-generation.

Three worker processes (tests/facts_bg_worker.py) run the jobs of 24 sessions of 8 users;
their model counts each user's events into one counter fact ("The user said K things.").
As soon as one worker starts a generation it is killed (SIGKILL) and another started in
its place; then every session gets two more events and is added again. At the end:

- every session's watermark counts all its events and names its last one (each read);
- each user's counter says exactly the user's events, and its history climbs without a
  repeat: no event counted twice, none lost, whatever the kill interrupted;
- the killed worker's job was claimed by another after the visibility timeout;
- nothing is queued, deferred, running or pending, and there is no dead letter.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from _processes import start
from _servers import skip_without
from facts_bg_worker import COUNTER, counter_text
from redis_agent_sessions import (
    CallableGenerator,
    Content,
    Event,
    FactJobs,
    FactSettings,
    MemoryOperation,
    Part,
    RedisMemoryService,
    RedisSessionService,
    SessionServiceConfig,
)
from redis_agent_sessions.keys import KeySpace

pytestmark = [pytest.mark.real, pytest.mark.slow]

WORKER = Path(__file__).with_name("facts_bg_worker.py")
APP = "chaos_app"
USERS = [f"u{i}" for i in range(8)]
SESSIONS, FIRST, SECOND = 3, 4, 2
"""Sessions per user, events each before the kill, and events each added after it."""
DEADLINE = 60.0
"""The most any wait may take (a hung worker fails the test; not a timing assertion)."""


@pytest.fixture(
    params=[
        pytest.param("REDIS_URL"),
        pytest.param("REDIS_CLUSTER_URL", marks=pytest.mark.cluster),
    ]
)
async def server(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, Any, bool, str]]:
    url = skip_without(request.param)
    cluster = request.param == "REDIS_CLUSTER_URL"
    client: Any = RedisCluster.from_url(url) if cluster else Redis.from_url(url)
    prefix = f"chaos-{uuid.uuid4().hex[:8]}"
    yield url, client, cluster, prefix
    for key in [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]:
        await client.delete(key)
    await client.aclose()


def said(text: str) -> Event:
    return Event(author="user", content=Content(role="user", parts=[Part(text=text)]))


async def line(proc: asyncio.subprocess.Process, wanted: str) -> None:
    """Read the worker's output until ``wanted``."""
    assert proc.stdout is not None
    while True:
        got = await asyncio.wait_for(proc.stdout.readline(), DEADLINE)
        assert got, f"the worker ended before printing {wanted!r}"
        if got.decode().strip() == wanted:
            return


async def test_a_worker_killed_mid_generation_loses_nothing_and_applies_nothing_twice(
    server: tuple[str, Any, bool, str], processes: list[asyncio.subprocess.Process]
) -> None:
    url, client, cluster, prefix = server
    config = SessionServiceConfig(key_prefix=prefix)
    keys = KeySpace(prefix)
    sessions = RedisSessionService(client, config=config)

    def counter(request: Any) -> list[MemoryOperation]:
        return [MemoryOperation(action="add", fact=counter_text(0))]

    seeder = RedisMemoryService(client, config=config, backend="plain",
                                generator=CallableGenerator(counter))  # fmt: skip
    # Enqueuing needs no model: the workers bring theirs.
    memory = RedisMemoryService(
        client, config=config, backend="plain", generator=CallableGenerator(counter),
        facts=FactSettings(mode="background", history=1000),
    )  # fmt: skip
    stored: dict[tuple[str, int], Any] = {}
    for user in USERS:
        await seeder.add_events_to_memory(
            app_name=APP, user_id=user, events=[said("start")], session_id="seed"
        )
        for n in range(SESSIONS):
            session = await sessions.create_session(app_name=APP, user_id=user)
            for i in range(FIRST):
                await sessions.append_event(session, said(f"{user} says {n}.{i}"))
            await memory.add_session_to_memory(session)
            stored[user, n] = session

    args = [url, prefix, APP, *(["--cluster"] if cluster else [])]
    # The victim's model holds each generation 60 s: killed mid-generation, not after it.
    workers = [
        await start(processes, WORKER, *args, *(["--hold"] if not i else [])) for i in range(3)
    ]
    for proc in workers:
        await line(proc, "ready")
    victim = workers.pop(0)
    await line(victim, "generating")
    victim.kill()  # kill -9, mid-generation
    await victim.wait()
    workers.append(await start(processes, WORKER, *args))
    await line(workers[-1], "ready")

    for (user, n), session in stored.items():
        fresh = await sessions.get_session(app_name=APP, user_id=user, session_id=session.id)
        assert fresh is not None
        for i in range(SECOND):
            await sessions.append_event(fresh, said(f"{user} adds {n}.{i}"))
        await memory.add_session_to_memory(fresh)
        stored[user, n] = fresh
    for user in USERS:
        await memory.wait_for_generation(app_name=APP, user_id=user, timeout=DEADLINE)

    counts: list[dict[str, int]] = []
    for proc in workers:
        proc.terminate()
        out, err = await asyncio.wait_for(proc.communicate(), DEADLINE)
        assert proc.returncode == 0, err.decode()
        counts.append(json.loads(out.decode().splitlines()[-1]))
    assert sum(c.get("claimed", 0) for c in counts) >= 1  # the killed worker's job
    assert sum(c.get("dead", 0) + c.get("retry", 0) for c in counts) == 0

    per_session = FIRST + SECOND
    for (user, _), session in stored.items():
        mark = await client.get(keys.memory_watermark(APP, user, session.id))
        assert mark.decode() == f"{per_session}\t{session.events[-1].id}"
    for user in USERS:
        [fact] = await memory.list_facts(app_name=APP, user_id=user)
        match = COUNTER.match(fact.text)
        assert match is not None
        assert int(match.group(1)) == SESSIONS * per_session, fact.text
        history = await memory.fact_history(app_name=APP, user_id=user, fact_id=fact.id)
        assert [r.revision for r in history] == list(range(fact.revision - 1, 0, -1))
        climbed = [int(COUNTER.match(r.text).group(1)) for r in reversed(history)]  # type: ignore[union-attr]
        assert climbed == sorted(set(climbed))  # each generation counted new events only
    backlog = await FactJobs(memory).backlog(APP)
    assert [(b.queued, b.active, b.deferred, b.pending, b.dead_letters) for b in backlog] == [
        (0, 0, 0, 0, 0)
    ] * len(backlog)
