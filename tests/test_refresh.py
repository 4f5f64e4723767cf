"""refresh(session): a held copy brought up to date in place, reading only what it lacks.

Runs on every backend of the contract suites (conftest.py), through the core and the ADK
services. Each test that claims an O(new events) read counts the events decoded.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from _spies import decoded
from redis_agent_sessions import (
    CorruptDataError,
    GetSessionConfig,
    InvalidInputError,
    RedisSessionService,
    SessionNotFoundError,
    StaleSessionError,
)
from test_sessions import APP, USER, delta_event, fresh

try:  # the [adk] extra: the tests that use it are marked, and skip without it
    from google.adk.errors.session_not_found_error import (
        SessionNotFoundError as AdkNotFoundError,
    )
    from google.adk.events import Event as AdkEvent
    from google.adk.events import EventActions as AdkActions

    from redis_agent_sessions.adk import RedisSessionService as AdkService
except ImportError:
    pass


async def _with_events(service: RedisSessionService, n: int) -> Any:
    s = await service.create_session(app_name=APP, user_id=USER, state={"step": 0})
    for i in range(n):
        await service.append_event(s, delta_event({"step": i + 1}))
    return s


# 0: on a cluster, the snapshot is taken by read_session.lua instead of a pipeline.
@pytest.mark.parametrize("optimistic_reads", [3, 0])
async def test_refresh_reads_only_the_new_events(
    service: RedisSessionService, optimistic_reads: int
) -> None:
    service._engine.layout.optimistic_reads = optimistic_reads  # type: ignore[attr-defined]
    s = await _with_events(service, 5)
    held = await fresh(service, s.id)
    events_list = held.events
    await service.append_event(s, delta_event({"step": 6, "user:seen": True}))
    await service.append_event(s, delta_event({"app:fare": "EUR", "temp:x": 1}))
    await service.append_event(s, delta_event({"step": 8}))
    with decoded(service) as counts:
        assert await service.refresh(held) is held
    assert counts == [3]
    assert held.events is events_list
    assert held == await fresh(service, s.id)
    assert held._revision == 8
    assert held.state == {"step": 8, "user:seen": True, "app:fare": "EUR"}
    await service.append_event(held, delta_event({"step": 9}))  # current: accepted
    assert (await fresh(service, s.id)).state["step"] == 9


async def test_refresh_of_a_current_copy_changes_nothing(service: RedisSessionService) -> None:
    s = await _with_events(service, 3)
    before = s.model_copy(deep=True)
    with decoded(service) as counts:
        await service.refresh(s)
    assert counts == [0]
    assert s == before


async def test_refresh_is_the_retry_for_a_stale_writer(service: RedisSessionService) -> None:
    s = await _with_events(service, 2)
    mine = await fresh(service, s.id)
    await service.append_event(s, delta_event({"other": "wrote"}))
    event = delta_event({"mine": "too"})
    with pytest.raises(StaleSessionError):
        await service.append_event(mine, event)
    await service.refresh(mine)
    await service.append_event(mine, event)
    got = await fresh(service, s.id)
    assert got == mine
    assert got.state == {"step": 2, "other": "wrote", "mine": "too"}


async def test_refresh_of_a_new_session_copy(service: RedisSessionService) -> None:
    created = await service.create_session(app_name=APP, user_id=USER, state={"a": 1})
    other = await fresh(service, created.id)
    await service.append_event(other, delta_event({"a": 2}))
    await service.append_event(other, delta_event({"b": 3}))
    with decoded(service) as counts:
        await service.refresh(created)
    assert counts == [2]
    assert created == other


async def test_refresh_of_a_deleted_session_raises_and_leaves_the_copy(
    service: RedisSessionService,
) -> None:
    s = await _with_events(service, 2)
    before = s.model_copy(deep=True)
    await service.delete_session(app_name=APP, user_id=USER, session_id=s.id)
    with pytest.raises(SessionNotFoundError):
        await service.refresh(s)
    assert s == before


async def test_refresh_after_delete_and_create_reads_the_new_session(
    service: RedisSessionService,
) -> None:
    s = await _with_events(service, 3)
    held = await fresh(service, s.id)
    events_list = held.events
    await service.delete_session(app_name=APP, user_id=USER, session_id=s.id)
    again = await service.create_session(app_name=APP, user_id=USER, session_id=s.id)
    await service.append_event(again, delta_event({"new": 1}))
    await service.refresh(held)
    assert held == await fresh(service, s.id)
    assert held.events is events_list
    assert [e.actions.state_delta for e in held.events] == [{"new": 1}]


@pytest.mark.parametrize("optimistic_reads", [3, 0])
async def test_refresh_after_the_same_events_were_rewritten(
    service: RedisSessionService, optimistic_reads: int
) -> None:
    """Re-created with the copy's event ids, but the newest one now sits at another
    revision: the copy's position cannot be trusted, so it is read whole."""
    service._engine.layout.optimistic_reads = optimistic_reads  # type: ignore[attr-defined]
    s = await _with_events(service, 2)
    held = await fresh(service, s.id)
    first, second = (e.model_copy(deep=True) for e in held.events)
    await service.delete_session(app_name=APP, user_id=USER, session_id=s.id)
    again = await service.create_session(app_name=APP, user_id=USER, session_id=s.id)
    await service.append_event(again, second)
    await service.append_event(again, delta_event({"x": 1}))
    await service.append_event(again, first)
    with decoded(service) as counts:
        await service.refresh(held)
    assert counts[-1] == 3
    assert held == await fresh(service, s.id)


async def test_refresh_of_a_narrowed_copy_keeps_its_window(service: RedisSessionService) -> None:
    s = await _with_events(service, 6)
    recent = await service.get_session(
        app_name=APP, user_id=USER, session_id=s.id, config=GetSessionConfig(num_recent_events=2)
    )
    assert recent is not None
    await service.append_event(s, delta_event({"step": 7}))
    with decoded(service) as counts:
        await service.refresh(recent)
    assert counts == [1]
    assert [e.id for e in recent.events] == [e.id for e in s.events[-3:]]
    assert recent.state == s.state
    await service.append_event(recent, delta_event({"step": 8}))


async def test_refresh_of_a_copy_without_revision_reads_it_whole(
    service: RedisSessionService,
) -> None:
    s = await _with_events(service, 4)
    by_hand = s.model_copy(deep=True)
    by_hand._revision = None
    await service.append_event(s, delta_event({"step": 5}))
    with decoded(service) as counts:
        await service.refresh(by_hand)
    assert counts == [5]
    assert by_hand == await fresh(service, s.id)


async def test_refresh_of_a_copy_that_lost_its_newest_event(service: RedisSessionService) -> None:
    """The copy's newest event is at another revision than the copy claims."""
    s = await _with_events(service, 3)
    odd = s.model_copy(deep=True)
    odd.events.pop(0)
    odd._revision = 3
    odd.events.insert(0, odd.events.pop())  # its newest is now revision 2's event
    await service.refresh(odd)
    assert odd == await fresh(service, s.id)


async def test_refresh_after_a_merged_stale_write(make_service: Any) -> None:
    service = make_service(stale_policy="merge")
    s = await _with_events(service, 1)
    a = await fresh(service, s.id)
    b = await fresh(service, s.id)
    await service.append_event(a, delta_event({"k": "a"}))
    await service.append_event(b, delta_event({"k": "b"}))  # merged over a's write
    assert len(b.events) == 2  # b never saw a's event
    await service.refresh(b)
    assert b == await fresh(service, s.id)
    assert len(b.events) == 3


async def test_refresh_when_event_clocks_go_backwards(service: RedisSessionService) -> None:
    now = time.time()
    s = await service.create_session(app_name=APP, user_id=USER)
    for i, offset in enumerate([0.0, -5.0, 1.0]):
        await service.append_event(s, delta_event({"i": i}, timestamp=now + offset))
    held = await fresh(service, s.id)
    for i, offset in enumerate([-10.0, -10.0, 2.0], start=3):
        await service.append_event(s, delta_event({"i": i}, timestamp=now + offset))
    with decoded(service) as counts:
        await service.refresh(held)
    assert counts == [3]
    assert held == await fresh(service, s.id)


async def test_refresh_drops_temp_state(service: RedisSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(s, delta_event({"temp:scratch": 1, "kept": 2}))
    assert s.state == {"temp:scratch": 1, "kept": 2}
    await service.refresh(s)
    assert s.state == {"kept": 2}


async def test_refresh_refuses_what_is_not_a_session(service: RedisSessionService) -> None:
    with pytest.raises(InvalidInputError):
        await service.refresh({"id": "x"})  # type: ignore[arg-type]
    s = await service.create_session(app_name=APP, user_id=USER)
    s.user_id = ""
    with pytest.raises(InvalidInputError):
        await service.refresh(s)


async def test_refresh_of_corrupt_new_event_leaves_the_copy(
    service: RedisSessionService, redis_client: Any
) -> None:
    s = await _with_events(service, 2)
    held = await fresh(service, s.id)
    await service.append_event(s, delta_event({"step": 3}))
    keys = service._engine.keys.session(APP, USER, s.id)
    [(entry_id, _)] = await redis_client.xrevrange(keys.events, count=1)
    await redis_client.xdel(keys.events, entry_id)
    await redis_client.xadd(keys.events, {"event": b"{not json"})
    before = held.model_copy(deep=True)
    with pytest.raises(CorruptDataError):
        await service.refresh(held)
    assert held == before


# -- through the ADK extra -----------------------------------------------------------------


@pytest.mark.adk
async def test_adk_refresh_reads_only_the_new_events(worker_client: Any) -> None:
    service = AdkService(worker_client)
    s = await service.create_session(app_name=APP, user_id=USER)
    for i in range(3):
        await service.append_event(
            s, AdkEvent(author="a", actions=AdkActions(state_delta={"user:i": i}))
        )
    held = await fresh(service, s.id)
    await service.append_event(s, AdkEvent(author="a", actions=AdkActions(state_delta={"n": 1})))
    with decoded(service) as counts:
        await service.refresh(held)
    assert counts == [1]
    assert held == await fresh(service, s.id)
    assert held._storage_update_marker == "4"
    await service.delete_session(app_name=APP, user_id=USER, session_id=s.id)
    with pytest.raises(AdkNotFoundError):
        await service.refresh(held)
