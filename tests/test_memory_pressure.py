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
import json
import random
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import redis

from _cli import FORKERS
from _local_cluster import free_ports, require_or_skip
from redis_agent_sessions import (
    Content,
    CorruptDataError,
    Event,
    EventActions,
    GetSessionConfig,
    IncompleteSessionError,
    Part,
    RedisMemoryService,
    RedisSessionService,
    SessionNotFoundError,
    SessionServiceConfig,
    StoreFullError,
)
from redis_agent_sessions.keys import KeySpace, split_app_member

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


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m redis_agent_sessions ARGS --url URL``, forked (``_cli.Forkers``)."""
    return FORKERS.run([*args, "--url", url], timeout=60)


@dataclass
class Written:
    """What the store acknowledged for one session."""

    user: str
    sid: str
    events: list[str] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    refused: str = ""  # the error that stopped its writes, if any


def turn(i: int, sid: str) -> Event:
    choices = ("flight", "hotel", "Lisbon", "seat", "window")
    words = " ".join(random.choice(choices) for _ in range(30))
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
async def test_an_evicted_session_is_never_returned_as_if_whole(
    server: Server, policy: str
) -> None:
    server.limit("6mb", policy)
    config = SessionServiceConfig(ttl_seconds=3600)
    async with RedisSessionService.from_url(server.url, config=config) as service:
        written = await fill(service, 400, 40)
        assert int(server.admin.info("stats")["evicted_keys"]) > 0, "nothing was evicted"
        # Reads take memory too (buffers), so the store would go on changing under the checks:
        # what the fill left stays as it is from here.
        server.admin.config_set("maxmemory", 0)
        outcomes = {"whole": 0, "incomplete": 0, "gone": 0}
        incomplete: set[str] = set()
        for w in written:
            refused: IncompleteSessionError | None = None
            try:
                s = await service.get_session(app_name=APP, user_id=w.user, session_id=w.sid)
            except IncompleteSessionError as exc:
                refused = exc
            if refused is not None:
                assert refused.session_id == w.sid, refused
                assert refused.missing
                assert w.sid in str(refused)
                assert "evicted" in str(refused)
                outcomes["incomplete"] += 1
                incomplete.add(w.sid)
            elif s is None:
                outcomes["gone"] += 1
            else:
                assert whole(s, w), f"{w.sid}: a partial session was returned: {len(s.events)}"
                outcomes["whole"] += 1
        # The eviction really split sessions, so the check above could have failed.
        assert outcomes["incomplete"] > 0, outcomes
        # A listing never shows part of a session's state either.
        for user in sorted({w.user for w in written}):
            try:
                listed = await service.list_sessions(app_name=APP, user_id=user)
            except IncompleteSessionError as exc:
                refused = exc
            else:
                refused = None
            if refused is not None:
                assert refused.session_id in incomplete
                continue
            by_id = {w.sid: w for w in written if w.user == user}
            for s in listed.sessions:
                own = {k: v for k, v in s.state.items() if ":" not in k}
                assert own == by_id[s.id].state
    if find_spec("rich") is None:
        return  # the operator commands need the [cli] extra
    # The operator command finds exactly those, and removes them.
    # It walks the app's index, and under allkeys-* Redis may have evicted that too (made
    # again by the sessions created after): it finds exactly the refused sessions indexed.
    index = server.admin.zrange(KeySpace().app_sessions(APP), 0, -1)
    indexed = {split_app_member(m.decode())[1] for m in index}
    if policy.startswith("volatile"):
        assert incomplete <= indexed  # indexes have no TTL: never evicted
    listed = cli(server.url, "incomplete", APP, "--json")
    if not indexed:  # the whole index was evicted, and no session was created after
        assert listed.returncode == 1
        assert "no sessions indexed" in listed.stderr, listed.stderr
    else:
        assert listed.returncode == (1 if incomplete & indexed else 0), listed.stderr
        found = {row["session_id"] for row in json.loads(listed.stdout)["incomplete"]}
        assert found == incomplete & indexed
        assert cli(server.url, "incomplete", APP, "--delete").returncode == 0
        again = cli(server.url, "incomplete", APP, "--json")
        assert (again.returncode, json.loads(again.stdout)["incomplete"]) == (0, []), again.stderr
    async with RedisSessionService.from_url(server.url, config=config) as service:
        for w in written:
            try:
                s = await service.get_session(app_name=APP, user_id=w.user, session_id=w.sid)
            except IncompleteSessionError:
                assert w.sid in incomplete - indexed  # out of the operator command's sight
            else:
                assert s is None or whole(s, w)


def readiness_of(found: Any) -> dict[str, tuple[bool, str]]:
    return {c.name: (c.ok, c.detail) for c in found.checks}


@pytest.mark.parametrize(
    ("policy", "ttl", "ready"),
    [
        ("volatile-lru", 3600, False),
        ("volatile-lru", None, True),
        ("allkeys-lru", None, False),
        ("allkeys-lfu", 3600, False),
        ("noeviction", 3600, True),
    ],
)
async def test_readiness_names_a_policy_that_evicts_the_store(
    server: Server, policy: str, ttl: int | None, ready: bool, caplog: pytest.LogCaptureFixture
) -> None:
    server.limit("64mb", policy)
    config = SessionServiceConfig(ttl_seconds=ttl)
    async with RedisSessionService.from_url(server.url, config=config) as service:
        with caplog.at_level("WARNING", logger="redis_agent_sessions"):
            for n in range(3):  # the first use warns, once
                await service.get_session(app_name=APP, user_id="u", session_id=f"s{n}")
        found = await service.check_ready()
    ok, detail = readiness_of(found)["memory"]
    assert (bool(found), ok) == (ready, ready), found
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    if ready:
        assert "of 64.0 MiB used" in detail
        assert policy in detail
        assert warnings == []
        return
    assert f"maxmemory-policy {policy} lets Redis evict" in detail
    assert ("any key" if policy.startswith("allkeys") else "ttl_seconds=3600") in detail
    assert len(warnings) == 1
    assert detail in warnings[0]
    # Entries of the memory service have no TTL: only allkeys-* may evict them.
    async with RedisMemoryService.from_url(server.url, backend="plain") as memory:
        assert readiness_of(await memory.check_ready())["memory"][0] is (
            not policy.startswith("allkeys")
        )


async def full(server: Server, service: RedisSessionService) -> tuple[Any, StoreFullError]:
    """Fill a Redis limited to 3 MB under noeviction (``server.limit``) with one user's
    sessions until a write is refused; the last session and the refusal. Used memory then
    moves a little around the limit, so the limit goes down to 1 MB: the server stays full
    for what follows."""
    n = 0
    while True:
        s = await service.create_session(app_name=APP, user_id="u", session_id=f"s{n}")
        n += 1
        for i in range(20):
            try:
                await service.append_event(s, turn(i, s.id))
            except StoreFullError as exc:
                server.admin.config_set("maxmemory", "1mb")
                return s, exc


async def test_a_full_redis_refuses_writes_as_full_and_keeps_serving_reads(server: Server) -> None:
    async with (
        RedisSessionService.from_url(server.url) as service,
        RedisMemoryService.from_url(server.url, backend="plain") as memory,
    ):
        server.limit("3mb", "noeviction")
        told = await service.create_session(app_name=APP, user_id="u", session_id="told")
        await service.append_event(told, turn(0, "told"))
        await memory.add_session_to_memory(told)
        last, refusal = await full(server, service)
        assert "out of memory" in str(refusal)
        assert "nothing was written" in str(refusal)
        assert not isinstance(refusal, CorruptDataError)
        # Nothing half-written: the session reads as it was before the refused append.
        again = await service.get_session(app_name=APP, user_id="u", session_id=last.id)
        assert again is not None
        assert [e.id for e in again.events] == [e.id for e in last.events]
        assert again.state == last.state
        with pytest.raises(StoreFullError):
            await service.create_session(app_name=APP, user_id="u", session_id="one-more")
        # Redis lets a script that has written go past the limit (never half way), and
        # used memory moves a little: memory ingestion is refused as full, or done whole.
        try:
            await memory.add_session_to_memory(again)
        except StoreFullError:
            pass
        # Every read path works at full memory.
        found = await service.check_ready()
        checks = readiness_of(found)
        assert checks["scripts"][0]
        assert not found
        assert checks["memory"][1].startswith("writes are refused: Redis is out of memory")
        assert (await service.get_session(app_name=APP, user_id="u", session_id="told")) is not None
        recent = await service.get_session(
            app_name=APP,
            user_id="u",
            session_id=last.id,
            config=GetSessionConfig(num_recent_events=2),
        )
        assert recent is not None
        assert len(recent.events) == min(2, len(last.events))
        stale = await service.get_session(app_name=APP, user_id="u", session_id="told")
        assert stale is not None
        await service.refresh(stale)
        listed = await service.list_sessions(app_name=APP, user_id="u")
        assert {"told", last.id} <= {s.id for s in listed.sessions}
        page = await service.list_events(app_name=APP, user_id="u", session_id="told")
        assert [e.id for e in page.events] == [e.id for e in told.events]
        watched = []
        async for event in service.watch(
            app_name=APP, user_id="u", session_id="told", from_beginning=True
        ):
            watched.append(event.id)
            break
        assert watched == [told.events[0].id]
        hits = await memory.search_memory(app_name=APP, user_id="u", query="turn 0 of told")
        assert hits.memories
        # Deleting works, and frees memory.
        await service.delete_session(app_name=APP, user_id="u", session_id=last.id)
        assert await service.get_session(app_name=APP, user_id="u", session_id=last.id) is None


@pytest.mark.cli
async def test_operators_read_everything_at_full_memory(server: Server) -> None:
    server.limit("3mb", "noeviction")
    async with RedisSessionService.from_url(server.url) as service:
        last, _ = await full(server, service)
    for command in (["show", APP, "u", last.id], ["export", APP], ["ls", APP], ["stats"]):
        done = cli(server.url, *command)
        assert done.returncode == 0, (command, done.stderr)
    stats = cli(server.url, "stats").stdout
    assert "maxmemory-policy noeviction" in stats, stats
    assert "of 1.0 MiB used" in stats, stats
    ping = cli(server.url, "ping")
    assert ping.returncode == 1
    assert "writes are refused: Redis is out of memory" in ping.stdout
