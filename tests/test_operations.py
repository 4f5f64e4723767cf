"""How the service behaves as an operator sees it: scripts, TTLs, clients, costs."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from importlib import resources
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis

from _backends import backend
from _servers import skip_without
from redis_agent_sessions import (
    Event,
    EventActions,
    GetSessionConfig,
    RedisSessionService,
    SessionServiceConfig,
)
from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.session_calls import READ_HASHES, ReadHashes
from redis_agent_sessions.keys import KeySpace

APP, USER = "app", "user"
LUA = sorted(
    p.name
    for p in resources.files("redis_agent_sessions._redis").joinpath("lua").iterdir()
    if p.name.endswith(".lua")
)


@pytest.mark.parametrize("name", LUA)
def test_every_script_opens_with_its_contract(name: str) -> None:
    text = resources.files("redis_agent_sessions._redis").joinpath("lua", name).read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("--"))
    if name.startswith("_"):  # a library prepended to the scripts: no KEYS of its own
        assert "Prepended to every script" in header, name
    else:
        assert re.search(r"KEYS\[1\]", header), name
        assert "returns" in header, name
    # Keys come from KEYS only; a key built inside Lua would hide from cluster routing.
    body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    assert not re.search(r"redis\.call\('\w+', '", body), name
    # A global assignment would break later scripts on a fakeredis server.
    declared = {
        n.strip()
        for names in re.findall(r"(?:local|for)\s+([\w\s,]+?)\s*(?:=|\bin\b)", body)
        for n in names.split(",")
    }
    declared |= {
        n.strip()
        for params in re.findall(r"function\s*\w*\(([^)]*)\)", body)
        for n in params.split(",")
    }
    assigned = set(re.findall(r"^\s*([A-Za-z_]\w*)\s*=[^=]", body, re.M))
    assert assigned <= declared, (name, assigned - declared)


@pytest.mark.parametrize("name", [n for n in LUA if not n.startswith("_")])
def test_scripts_ask_acl_before_any_command(name: str) -> None:
    """A command refused half way would leave the earlier writes (scripts do not roll
    back): every script asks for all the commands it runs before the first one."""
    text = resources.files("redis_agent_sessions._redis").joinpath("lua", name).read_text()
    body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    calls = re.compile(r"(?:redis\.p?call|\bread)\('([A-Z]+)'")
    # A library function that runs commands counts as running them where it is called.
    helpers = {f: c for f, c in _library_commands().items() if c}
    uses = re.compile(r"\b(" + "|".join(map(re.escape, helpers)) + r")\(")
    asked = re.search(r"\bdenied(?:_each)?\(", body)
    assert asked is not None, name
    first = [m.start() for m in (*calls.finditer(body), *uses.finditer(body))]
    assert first, name
    assert asked.start() < min(first), name
    # The plan is built from the command names written before it is asked for.
    planned = set(re.findall(r"'([A-Z]+)'", body[: body.index("if refused then")]))
    ran = set(calls.findall(body)).union(*(helpers[f] for f in uses.findall(body)))
    assert ran - _NEVER_RUN.get(name, set()) <= planned, (name, ran - planned)


_NEVER_RUN = {
    # A fact is in no session's set and leaves no tombstone: drop_entries runs SREM only
    # for an entry of a session (op.s) or one that was deleted, never sent from here.
    "memory_facts.lua": {"SREM"},
}
"""Commands a script's library functions hold that the script never makes them run."""


def _library_commands() -> dict[str, set[str]]:
    """The commands each function of the Lua libraries (``_*.lua``) runs, with those of
    the library functions it calls."""
    lua = resources.files("redis_agent_sessions._redis").joinpath("lua")
    own: dict[str, str] = {}
    for library in (n for n in LUA if n.startswith("_")):
        text = re.sub(r"--.*", "", lua.joinpath(library).read_text())
        parts = re.split(r"^local function (\w+)\(", text, flags=re.M)
        own.update(zip(parts[1::2], parts[2::2], strict=True))
    calls = re.compile(r"(?:redis\.p?call|\bread)\('([A-Z]+)'")
    found = {f: set(calls.findall(b)) for f, b in own.items()}
    for _ in own:  # to a fixed point: calls nest no deeper than there are functions
        for f, b in own.items():
            for g in re.findall(r"\b(\w+)\(", b):
                if g in found and g != f:
                    found[f] |= found[g]
    return found


async def test_appends_survive_a_script_cache_flush(
    service: RedisSessionService, redis_client: Any
) -> None:
    # From no script anywhere: an earlier test may have left a cluster's nodes with different
    # scripts (one node flushed), and the first append loads its script only where missing.
    await redis_client.script_flush()
    s = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(s, Event(actions=EventActions(state_delta={"n": 1})))
    sha = service._engine.ctx.runner.append.sha
    assert await redis_client.script_exists(sha) == [True]
    await redis_client.script_flush()
    assert await redis_client.script_exists(sha) == [False]
    await service.append_event(s, Event(actions=EventActions(state_delta={"n": 2})))
    assert await redis_client.script_exists(sha) == [True]
    got = await service.get_session(app_name=APP, user_id=USER, session_id=s.id)
    assert got is not None
    assert got.state == {"n": 2}


async def test_a_read_only_script_runs_from_tasks_side_by_side_on_fakeredis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fakeredis refuses the shebang of a read-only script, and the library turns it into
    a comment once per script object; tasks that ran it side by side all saw the refusal,
    and each must run the script, not raise it (a consolidation step's memory_related.lua
    under a FactWorker's concurrency did)."""
    async with backend("fake", monkeypatch) as client:
        script = _scripts.register(client, READ_HASHES)
        assert script.lua.script.startswith("#!lua")
        await client.hset("h", "f", "v")
        call = ReadHashes(["h"])
        replies = await asyncio.gather(*(_scripts.run(script, call) for _ in range(8)))
        assert len({repr(r) for r in replies}) == 1
        assert script.lua.script.startswith("--#!lua")


@pytest.fixture(params=["fake", pytest.param("real", marks=pytest.mark.real)])
async def text_client(request: pytest.FixtureRequest) -> Any:
    """A client with decode_responses=True: replies arrive as str, not bytes."""
    if request.param == "fake":
        client: Any = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), decode_responses=True)
    else:
        client = Redis.from_url(skip_without("REDIS_URL"), decode_responses=True)
        await client.flushdb()
    yield client
    await client.flushdb()
    await client.aclose()


async def test_works_with_a_decoding_client(text_client: Any) -> None:
    service = RedisSessionService(text_client)
    s = await service.create_session(app_name=APP, user_id=USER, state={"user:u": "ü"})
    await service.append_event(s, Event(actions=EventActions(state_delta={"k": [1, "✈"]})))
    got = await service.get_session(app_name=APP, user_id=USER, session_id=s.id)
    assert got == s
    [listed] = (await service.list_sessions(app_name=APP)).sessions
    assert listed.state == {"user:u": "ü", "k": [1, "✈"]}


async def test_ttl_slides_on_append_and_shared_state_stays(
    make_service: Any, redis_client: Any
) -> None:
    service = make_service(ttl_seconds=100)
    s = await service.create_session(app_name=APP, user_id=USER, state={"k": 1, "user:u": 1})
    keys = KeySpace().session(APP, USER, s.id)
    assert 0 < await redis_client.ttl(keys.meta) <= 100
    await redis_client.expire(keys.meta, 10)
    await service.append_event(s, Event(actions=EventActions(state_delta={"k": 2})))
    for key in (keys.meta, keys.state, keys.events, keys.event_ids):
        assert 90 < await redis_client.ttl(key) <= 100, key
    assert await redis_client.ttl(keys.user_state) == -1
    assert await redis_client.ttl(keys.app_sessions) == -1


@pytest.mark.parametrize("ttl", [300, "300s", "300", timedelta(minutes=5), 300.0])
async def test_a_session_ttl_overrides_the_default_and_slides(
    make_service: Any, redis_client: Any, ttl: Any
) -> None:
    service = make_service(ttl_seconds=100)
    s = await service.create_session(app_name=APP, user_id=USER, state={"k": 1}, ttl=ttl)
    keys = KeySpace().session(APP, USER, s.id)
    assert await redis_client.hget(keys.meta, "ttl") == b"300"
    assert 200 < await redis_client.ttl(keys.meta) <= 300
    await redis_client.expire(keys.meta, 10)
    await service.append_event(s, Event(actions=EventActions(state_delta={"k": 2})))
    for key in (keys.meta, keys.state, keys.events, keys.event_ids):
        assert 200 < await redis_client.ttl(key) <= 300, key
    # Another worker with another default still refreshes with the session's own TTL.
    other = make_service()
    await redis_client.expire(keys.meta, 10)
    await other.append_event(s, Event(actions=EventActions(state_delta={"k": 3})))
    assert 200 < await redis_client.ttl(keys.meta) <= 300


async def test_a_session_ttl_of_zero_keeps_it_forever(make_service: Any, redis_client: Any) -> None:
    service = make_service(ttl_seconds=100)
    s = await service.create_session(app_name=APP, user_id=USER, state={"k": 1}, ttl=0)
    await service.append_event(s, Event(actions=EventActions(state_delta={"k": 2})))
    keys = KeySpace().session(APP, USER, s.id)
    for key in (keys.meta, keys.state, keys.events, keys.event_ids):
        assert await redis_client.ttl(key) == -1, key
    # ... and without a default, a session TTL alone makes it expire.
    plain = make_service()
    t = await plain.create_session(app_name=APP, user_id=USER, ttl=50)
    await plain.append_event(t, Event(actions=EventActions(state_delta={"k": 2})))
    assert 0 < await redis_client.ttl(KeySpace().session(APP, USER, t.id).events) <= 50


async def test_expired_sessions_leave_the_indexes(make_service: Any, redis_client: Any) -> None:
    service = make_service(ttl_seconds=100)
    gone = await service.create_session(app_name=APP, user_id=USER)
    kept = await service.create_session(app_name=APP, user_id="other")
    keys = KeySpace().session(APP, USER, gone.id)
    # What expiry does, without waiting for it.
    await redis_client.delete(keys.meta, keys.state, keys.events, keys.event_ids)
    assert [s.id for s in (await service.list_sessions(app_name=APP)).sessions] == [kept.id]
    assert (await service.list_sessions(app_name=APP, user_id=USER)).sessions == []
    assert await redis_client.zrange(keys.user_sessions, 0, -1) == []
    assert await redis_client.zcard(keys.app_sessions) == 1


async def test_operator_sees_json_values(service: RedisSessionService, redis_client: Any) -> None:
    s = await service.create_session(app_name=APP, user_id=USER, state={"booking_step": "start"})
    await service.append_event(s, Event(author="u", actions=EventActions(state_delta={"n": 1})))
    keys = KeySpace().session(APP, USER, s.id)
    assert await redis_client.hget(keys.state, "booking_step") == b'"start"'
    meta = await redis_client.hgetall(keys.meta)
    assert meta[b"rev"] == b"1"
    assert meta[b"app_name"] == b"app"
    [(stream_id, fields)] = await redis_client.xrange(keys.events)
    assert fields[b"event"].startswith(b"{")
    assert stream_id.split(b"-")[0] == str(int(s.events[0].timestamp * 1000)).encode()


class CountingClient:
    """Wraps a client and counts round trips: each command, script call or pipeline."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.round_trips = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def evalsha(self, *args: Any) -> Any:
        self.round_trips += 1
        return await self._client.evalsha(*args)

    def register_script(self, source: str) -> Any:
        script = self._client.register_script(source)
        script.registered_client = self
        return script

    def pipeline(self, *args: Any, **kwargs: Any) -> Any:
        pipe = self._client.pipeline(*args, **kwargs)
        execute = pipe.execute

        async def counted(*a: Any, **kw: Any) -> Any:
            self.round_trips += 1
            return await execute(*a, **kw)

        pipe.execute = counted
        return pipe


async def test_round_trips_do_not_grow_with_history(redis_client: Any) -> None:
    counting = CountingClient(redis_client)
    cluster = RedisSessionService(redis_client)._engine.layout.name == "cluster"
    config = SessionServiceConfig(cluster=cluster)
    service = RedisSessionService(counting, config=config)  # type: ignore[arg-type]
    s = await service.create_session(app_name=APP, user_id=USER)
    await service.get_session(app_name=APP, user_id=USER, session_id=s.id)
    # The first call of each script may pay a NOSCRIPT reload; count steady state.
    await service.append_event(s, Event(actions=EventActions(state_delta={"n": 1})))
    for n in (2, 50):
        while len(s.events) < n:
            counting.round_trips = 0
            await service.append_event(s, Event(actions=EventActions(state_delta={"n": 1})))
            assert counting.round_trips == 1
        counting.round_trips = 0
        await service.get_session(app_name=APP, user_id=USER, session_id=s.id)
        # On a cluster too: one pipeline reads the user's slot and the app's together.
        assert counting.round_trips == 1
    await service.list_sessions(app_name=APP)  # the first use of a script also loads it
    for i in range(30):
        await service.create_session(app_name=APP, user_id=f"u{i}")
    counting.round_trips = 0
    assert len((await service.list_sessions(app_name=APP)).sessions) == 31
    assert counting.round_trips == 2
    counting.round_trips = 0
    page = await service.list_sessions_page(app_name=APP, order_by="created", page_size=10)
    assert len(page.sessions) == 10
    assert counting.round_trips == 2


def spy_on_close(client: Any) -> list[bool]:
    calls: list[bool] = []
    original = client.aclose

    async def aclose(*args: Any, **kwargs: Any) -> None:
        calls.append(True)
        await original(*args, **kwargs)

    client.aclose = aclose
    return calls


async def test_an_injected_client_stays_open(redis_client: Any) -> None:
    calls = spy_on_close(redis_client)
    async with RedisSessionService(redis_client) as service:
        await service.create_session(app_name=APP, user_id=USER)
    assert calls == []
    assert await redis_client.ping()


@pytest.mark.real
async def test_a_client_from_url_is_closed_with_the_service() -> None:
    owned = RedisSessionService.from_url(skip_without("REDIS_URL"))
    calls = spy_on_close(owned._client)
    async with owned:
        await owned.get_user_state(app_name=APP, user_id=USER)
    assert calls == [True]


def test_batch_decodes_restore_the_collector_state() -> None:
    import gc

    from redis_agent_sessions._redis.codec import gc_paused

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # a caller's own choice is kept
    finally:
        gc.enable()
    with pytest.raises(ZeroDivisionError), gc_paused():
        1 / 0  # noqa: B018
    assert gc.isenabled()


@pytest.mark.parametrize("optimistic_reads", [3, 0])
async def test_cluster_reads_by_pipeline_or_script_agree(
    redis_client: Any, optimistic_reads: int
) -> None:
    """The cluster layout reads a session optimistically (pipelined, metadata checked before
    and after) and falls back to a read-only script; both give the same session."""
    service = RedisSessionService(redis_client, config=SessionServiceConfig(cluster=True))
    service._engine.layout.optimistic_reads = optimistic_reads  # type: ignore[attr-defined]
    s = await service.create_session(app_name=APP, user_id=USER, state={"app:a": 0, "user:u": 0})
    for i in range(1, 6):
        delta = {"k": i, "user:u": i, "app:a": i}
        event = Event(timestamp=1000 + i, actions=EventActions(state_delta=delta))
        await service.append_event(s, event)
    ids = [e.id for e in s.events]
    cases = [
        (None, ids),
        (GetSessionConfig(num_recent_events=2), ids[-2:]),
        (GetSessionConfig(num_recent_events=0), []),
        (GetSessionConfig(after_timestamp=1003.0), ids[2:]),
    ]
    for config, expected in cases:
        got = await service.get_session(app_name=APP, user_id=USER, session_id=s.id, config=config)
        assert got is not None
        assert got.state == {"k": 5, "user:u": 5, "app:a": 5}
        assert got._revision == 5
        assert [e.id for e in got.events] == expected
    assert await service.get_session(app_name=APP, user_id=USER, session_id="nope") is None
