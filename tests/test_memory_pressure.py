"""Redis under memory pressure (``maxmemory``), as managed services and caches run it.

A real ``redis-server`` of the test's own, since fakeredis neither evicts nor refuses:

- an evicting policy (``volatile-lru``, the managed services' default, and ``allkeys-lru``)
  takes a session's keys one by one: no read ever returns such a session as if it were
  whole (it is reported as incomplete, or gone when its metadata went), no write builds on
  it, and the operator command finds and removes every one;
- ``noeviction`` at full memory refuses writes with :class:`StoreFullError`, nothing
  half-written, while every read path keeps working;
- readiness names a policy that can evict the store's keys, and a full Redis.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from _local_cluster import free_ports, require_or_skip
from redis_agent_sessions import (
    Content,
    Event,
    EventActions,
    IncompleteSessionError,
    Part,
    RedisSessionService,
    SessionNotFoundError,
    SessionServiceConfig,
)

pytestmark = [pytest.mark.real]

APP = "pressure_app"


@dataclass
class Server:
    url: str
    admin: redis.Redis
    proc: subprocess.Popen[bytes]

    def limit(self, maxmemory: str, policy: str) -> None:
        """Empty the server, then set its memory limit and policy."""
        self.admin.config_set("maxmemory", 0)
        self.admin.flushall()
        self.admin.config_set("maxmemory-policy", policy)
        self.admin.config_set("maxmemory", maxmemory)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    binary = shutil.which("redis-server")
    if binary is None:
        require_or_skip("redis-server is not on PATH")
    assert binary is not None
    [port], held = free_ports(1)
    for s in held:
        s.close()
    d: Path = tmp_path_factory.mktemp("pressure")
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(d), "--daemonize", "no"]  # fmt: skip
    with open(d / "redis.log", "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    admin = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            admin.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail(f"redis-server did not start: {(d / 'redis.log').read_text()}")
            time.sleep(0.05)
    try:
        yield Server(f"redis://127.0.0.1:{port}/0", admin, proc)
    finally:
        admin.close()
        proc.terminate()
        proc.wait(10)


@dataclass
class Written:
    """What the store acknowledged for one session."""

    user: str
    sid: str
    events: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    refused: str = ""  # the error that stopped its writes, if any


def turn(i: int, sid: str) -> Event:
    words = " ".join(random.choice(("flight", "hotel", "Lisbon", "seat", "window")) for _ in range(30))
    return Event(
        author="user" if i % 2 else "agent",
        content=Content(parts=[Part(text=f"turn {i} of {sid}: {words}")]),
        actions=EventActions(state_delta={"step": i, "user:seen": i}),
    )


async def fill(service: RedisSessionService, sessions: int, appends: int) -> list[Written]:
    """``sessions`` sessions of ``appends`` turns each, 16 at a time, recording what was
    acknowledged and which write was refused (the eviction test's evidence)."""
    written = [Written(f"u{n % 40}", f"s{n}") for n in range(sessions)]

    async def one(w: Written) -> None:
        try:
            s = await service.create_session(
                app_name=APP, user_id=w.user, session_id=w.sid, state={"origin": w.sid}
            )
            w.state = {"origin": w.sid}
            for i in range(appends):
                event = await service.append_event(s, turn(i, w.sid))
                w.events.append(event.id)
                w.state["step"] = i
        except (IncompleteSessionError, SessionNotFoundError) as exc:
            w.refused = type(exc).__name__

    gate = asyncio.Semaphore(16)

    async def gated(w: Written) -> None:
        async with gate:
            await one(w)

    await asyncio.gather(*(gated(w) for w in written))
    return written


def whole(session: Any, w: Written) -> bool:
    """Whether a session read is everything that was acknowledged for it."""
    got = [e.id for e in session.events]
    own = {k: v for k, v in session.state.items() if ":" not in k}
    return got[: len(w.events)] == w.events and own == w.state


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["volatile-lru", "allkeys-lru"])
async def test_an_evicted_session_is_never_returned_as_if_whole(server: Server, policy: str) -> None:
    server.limit("6mb", policy)
    config = SessionServiceConfig(ttl_seconds=3600)
    async with RedisSessionService.from_url(server.url, config=config) as service:
        written = await fill(service, 400, 40)
        assert int(server.admin.info("stats")["evicted_keys"]) > 0, "nothing was evicted"
        outcomes = {"whole": 0, "incomplete": 0, "gone": 0}
        incomplete: set[str] = set()
        for w in written:
            try:
                s = await service.get_session(app_name=APP, user_id=w.user, session_id=w.sid)
            except IncompleteSessionError as exc:
                assert exc.session_id == w.sid and exc.missing, exc
                assert w.sid in str(exc) and "evicted" in str(exc)
                outcomes["incomplete"] += 1
                incomplete.add(w.sid)
                continue
            if s is None:
                outcomes["gone"] += 1
                continue
            assert whole(s, w), f"{w.sid}: a partial session was returned ({len(s.events)} events)"
            outcomes["whole"] += 1
        # The eviction really split sessions, so the check above could have failed.
        assert outcomes["incomplete"] > 0, outcomes
        # A listing never shows part of a session's state either.
        for user in sorted({w.user for w in written}):
            try:
                listed = await service.list_sessions(app_name=APP, user_id=user)
            except IncompleteSessionError as exc:
                assert exc.session_id in incomplete
                continue
            by_id = {w.sid: w for w in written if w.user == user}
            for s in listed.sessions:
                own = {k: v for k, v in s.state.items() if ":" not in k}
                assert own == by_id[s.id].state
