"""The session-service contract, run on fakeredis and on a real Redis (see conftest)."""

from __future__ import annotations

from typing import Any

import pytest

from redis_agent_sessions import (
    AlreadyExistsError,
    Content,
    Event,
    EventActions,
    GetSessionConfig,
    Part,
    RedisSessionService,
    SessionNotFoundError,
    StaleSessionError,
)

APP, USER = "booking_app", "user1"


def delta_event(delta: dict[str, Any], **kw: Any) -> Event:
    return Event(author="agent", actions=EventActions(state_delta=delta), **kw)


async def fresh(service: RedisSessionService, session_id: str, user: str = USER) -> Any:
    got = await service.get_session(app_name=APP, user_id=user, session_id=session_id)
    assert got is not None
    return got


# -- create / get / delete -------------------------------------------------------------------


async def test_create_then_get_round_trips(service: RedisSessionService) -> None:
    created = await service.create_session(
        app_name=APP, user_id=USER, state={"booking_step": "start", "user:name": "Ravi"}
    )
    got = await fresh(service, created.id)
    assert got == created
    assert got.state == {"booking_step": "start", "user:name": "Ravi"}
    assert got.events == []
    assert got.last_update_time == created.last_update_time


async def test_create_with_explicit_id(service: RedisSessionService) -> None:
    created = await service.create_session(app_name=APP, user_id=USER, session_id="s-1")
    assert created.id == "s-1"
    assert (await fresh(service, "s-1")).id == "s-1"


async def test_generated_ids_are_unique(service: RedisSessionService) -> None:
    ids = {(await service.create_session(app_name=APP, user_id=USER)).id for _ in range(20)}
    assert len(ids) == 20


async def test_get_missing_returns_none(service: RedisSessionService) -> None:
    assert await service.get_session(app_name=APP, user_id=USER, session_id="nope") is None
    await service.create_session(app_name=APP, user_id=USER, session_id="s")
    assert await service.get_session(app_name=APP, user_id="other", session_id="s") is None
    assert await service.get_session(app_name="other", user_id=USER, session_id="s") is None


async def test_duplicate_create_raises_and_writes_nothing(service: RedisSessionService) -> None:
    await service.create_session(
        app_name=APP, user_id=USER, session_id="s", state={"k": 1, "user:u": 1, "app:a": 1}
    )
    with pytest.raises(AlreadyExistsError, match="Session with id s already exists"):
        await service.create_session(
            app_name=APP,
            user_id=USER,
            session_id="s",
            state={"k": 2, "user:u": 2, "user:new": 1, "app:a": 2},
        )
    assert (await fresh(service, "s")).state == {"k": 1, "user:u": 1, "app:a": 1}
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"u": 1}
    assert await service.get_app_state(app_name=APP) == {"a": 1}


async def test_create_drops_temp_keys(service: RedisSessionService) -> None:
    created = await service.create_session(app_name=APP, user_id=USER, state={"temp:x": 1, "k": 2})
    assert created.state == {"k": 2}
    assert (await fresh(service, created.id)).state == {"k": 2}


async def test_delete_removes_session_and_events_keeps_shared_state(
    service: RedisSessionService,
) -> None:
    s = await service.create_session(app_name=APP, user_id=USER, state={"user:u": 1, "app:a": 1})
    await service.append_event(s, delta_event({"k": 1}))
    await service.delete_session(app_name=APP, user_id=USER, session_id=s.id)
    assert await service.get_session(app_name=APP, user_id=USER, session_id=s.id) is None
    assert (await service.list_sessions(app_name=APP, user_id=USER)).sessions == []
    assert (await service.list_sessions(app_name=APP)).sessions == []
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"u": 1}
    assert await service.get_app_state(app_name=APP) == {"a": 1}


async def test_delete_missing_is_a_noop(service: RedisSessionService) -> None:
    await service.delete_session(app_name=APP, user_id=USER, session_id="never")


async def test_recreate_after_delete_starts_empty(service: RedisSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    await service.append_event(s, delta_event({"k": 1}))
    await service.delete_session(app_name=APP, user_id=USER, session_id="s")
    again = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    got = await fresh(service, "s")
    assert got == again
    assert got.events == []
    assert got.state == {}


# -- append_event and scoped state -----------------------------------------------------------


async def test_system_event_touching_every_scope(service: RedisSessionService) -> None:
    """scenarios.md 2: one event writes session, user: and app: state; temp: is not stored."""
    s = await service.create_session(app_name="my_app", user_id="alice")
    delta = {
        "task_status": "active",
        "user:login_count": 5,
        "user:last_login": 1795367350.5597508,
        "app:maintenance_mode": False,
        "temp:validation_result": {"valid": True},
    }
    event = Event(
        invocation_id="inv_system_update",
        author="system",
        actions=EventActions(state_delta=dict(delta)),
    )
    returned = await service.append_event(s, event)
    assert returned is event
    # The caller's copy sees everything, temp included; the stored event does not carry temp.
    assert s.state["temp:validation_result"] == {"valid": True}
    assert "temp:validation_result" not in event.actions.state_delta
    assert s.events == [event]
    got = await service.get_session(app_name="my_app", user_id="alice", session_id=s.id)
    assert got is not None
    assert got.state == {k: v for k, v in delta.items() if not k.startswith("temp:")}
    assert got.events == [event]

    same_user = await service.create_session(app_name="my_app", user_id="alice")
    assert same_user.state["user:login_count"] == 5
    other_user = await service.create_session(app_name="my_app", user_id="bob")
    assert other_user.state == {"app:maintenance_mode": False}


async def test_scope_sharing_between_sessions(service: RedisSessionService) -> None:
    """scenarios.md 3."""
    await service.create_session(
        app_name="my_app",
        user_id="alice",
        session_id="s1",
        state={"app:theme": "dark", "user:language": "en", "context": "session1"},
    )
    s2 = await service.create_session(
        app_name="my_app", user_id="alice", session_id="s2", state={"context": "session2"}
    )
    assert s2.state == {"app:theme": "dark", "user:language": "en", "context": "session2"}


async def test_user_state_is_scoped_by_app(service: RedisSessionService) -> None:
    await service.create_session(app_name="a1", user_id=USER, state={"user:x": 1})
    s = await service.create_session(app_name="a2", user_id=USER)
    assert s.state == {}
    assert await service.get_user_state(app_name="a2", user_id=USER) == {}


async def test_deltas_replace_per_key_and_none_is_stored(service: RedisSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER, state={"d": {"a": 1, "b": 2}})
    await service.append_event(s, delta_event({"d": {"a": 9}, "gone": None, "user:z": None}))
    got = await fresh(service, s.id)
    assert got.state == {"d": {"a": 9}, "gone": None, "user:z": None}
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"z": None}


async def test_state_values_round_trip_exactly(service: RedisSessionService) -> None:
    value = {
        "float": 0.1 + 0.2,
        "big": 2**62,
        "neg": -1.5e-300,
        "unicode": "héllo ✈ 你好",
        "nested": [1, [2, {"x": None}], True],
        "empty": {},
        "empty_list": [],
    }
    s = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(s, delta_event({"v": value, "app:v": value}))
    got = await fresh(service, s.id)
    assert got.state == {"v": value, "app:v": value}
    assert got == s


async def test_event_numbers_beyond_64_bits_read_back_exactly(
    service: RedisSessionService,
) -> None:
    # State values must fit 64 bits (orjson writes them); event fields need not.
    numbers = {"big": 2**70, "edge": 2**63, "neg": -(2**64), "digits": "1" * 25, "f": 1e-300}
    s = await service.create_session(app_name=APP, user_id=USER)
    plain = Event(custom_metadata={"n": 1})
    await service.append_event(s, Event(custom_metadata=numbers, extra_field=[2**100]))
    await service.append_event(s, plain)
    got = await fresh(service, s.id)
    assert got.events[0].custom_metadata == numbers
    assert got.events[0].model_extra == {"extra_field": [2**100]}
    assert type(got.events[0].custom_metadata["big"]) is int
    assert got == s


async def test_session_read_back_equals_the_appended_copy(service: RedisSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER, state={"user:n": 1})
    for i in range(3):
        await service.append_event(s, delta_event({"i": i, "user:n": i}))
    got = await fresh(service, s.id)
    assert got == s
    assert got.last_update_time == s.events[-1].timestamp


async def test_partial_event_is_returned_untouched(service: RedisSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER)
    before = s.last_update_time
    event = delta_event({"k": 1, "temp:t": 1}, partial=True)
    assert await service.append_event(s, event) is event
    assert event.actions.state_delta == {"k": 1, "temp:t": 1}
    assert s.events == []
    assert s.state == {}
    got = await fresh(service, s.id)
    assert got.events == []
    assert got.last_update_time == before


async def test_event_content_and_unknown_fields_survive(service: RedisSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER)
    event = Event.model_validate(
        {
            "author": "model",
            "invocationId": "inv-1",
            "content": {
                "role": "model",
                "parts": [
                    {"text": "Searching"},
                    {"function_call": {"name": "search_flights", "args": {"origin": "NYC"}}},
                ],
            },
            "usage_metadata": {"total_token_count": 12},
            "node_info": {"path": ""},
            "long_running_tool_ids": ["b", "a"],
        }
    )
    await service.append_event(s, event)
    got = await fresh(service, s.id)
    dumped = got.events[0].model_dump(mode="json", exclude_none=True)
    assert dumped == event.model_dump(mode="json", exclude_none=True)
    assert dumped["content"]["parts"][1]["function_call"]["name"] == "search_flights"
    assert dumped["usage_metadata"] == {"total_token_count": 12}
    assert dumped["long_running_tool_ids"] == ["a", "b"]
    assert dumped["invocation_id"] == "inv-1"
    assert got.events[0].content == Content(
        role="model",
        parts=[
            Part(text="Searching"),
            Part.model_validate(
                {"function_call": {"name": "search_flights", "args": {"origin": "NYC"}}}
            ),
        ],
    )


async def test_append_to_missing_or_deleted_session(service: RedisSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    await service.delete_session(app_name=APP, user_id=USER, session_id="s")
    with pytest.raises(SessionNotFoundError, match="Session s not found"):
        await service.append_event(s, delta_event({"k": 1, "user:k": 1}))
    # The failed append did not resurrect the session or touch shared state.
    assert await service.get_session(app_name=APP, user_id=USER, session_id="s") is None
    assert await service.get_user_state(app_name=APP, user_id=USER) == {}
    assert (await service.list_sessions(app_name=APP)).sessions == []


# -- stale writers and retries ---------------------------------------------------------------


async def test_stale_writer_is_rejected_and_writes_nothing(service: RedisSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER)
    a = await fresh(service, s.id)
    b = await fresh(service, s.id)
    await service.append_event(a, delta_event({"k": "a", "user:who": "a"}))
    loser = delta_event({"k": "b", "user:who": "b", "app:x": 1, "temp:t": 1})
    with pytest.raises(StaleSessionError, match="modified in storage since it was loaded"):
        await service.append_event(b, loser)
    with pytest.raises(ValueError, match="Please reload the session"):
        await service.append_event(b, delta_event({"k": "b"}))
    assert loser.actions.state_delta["temp:t"] == 1  # the caller can retry the same event
    assert b.events == []
    got = await fresh(service, s.id)
    assert got.state == {"k": "a", "user:who": "a"}
    assert len(got.events) == 1
    assert await service.get_app_state(app_name=APP) == {}
    # Reloading and retrying lands.
    await service.append_event(got, loser)
    assert (await fresh(service, s.id)).state["k"] == "b"


async def test_merge_policy_applies_stale_writes(make_service: Any) -> None:
    service = make_service(stale_policy="merge")
    s = await service.create_session(app_name=APP, user_id=USER)
    a = await fresh(service, s.id)
    b = await fresh(service, s.id)
    await service.append_event(a, delta_event({"k": "a", "only_a": 1}))
    await service.append_event(b, delta_event({"k": "b", "only_b": 1}))
    got = await fresh(service, s.id)
    assert got.state == {"k": "b", "only_a": 1, "only_b": 1}
    assert len(got.events) == 2


async def test_retry_of_a_stored_event_is_a_noop(service: RedisSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER)
    event = delta_event({"n": 1})
    await service.append_event(s, event)
    assert await service.append_event(s, event) is event
    stale_copy = await fresh(service, s.id)
    await service.append_event(s, delta_event({"n": 2}))
    # Even from a stale copy, a re-delivered event is "already stored", not an error.
    assert await service.append_event(stale_copy, event) is event
    got = await fresh(service, s.id)
    assert [e.id for e in got.events] == [event.id, s.events[1].id]
    assert got.state == {"n": 2}
    assert len(s.events) == 2


async def test_retry_after_lost_reply_updates_the_callers_copy(
    service: RedisSessionService,
) -> None:
    s = await service.create_session(app_name=APP, user_id=USER)
    event = delta_event({"n": 1})
    # Another process delivered this event from an identical copy; our reply was "lost".
    twin = await fresh(service, s.id)
    await service.append_event(twin, event.model_copy(deep=True))
    await service.append_event(s, event)
    assert [e.id for e in s.events] == [event.id]
    assert s.state == {"n": 1}
    assert s == await fresh(service, s.id)
    await service.append_event(s, delta_event({"n": 2}))  # the copy is current again


async def test_session_without_revision_uses_last_event_id(
    service: RedisSessionService,
) -> None:
    s = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(s, delta_event({"n": 1}))
    by_hand = s.model_copy(deep=True)
    by_hand._revision = None
    await service.append_event(by_hand, delta_event({"n": 2}))
    outdated = s.model_copy(deep=True)
    outdated._revision = None
    with pytest.raises(StaleSessionError):
        await service.append_event(outdated, delta_event({"n": 3}))


# -- reading events --------------------------------------------------------------------------


async def _history(service: RedisSessionService, timestamps: list[float]) -> Any:
    s = await service.create_session(app_name=APP, user_id=USER)
    for i, ts in enumerate(timestamps):
        await service.append_event(s, delta_event({"i": i}, timestamp=ts))
    return s


async def test_num_recent_events(service: RedisSessionService) -> None:
    s = await _history(service, [1000.0 + i for i in range(10)])
    for n, want in [
        (0, []),
        (1, [9]),
        (3, [7, 8, 9]),
        (10, list(range(10))),
        (50, list(range(10))),
    ]:
        got = await service.get_session(
            app_name=APP,
            user_id=USER,
            session_id=s.id,
            config=GetSessionConfig(num_recent_events=n),
        )
        assert got is not None
        assert [e.actions.state_delta["i"] for e in got.events] == want
        assert got.state == {"i": 9}


async def test_after_timestamp_is_inclusive_and_exact(service: RedisSessionService) -> None:
    # Sub-millisecond timestamps share stream milliseconds; the filter must still be exact.
    s = await _history(service, [1000.0, 1000.0001, 1000.0002, 1000.0005, 1001.0])
    cases = [
        (1000.0002, [2, 3, 4]),
        (1000.00015, [2, 3, 4]),
        (999.0, [0, 1, 2, 3, 4]),
        (1000.9, [4]),
        (1002.0, []),
    ]
    for after, want in cases:
        got = await service.get_session(
            app_name=APP,
            user_id=USER,
            session_id=s.id,
            config=GetSessionConfig(after_timestamp=after),
        )
        assert got is not None
        assert [e.actions.state_delta["i"] for e in got.events] == want, after


async def test_after_timestamp_with_num_recent(service: RedisSessionService) -> None:
    s = await _history(service, [1000.0, 1000.0001, 1000.0002, 1000.0003, 1000.0004, 1000.0005])
    for after, n, want in [
        (1000.0002, 2, [4, 5]),
        (1000.0002, 10, [2, 3, 4, 5]),
        (1000.0004, 3, [4, 5]),
        (1000.00005, 5, [1, 2, 3, 4, 5]),
    ]:
        got = await service.get_session(
            app_name=APP,
            user_id=USER,
            session_id=s.id,
            config=GetSessionConfig(after_timestamp=after, num_recent_events=n),
        )
        assert got is not None
        assert [e.actions.state_delta["i"] for e in got.events] == want, (after, n)


async def test_events_keep_append_order_when_clocks_disagree(
    service: RedisSessionService,
) -> None:
    s = await _history(service, [2000.0, 1000.0, 3000.0, 1500.0])
    got = await fresh(service, s.id)
    assert [e.actions.state_delta["i"] for e in got.events] == [0, 1, 2, 3]
    assert [e.timestamp for e in got.events] == [2000.0, 1000.0, 3000.0, 1500.0]
    assert got.last_update_time == 1500.0
    filtered = await service.get_session(
        app_name=APP, user_id=USER, session_id=s.id, config=GetSessionConfig(after_timestamp=1800)
    )
    assert filtered is not None
    assert [e.actions.state_delta["i"] for e in filtered.events] == [0, 2]


def test_negative_num_recent_events_is_rejected() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        GetSessionConfig(num_recent_events=-1)


# -- listing -------------------------------------------------------------------------------


async def test_list_sessions_of_one_user_and_of_all(service: RedisSessionService) -> None:
    a1 = await service.create_session(app_name=APP, user_id="alice", state={"n": 1, "user:u": "a"})
    b1 = await service.create_session(app_name=APP, user_id="bob", state={"app:x": 1})
    a2 = await service.create_session(app_name=APP, user_id="alice")
    await service.create_session(app_name="other_app", user_id="alice")
    await service.append_event(a1, delta_event({"n": 2}))  # a1 becomes the most recent

    mine = (await service.list_sessions(app_name=APP, user_id="alice")).sessions
    assert [s.id for s in mine] == [a2.id, a1.id]
    assert all(s.events == [] for s in mine)
    assert mine[1].state == {"n": 2, "user:u": "a", "app:x": 1}

    everyone = (await service.list_sessions(app_name=APP)).sessions
    assert [s.id for s in everyone] == [b1.id, a2.id, a1.id]
    assert {s.user_id for s in everyone} == {"alice", "bob"}
    assert everyone[0].state == {"app:x": 1}
    assert (await service.list_sessions(app_name=APP, user_id="carol")).sessions == []
    assert (await service.list_sessions(app_name="nope")).sessions == []


async def test_listed_session_can_append(service: RedisSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER)
    [listed] = (await service.list_sessions(app_name=APP, user_id=USER)).sessions
    await service.append_event(listed, delta_event({"k": 1}))
    with pytest.raises(StaleSessionError):
        await service.append_event(s, delta_event({"k": 2}))


# -- ids and keys ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("app", "user", "sid"),
    [
        ("a:b", "c", "d"),
        ("a", "b:c", "d"),
        ("a", "b", "c:d"),
        ("{a}", "b}", "{c"),
        ("a b", "ü", "%3A"),
    ],
)
async def test_identifiers_with_separators_do_not_collide(
    service: RedisSessionService, app: str, user: str, sid: str
) -> None:
    s = await service.create_session(app_name=app, user_id=user, session_id=sid, state={"k": 1})
    await service.append_event(s, delta_event({"user:u": 1}))
    plain = await service.create_session(app_name="a", user_id="b", session_id="c")
    assert "k" not in plain.state
    got = await service.get_session(app_name=app, user_id=user, session_id=sid)
    assert got is not None
    assert (got.app_name, got.user_id, got.id) == (app, user, sid)
    assert got.state == {"k": 1, "user:u": 1}
    listed = (await service.list_sessions(app_name=app, user_id=user)).sessions
    same_user_as_plain = {("b", "c")} if (app, user) == ("a", "b") else set()
    assert {(x.user_id, x.id) for x in listed} == {(user, sid)} | same_user_as_plain
    everyone = (await service.list_sessions(app_name=app)).sessions
    assert (user, sid) in [(x.user_id, x.id) for x in everyone]


async def test_app_named_like_a_key_part_does_not_collide(service: RedisSessionService) -> None:
    await service.create_session(app_name="user_state", user_id="u", state={"app:x": 1})
    s = await service.create_session(app_name="app", user_id="user_state")
    assert s.state == {}
