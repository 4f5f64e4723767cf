"""Code run in spawned worker processes by tests/test_cluster.py, against a real Redis Cluster.

Kept apart from the test module so that a spawned process imports only this and the library.
"""

from __future__ import annotations

import asyncio
import os
import random
from typing import Any

from redis.asyncio.cluster import RedisCluster

from redis_agent_sessions import (
    Event,
    EventActions,
    RedisSessionService,
    SessionServiceConfig,
    StaleSessionError,
)
from redis_agent_sessions.keys import KeySpace, escape
from redis_agent_sessions.sessions._outbox import AppOutbox

CRASH_EXIT_CODE = 17


def version(stream_id: bytes | str, user_id: str) -> str:
    """The version app_apply.lua gives an app field written by outbox entry ``stream_id``."""
    sid = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
    ms, seq = sid.split("-")
    return f"{int(ms):015d}-{int(seq):010d}:{escape(user_id)}"


async def _shared_writer(
    url: str, app: str, user: str, sid: str, name: str, rounds: int, policy: str
) -> dict[str, Any]:
    """Appends ``rounds`` events to one session that other processes append to as well;
    under reject, reloads and retries when stale."""
    landed: list[str] = []
    stale = 0
    config = SessionServiceConfig(stale_policy=policy)  # type: ignore[arg-type]
    async with RedisSessionService.from_url(url, config=config, cluster=True) as service:
        for i in range(rounds):
            delta = {
                f"{name}:last": i,
                "shared": f"{name}-{i}",
                f"user:{name}": i,
                "user:shared": f"{name}-{i}",
            }
            event = Event(author=name, actions=EventActions(state_delta=delta))
            while True:
                session = await service.get_session(app_name=app, user_id=user, session_id=sid)
                assert session is not None
                try:
                    await service.append_event(session, event)
                except StaleSessionError:
                    stale += 1
                    continue
                landed.append(event.id)
                break
    return {"landed": landed, "stale": stale}


async def _app_writer(url: str, app: str, user: str, rounds: int, seed: int) -> dict[str, Any]:
    """The only process of ``user``: appends events writing random ``app:`` keys to its
    session "main", creates (with an ``app:`` key) and deletes side sessions, and after
    each write reads the version it got from its own newest outbox entry.

    Each app-slot step starts after a random pause of up to 10 ms, so that the writes of
    different users often reach the app's slot in another order than their versions."""
    rng = random.Random(seed)
    apply = AppOutbox.apply

    async def slow_apply(outbox: AppOutbox, **kwargs: Any) -> Any:
        await asyncio.sleep(rng.random() / 100)
        return await apply(outbox, **kwargs)

    AppOutbox.apply = slow_apply  # type: ignore[method-assign]
    outbox = KeySpace().app_outbox(app, user)
    client = RedisCluster.from_url(url)
    service = RedisSessionService(client)  # the cluster layout is detected from the client
    writes: list[tuple[str, str, str]] = []  # (version, field, value)
    landed: list[str] = []
    created = ["main"]
    deleted: list[str] = []

    async def record(app_delta: dict[str, str]) -> None:
        # Only this process operates for this user, so nothing trims the entry it just
        # wrote before it reads it back.
        [(stream_id, fields)] = await client.xrevrange(outbox, "+", "-", count=1)
        for field, value in app_delta.items():
            # It must be this write's entry, or the recorded version would be wrong.
            assert fields[f"app:{field}".encode()] == f'"{value}"'.encode(), (fields, app_delta)
            writes.append((version(stream_id, user), field, value))

    try:
        session = await service.create_session(app_name=app, user_id=user, session_id="main")
        for i in range(rounds):
            app_delta = {
                f"k{j}": f"{user}-{i}-{j}" for j in rng.sample(range(3), rng.randint(1, 3))
            }
            delta: dict[str, Any] = {f"app:{k}": v for k, v in app_delta.items()}
            delta |= {"step": i, f"s{i % 4}": i, "user:step": i, f"user:u{i % 3}": i}
            event = Event(author=user, actions=EventActions(state_delta=delta))
            await service.append_event(session, event)
            landed.append(event.id)
            await record(app_delta)
            if i % 4 == 0:
                sid = f"x{i}"
                app_delta = {"k0": f"{user}-create-{sid}"}
                await service.create_session(
                    app_name=app, user_id=user, session_id=sid, state={"app:k0": app_delta["k0"]}
                )
                created.append(sid)
                await record(app_delta)
            if i % 8 == 4:
                sid = created[-2]
                await service.delete_session(app_name=app, user_id=user, session_id=sid)
                deleted.append(sid)
    finally:
        await service.aclose()
        await client.aclose()
    return {
        "user": user,
        "writes": writes,
        "landed": landed,
        "sessions": [s for s in created if s not in deleted],
    }


def shared_writer(*args: Any) -> dict[str, Any]:
    return asyncio.run(_shared_writer(*args))


def app_writer(*args: Any) -> dict[str, Any]:
    return asyncio.run(_app_writer(*args))


def die_between_steps(url: str, app: str, user: str, sid: str, delta: dict[str, Any]) -> None:
    """Appends ``delta`` to an existing session and dies (no cleanup, no reply) as soon as
    the user-slot step is done, just before the app-slot step."""

    async def killed(*_: Any, **__: Any) -> Any:
        os._exit(CRASH_EXIT_CODE)

    AppOutbox.apply = killed  # type: ignore[method-assign]

    async def run() -> None:
        service = RedisSessionService.from_url(url, cluster=True)
        session = await service.get_session(app_name=app, user_id=user, session_id=sid)
        assert session is not None
        await service.append_event(session, Event(actions=EventActions(state_delta=delta)))

    asyncio.run(run())
