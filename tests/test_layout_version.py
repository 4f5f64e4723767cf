"""The layout version a store records (``ras:layout``, docs/layout-spec.md): recorded by the
first write, checked by every service's first operation, never overwritten; a store of a
newer layout is refused before anything is read or written."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from _backends import backend, pick, worker
from _snapshot import snapshot
from redis_agent_sessions import (
    Event,
    EventActions,
    LayoutVersionError,
    RedisMemoryService,
    RedisSessionService,
    SessionServiceConfig,
)
from redis_agent_sessions._redis.layout_version import LAYOUT_VERSION
from redis_agent_sessions.keys import KeySpace

APP, USER = "layout_app", "ann"
LAYOUT_KEY = KeySpace().layout()


@pytest.fixture(params=pick("fake", "fake-slots", "real", "cluster", "acl"))
async def clients(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Any, Any]]:
    async with backend(request.param, monkeypatch) as admin, worker(request.param, admin) as w:
        yield admin, w


def test_this_release_writes_layout_1() -> None:
    assert LAYOUT_VERSION == 1
    assert LAYOUT_KEY == "ras:layout"
    assert KeySpace("tenant:a").layout() == "tenant:a:layout"


async def test_a_fresh_store_records_layout_1(clients: tuple[Any, Any]) -> None:
    admin, client = clients
    service = RedisSessionService(client)
    assert await service.get_session(app_name=APP, user_id=USER, session_id="s") is None
    # A read records nothing: a store is only recorded as one this release wrote.
    assert await admin.get(LAYOUT_KEY) is None
    await service.create_session(app_name=APP, user_id=USER, session_id="s")
    assert await admin.get(LAYOUT_KEY) == b"1"
    # Another service finds it and writes nothing more.
    other = RedisSessionService(client)
    before = await snapshot(admin)
    assert await other.get_session(app_name=APP, user_id=USER, session_id="s") is not None
    assert await snapshot(admin) == before


async def test_a_store_without_the_record_is_layout_1_and_gets_it(
    clients: tuple[Any, Any],
) -> None:
    """A store written before the layout was recorded: read and written as layout 1, and
    recorded by the first append."""
    admin, client = clients
    session = await RedisSessionService(admin).create_session(
        app_name=APP, user_id=USER, session_id="s", state={"k": 1}
    )
    await admin.delete(LAYOUT_KEY)
    service = RedisSessionService(client)
    got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert got is not None
    assert got.state == {"k": 1}
    assert await admin.get(LAYOUT_KEY) is None
    await service.append_event(got, Event(author="a", actions=EventActions(state_delta={"k": 2})))
    assert await admin.get(LAYOUT_KEY) == b"1"
    assert session.id == "s"


@pytest.mark.parametrize("found", ["2", "10", "0", "two"])
async def test_a_newer_layout_is_refused_before_anything_is_touched(
    clients: tuple[Any, Any], found: str
) -> None:
    admin, client = clients
    await RedisSessionService(admin).create_session(
        app_name=APP, user_id=USER, session_id="s", state={"k": 1}
    )
    await admin.set(LAYOUT_KEY, found)
    before = await snapshot(admin)
    service = RedisSessionService(client)
    calls = [
        service.get_session(app_name=APP, user_id=USER, session_id="s"),
        service.create_session(app_name=APP, user_id=USER, session_id="t"),
        service.list_sessions(app_name=APP, user_id=USER),
        service.delete_session(app_name=APP, user_id=USER, session_id="s"),
    ]
    for call in calls:
        with pytest.raises(LayoutVersionError) as caught:
            await call
        assert (caught.value.found, caught.value.supported) == (found, 1)
        assert f"layout {found}" in str(caught.value)
        assert "layout 1" in str(caught.value)
        assert caught.value.key == LAYOUT_KEY
    assert await snapshot(admin) == before


async def test_the_record_is_never_downgraded(clients: tuple[Any, Any]) -> None:
    """A worker that started before a newer one recorded its layout writes on; its record
    (SET NX) leaves the newer one."""
    admin, client = clients
    service = RedisSessionService(client)
    assert await service.get_session(app_name=APP, user_id=USER, session_id="s") is None
    await admin.set(LAYOUT_KEY, "2")
    await service.create_session(app_name=APP, user_id=USER, session_id="s")
    assert await admin.get(LAYOUT_KEY) == b"2"


async def test_each_prefix_has_its_own_record(clients: tuple[Any, Any]) -> None:
    admin, client = clients
    await admin.set(LAYOUT_KEY, "2")
    if client is not admin:  # the least-privilege user's keys are under ras: only
        return
    config = SessionServiceConfig(key_prefix="other")
    service = RedisSessionService(client, config=config)
    await service.create_session(app_name=APP, user_id=USER, session_id="s")
    assert await admin.get("other:layout") == b"1"


async def test_memory_refuses_a_newer_layout_too(clients: tuple[Any, Any]) -> None:
    admin, client = clients
    await admin.set(LAYOUT_KEY, "2")
    memory = RedisMemoryService(client, backend="plain")
    with pytest.raises(LayoutVersionError):
        await memory.search_memory(app_name=APP, user_id=USER, query="anything")
    # The refused search wrote nothing: the newer layout's record is all there is.
    assert {k: kind for k, (kind, _, _) in (await snapshot(admin)).items()} == {
        LAYOUT_KEY.encode(): "string"
    }
    assert await admin.get(LAYOUT_KEY) == b"2"
