"""The documented least-privilege ACL (docs/security.md), command by command, on real servers.

The contract suites run as the documented user (the ``acl`` backends in conftest.py and
test_memory.py), which shows the line grants enough. Here, for each command of the line, a
user lacking just that one runs a workflow touching every operation: some step must be
refused (so the command is needed: the line is least privilege) with PermissionDeniedError
naming it, and the refused step must leave the database exactly as it was.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from _acl import acl_user, readme_commands, readme_rules
from _backends import backend
from _snapshot import snapshot, within
from redis_agent_sessions import (
    Content,
    Event,
    EventActions,
    GetSessionConfig,
    MemoryEntry,
    Part,
    PermissionDeniedError,
    RedisMemoryService,
    RedisSessionService,
    SessionServiceConfig,
)
from redis_agent_sessions.keys import KeySpace

pytestmark = [pytest.mark.real, pytest.mark.acl]

APP, USER = "acl_app", "ann"
Step = Callable[[], Awaitable[Any]]


# Valkey: its scripts' redis.acl_check_cmd and its refusals are what names a missing command.
VALKEY = pytest.param("REDIS_VALKEY_URL", marks=pytest.mark.valkey)


# The acl kinds: not database 0 where the server allows it, as the documented line must work
# for any (the user needs SELECT). RediSearch indexes only database 0 ("Cannot create index on
# db != 0").
KINDS = {"REDIS_URL": "acl", "REDIS_SEARCH_URL": "search-acl", "REDIS_VALKEY_URL": "valkey-acl"}


@pytest.fixture(params=["REDIS_URL", "REDIS_SEARCH_URL", VALKEY])
async def admin(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Redis]:
    async with backend(KINDS[request.param], monkeypatch) as client:
        yield client


def text_event(words: str, **delta: Any) -> Event:
    return Event(
        author="user",
        content=Content(role="user", parts=[Part(text=words)]),
        actions=EventActions(state_delta=delta),
    )


def workflow(worker: Redis, *, cluster_layout: bool, search: bool) -> list[tuple[str, Step]]:
    """Every operation, in an order where each step can run once the ones before did."""
    config = SessionServiceConfig(ttl_seconds=600, cluster=cluster_layout or None)
    sessions = RedisSessionService(worker, config=config)
    memory = RedisMemoryService(worker, config=config, backend="auto" if search else "plain")
    got: dict[str, Any] = {}

    async def create() -> None:
        got["s"] = await sessions.create_session(
            app_name=APP, user_id=USER, session_id="s1", state={"k": 1, "user:u": 1, "app:a": 1}
        )

    async def append() -> None:
        got["s"] = await sessions.get_session(app_name=APP, user_id=USER, session_id="s1")
        await sessions.append_event(got["s"], text_event("paris trip", k=2, **{"user:u": 2}))
        await sessions.append_event(got["s"], text_event("rome hotel", **{"app:a": 2}))

    async def second_session() -> None:
        await sessions.create_session(app_name=APP, user_id=USER, session_id="s2")

    async def read() -> None:
        await sessions.get_session(app_name=APP, user_id=USER, session_id="s1")
        recent = GetSessionConfig(num_recent_events=1)
        await sessions.get_session(app_name=APP, user_id=USER, session_id="s1", config=recent)
        await sessions.get_user_state(app_name=APP, user_id=USER)
        await sessions.get_app_state(app_name=APP)
        ids = {"app_name": APP, "user_id": USER, "session_id": "s1"}
        page = await sessions.list_events(**ids, limit=1, newest_first=True)
        await sessions.list_events(
            **ids, limit=1, newest_first=True, page_token=page.next_page_token
        )
        async for _ in sessions.watch(**ids, from_beginning=True, block_ms=10):
            break

    async def listing() -> None:
        await sessions.list_sessions(app_name=APP, user_id=USER)
        await sessions.list_sessions(app_name=APP)
        await sessions.list_sessions_page(app_name=APP, user_id=USER, page_size=1)
        await sessions.list_sessions_page(app_name=APP, order_by="created")

    async def memory_backend() -> None:
        # Records the deployment's backend in ras:mem:backend (once, for every worker).
        await memory.backend()

    async def remember() -> None:
        session = await sessions.get_session(app_name=APP, user_id=USER, session_id="s1")
        assert session is not None
        await memory.add_session_to_memory(session)
        got["turn"] = session.events[0].id
        # Re-ingesting a session that lost an event drops that event's entry.
        session.events = session.events[:1]
        await memory.add_session_to_memory(session)
        await memory.add_events_to_memory(app_name=APP, user_id=USER, events=session.events)
        note = MemoryEntry(id="m1", content=Content(parts=[Part(text="paris note 東京駅")]))
        await memory.add_memory(app_name=APP, user_id=USER, memories=[note])

    async def another_worker() -> None:
        other = RedisMemoryService(worker, config=config, backend="auto" if search else "plain")
        await other.add_memory(
            app_name=APP,
            user_id=USER,
            memories=[MemoryEntry(id="m2", content=Content(parts=[Part(text="paris again")]))],
        )

    async def recall() -> None:
        found = await memory.search_memory(app_name=APP, user_id=USER, query="paris hotel")
        assert found.memories
        found = await memory.search_memory(app_name=APP, user_id=USER, query="東京")
        assert found.memories

    async def reindex() -> None:
        # One user (run_as marks their entries as of an older analysis): the whole store
        # (an operator's run) walks the keyspace with SCAN.
        report = await memory.reindex(app_name=APP, user_id=USER)
        assert report.reindexed

    async def forget() -> None:
        # A turn of a session: the turns around it are indexed again without its words.
        await memory.delete_memory(app_name=APP, user_id=USER, memory_id=got["turn"])
        await memory.delete_memory(app_name=APP, user_id=USER, memory_id="m1")
        await memory.delete_memory(app_name=APP, user_id=USER)

    async def delete() -> None:
        await sessions.delete_session(app_name=APP, user_id=USER, session_id="s1")

    async def prune() -> None:
        # s2 vanished without delete_session (as by TTL): the listing drops its index entries.
        await listing()

    return [
        ("create", create),
        ("append", append),
        ("second_session", second_session),
        ("read", read),
        ("listing", listing),
        ("memory_backend", memory_backend),
        ("remember", remember),
        ("another_worker", another_worker),
        ("recall", recall),
        ("reindex", reindex),
        ("forget", forget),
        ("delete", delete),
        ("prune", prune),
    ]


async def run_as(admin: Redis, worker: Redis, *, cluster_layout: bool, search: bool) -> None:
    """The workflow; raises the first step's error after checking it changed nothing."""
    await admin.script_flush()  # so SCRIPT LOAD is needed, and checked, too
    keys = KeySpace("ras")
    for name, step in workflow(worker, cluster_layout=cluster_layout, search=search):
        if name == "prune":
            await admin.delete(*[k async for k in admin.scan_iter(match="ras:*s2*")])
        if name == "reindex":
            # A session's entries as if written by an earlier analysis: `reindex` reads the
            # session's turns, then analyses them again.
            for member in await admin.smembers(keys.memory_session(APP, USER, "s1")):
                await admin.hset(keys.memory_entry(APP, USER, member.decode()), "an", "1")
        before = await snapshot(admin)
        try:
            await step()
        except PermissionDeniedError as exc:
            after = await snapshot(admin)
            if cluster_layout and exc.key and exc.key.startswith(APP_SLOT):
                # The app's slot refused the second step: the first (the user's slot) has
                # landed, its app writes pending in the outbox, as after any failed app step,
                # and its user registered for the sweep (in the app's slot, before the first).
                before, after = within(before, APP_SLOT), within(after, APP_SLOT)
                for data in (before, after):
                    data.pop(f"{APP_SLOT}app_pending".encode(), None)
            assert after == before, f"step {name} changed data, then was refused"
            raise


APP_SLOT = f"ras:{{{APP}}}:"


@pytest.mark.parametrize("layout", ["single", "cluster-layout"])
async def test_the_readme_user_runs_every_operation(admin: Redis, layout: str) -> None:
    search = await _has_search(admin)
    async with acl_user(admin, search=search) as worker:
        await run_as(admin, worker, cluster_layout=layout != "single", search=search)


@pytest.mark.cluster
@pytest.mark.parametrize(
    "variable",
    ["REDIS_CLUSTER_URL", pytest.param("REDIS_VALKEY_CLUSTER_URL", marks=pytest.mark.valkey)],
)
async def test_the_readme_user_runs_every_operation_on_a_cluster(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kind = {"REDIS_CLUSTER_URL": "cluster", "REDIS_VALKEY_CLUSTER_URL": "valkey-cluster"}[variable]
    async with backend(kind, monkeypatch) as admin:
        async with acl_user(admin) as worker:
            await run_as(admin, worker, cluster_layout=True, search=False)
        # Without the cluster rules the client cannot even learn the topology.
        for command in readme_rules()["cluster"]:
            async with acl_user(admin, without=command[1:]) as worker:
                with pytest.raises(Exception, match=r"permission|NOPERM|cannot be connected"):
                    await run_as(admin, worker, cluster_layout=True, search=False)


async def _has_search(admin: Redis) -> bool:
    modules = await admin.execute_command("MODULE", "LIST")
    return any(b"search" in (m if isinstance(m, list) else list(m.values())) for m in modules)


# The base line is checked where memory uses the plain backend, the search rules where it
# uses RediSearch (which needs none of the plain backend's posting commands).
ONE_MISSING = [
    *[("REDIS_URL", c) for c in readme_commands()],
    *[("REDIS_SEARCH_URL", c) for c in readme_commands(search=True)[len(readme_commands()) :]],
    *[pytest.param("REDIS_VALKEY_URL", c, marks=pytest.mark.valkey) for c in readme_commands()],
]


@pytest.mark.parametrize(("admin", "command"), ONE_MISSING, indirect=["admin"])
async def test_each_command_of_the_line_is_needed(admin: Redis, command: str) -> None:
    search = await _has_search(admin)
    refused: list[PermissionDeniedError] = []
    for layout in (False, True):
        await admin.flushdb()
        async with acl_user(admin, search=search, without=command) as worker:
            try:
                await run_as(admin, worker, cluster_layout=layout, search=search)
            except PermissionDeniedError as exc:
                refused.append(exc)
    assert refused, f"+{command} is in the documented line but nothing needed it"
    assert any(exc.command == command.upper() for exc in refused), [str(e) for e in refused]


async def test_ttl_without_expire_writes_nothing(admin: Redis) -> None:
    """The case that showed the bug: create_session with a TTL as a user lacking EXPIRE used
    to leave the session behind without expiry."""
    async with acl_user(admin, without="expire") as worker:
        config = SessionServiceConfig(ttl_seconds=60)
        service = RedisSessionService(worker, config=config)
        with pytest.raises(PermissionDeniedError, match="EXPIRE") as caught:
            await service.create_session(app_name=APP, user_id=USER, session_id="s")
        assert caught.value.command == "EXPIRE"
        assert str(caught.value.key).startswith("ras:")
        assert await snapshot(admin) == {}
        # Without a TTL the same user needs no EXPIRE.
        plain = RedisSessionService(worker)
        session = await plain.create_session(app_name=APP, user_id=USER, session_id="s")
        before = await snapshot(admin)
        with pytest.raises(PermissionDeniedError, match="EXPIRE"):
            await service.append_event(session, Event(actions=EventActions(state_delta={"k": 1})))
        assert await snapshot(admin) == before
        # A session's own TTL (given at create) is found in the script, still before any write.
        with pytest.raises(PermissionDeniedError, match="EXPIRE"):
            await plain.create_session(app_name=APP, user_id=USER, session_id="t", ttl=60)
        own = await RedisSessionService(admin).create_session(
            app_name=APP, user_id=USER, session_id="t", ttl=60
        )
        before = await snapshot(admin)
        with pytest.raises(PermissionDeniedError, match="EXPIRE"):
            await plain.append_event(own, Event(actions=EventActions(state_delta={"k": 1})))
        assert await snapshot(admin) == before


async def test_a_key_outside_the_prefix_is_refused(admin: Redis) -> None:
    async with acl_user(admin) as worker:
        other = RedisSessionService(worker, config=SessionServiceConfig(key_prefix="other"))
        with pytest.raises(PermissionDeniedError) as caught:
            await other.create_session(app_name=APP, user_id=USER)
        assert str(caught.value.key).startswith("other:")
        with pytest.raises(PermissionDeniedError):
            await other.get_session(app_name=APP, user_id=USER, session_id="s")
        assert await snapshot(admin) == {}
