"""Bad input gets a typed error and leaves Redis exactly as it was; bad data is named."""

from __future__ import annotations

import datetime
import math
from typing import Any

import pytest

from _snapshot import Snapshot, snapshot, snapshot_of_failing_slot
from redis_agent_sessions import (
    Content,
    CorruptDataError,
    Event,
    EventActions,
    IncompleteSessionError,
    InvalidInputError,
    MemoryEntry,
    Part,
    PayloadTooLargeError,
    RedisMemoryService,
    RedisSessionsError,
    RedisSessionService,
    Session,
    SessionServiceConfig,
)
from redis_agent_sessions._redis.codec import MAX_TIME, MIN_TIME
from redis_agent_sessions.config import MAX_TTL_SECONDS
from redis_agent_sessions.keys import KeySpace

APP, USER = "app", "user"


@pytest.fixture
async def populated(service: RedisSessionService) -> Any:
    s = await service.create_session(app_name=APP, user_id=USER, state={"k": 1, "user:u": 1})
    await service.append_event(s, Event(actions=EventActions(state_delta={"app:a": 1})))
    return s


async def test_every_backend_refuses_through_the_same_validation(
    populated: Any, service: RedisSessionService, make_service: Any, redis_client: Any
) -> None:
    """The suite's validation cases run on one backend per layout (tests/_backends.py
    VALIDATION): validation refuses before any command, so every backend must refuse each
    kind of bad input alike, with nothing written."""
    before = await snapshot(redis_client)
    refusals = [
        service.create_session(app_name="", user_id=USER),
        service.create_session(app_name=APP, user_id=USER, ttl="soon"),
        service.create_session(app_name=APP, user_id=USER, state={1: "x"}),
        service.append_event(populated, Event(actions=EventActions(state_delta={"k": {1, 2}}))),
        service.append_event(populated, Event(timestamp=1e300)),
        make_service(max_payload_bytes=64).append_event(
            populated, Event(actions=EventActions(state_delta={"k": "x" * 100}))
        ),
    ]
    for call in refusals:
        with pytest.raises(InvalidInputError):
            await call
    assert await snapshot(redis_client) == before


@pytest.mark.parametrize(
    "ttl", [-1, 1.5, "soon", "10m", True, "", [60], datetime.timedelta(seconds=0.5)]
)
async def test_a_bad_session_ttl_writes_nothing(
    populated: Any, service: RedisSessionService, redis_client: Any, ttl: Any
) -> None:
    before = await snapshot(redis_client)
    with pytest.raises(InvalidInputError, match="ttl must be whole seconds"):
        await service.create_session(app_name=APP, user_id=USER, ttl=ttl)
    assert await snapshot(redis_client) == before


@pytest.mark.parametrize(
    "ttl", [10**30, MAX_TTL_SECONDS + 1, float(10**16), "9" * 5000, "1" * 21 + "s"]
)
async def test_a_session_ttl_over_the_limit_writes_nothing(
    populated: Any, service: RedisSessionService, redis_client: Any, ttl: Any
) -> None:
    # Beyond the limit Redis refuses the expiry inside the script, after it wrote part of
    # the session (10**16 s: 'invalid expire time'; 10**30: 'not an integer').
    before = await snapshot(redis_client)
    with pytest.raises(InvalidInputError, match="ttl must be at most 3153600000 seconds"):
        await service.create_session(app_name=APP, user_id=USER, ttl=ttl)
    assert await snapshot(redis_client) == before


async def test_a_session_ttl_at_the_limit_is_kept(service: RedisSessionService) -> None:
    s = await service.create_session(app_name=APP, user_id=USER, ttl=MAX_TTL_SECONDS)
    await service.append_event(s, Event(timestamp=MAX_TIME))
    assert await service.get_session(app_name=APP, user_id=USER, session_id=s.id) == s


def test_a_service_ttl_over_the_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="less than or equal to 3153600000"):
        SessionServiceConfig(ttl_seconds=MAX_TTL_SECONDS + 1)


@pytest.mark.parametrize(
    "timestamp", [1e300, 2e16, -1e300, MAX_TIME + 1, MIN_TIME - 1, math.inf, 10**400, "5", None]
)
async def test_an_event_time_out_of_range_writes_nothing(
    service: RedisSessionService, redis_client: Any, populated: Any, timestamp: Any
) -> None:
    # 1e300 and 2e16 s are no stream id (XADD refused them inside the script, reported as
    # corrupt data); -1e300 was stored, and broke every reader that shows its time.
    before = await snapshot(redis_client)
    event = Event()
    event.timestamp = timestamp  # a model does not check what is assigned
    with pytest.raises(InvalidInputError, match="event timestamp must be"):
        await service.append_event(populated, event)
    assert await snapshot(redis_client) == before


class Unserializable:
    pass


BAD_VALUES = [
    Unserializable(),
    {1, 2},
    math.nan,
    math.inf,
    datetime.datetime(2026, 1, 1),
    {"nested": [1, {"deep": Unserializable()}]},
    {1: "non-string key"},
    b"bytes",
    2**70,
]


@pytest.mark.parametrize("value", BAD_VALUES, ids=lambda v: type(v).__name__)
async def test_unserializable_state_in_append_writes_nothing(
    service: RedisSessionService, redis_client: Any, populated: Any, value: Any
) -> None:
    before = await snapshot(redis_client)
    event = Event(actions=EventActions(state_delta={"ok": 1, "user:bad": value}))
    with pytest.raises(InvalidInputError, match="bad"):
        await service.append_event(populated, event)
    assert await snapshot(redis_client) == before
    assert len(populated.events) == 1
    assert "ok" not in populated.state


@pytest.mark.parametrize("value", BAD_VALUES[:3], ids=lambda v: type(v).__name__)
async def test_unserializable_state_in_create_writes_nothing(
    service: RedisSessionService, redis_client: Any, populated: Any, value: Any
) -> None:
    before = await snapshot(redis_client)
    with pytest.raises(InvalidInputError):
        await service.create_session(app_name=APP, user_id=USER, state={"app:x": 1, "v": value})
    assert await snapshot(redis_client) == before


LONE_SURROGATE = "a\ud800"
"""A str that UTF-8 cannot encode (what a bad decode with surrogateescape or JSON
``"\\ud800"`` yields); redis-py would fail on it while sending the command."""


@pytest.mark.parametrize("bad", ["", " x", "x\n", 5, None, "x" * 1025, LONE_SURROGATE])
async def test_bad_ids_are_rejected_everywhere(
    service: RedisSessionService, redis_client: Any, populated: Any, bad: Any
) -> None:
    before = await snapshot(redis_client)
    calls = [
        service.create_session(app_name=bad, user_id=USER),
        service.create_session(app_name=APP, user_id=bad),
        service.get_session(app_name=APP, user_id=bad, session_id="s"),
        service.list_sessions(app_name=bad),
        service.delete_session(app_name=APP, user_id=USER, session_id=bad),
        service.get_user_state(app_name=APP, user_id=bad),
        service.get_app_state(app_name=bad),
    ]
    if bad is not None:  # None is valid for these: a new uuid, every user
        calls.append(service.list_sessions(app_name=APP, user_id=bad))
        calls.append(service.create_session(app_name=APP, user_id=USER, session_id=bad))
        calls.append(service.get_session(app_name=APP, user_id=USER, session_id=bad))
    for call in calls:
        with pytest.raises(InvalidInputError):
            await call
    assert await snapshot(redis_client) == before


@pytest.mark.parametrize("scope", ["", "user:", "app:"])
async def test_lone_surrogate_state_keys_write_nothing(
    service: RedisSessionService, redis_client: Any, populated: Any, scope: str
) -> None:
    before = await snapshot(redis_client)
    key = scope + LONE_SURROGATE
    with pytest.raises(InvalidInputError, match="surrogate"):
        await service.create_session(app_name=APP, user_id=USER, state={"app:ok": 1, key: 1})
    with pytest.raises(InvalidInputError, match="surrogate"):
        await service.append_event(
            populated, Event(actions=EventActions(state_delta={"app:ok": 2, key: 2}))
        )
    assert await snapshot(redis_client) == before
    assert len(populated.events) == 1
    assert "app:ok" not in populated.state


@pytest.mark.parametrize(
    "value",
    [LONE_SURROGATE, [LONE_SURROGATE], {LONE_SURROGATE: 1}, {"k": {"deep": LONE_SURROGATE}}],
    ids=["str", "in-list", "dict-key", "nested"],
)
async def test_lone_surrogate_state_values_write_nothing(
    service: RedisSessionService, redis_client: Any, populated: Any, value: Any
) -> None:
    before = await snapshot(redis_client)
    with pytest.raises(InvalidInputError, match="surrogate"):
        await service.create_session(app_name=APP, user_id=USER, state={"user:v": value})
    with pytest.raises(InvalidInputError, match="surrogate"):
        await service.append_event(populated, Event(actions=EventActions(state_delta={"v": value})))
    assert await snapshot(redis_client) == before


async def test_lone_surrogate_event_fields_write_nothing(
    service: RedisSessionService, redis_client: Any, populated: Any
) -> None:
    before = await snapshot(redis_client)
    with pytest.raises(InvalidInputError, match="event id"):
        await service.append_event(populated, Event(id=LONE_SURROGATE))
    with pytest.raises(InvalidInputError, match="JSON"):
        await service.append_event(populated, Event(author=LONE_SURROGATE))
    for field in ("id", "app_name", "user_id"):
        # A session object built by hand reaches append_event without create's checks.
        forged = populated.model_copy(update={field: LONE_SURROGATE})
        with pytest.raises(InvalidInputError, match="surrogate"):
            await service.append_event(forged, Event(author="a"))
    assert await snapshot(redis_client) == before
    assert len(populated.events) == 1


async def test_non_ascii_text_outside_the_bmp_is_stored(
    service: RedisSessionService, populated: Any
) -> None:
    # The surrogate check must refuse only what UTF-8 cannot encode: a character outside
    # the BMP (a proper surrogate pair in UTF-16) is fine everywhere.
    name = "caf\u00e9-\U0001f600"
    s = await service.create_session(
        app_name=name, user_id=name, session_id=name, state={name: name, f"user:{name}": 1}
    )
    await service.append_event(
        s, Event(id=name, author=name, actions=EventActions(state_delta={f"app:{name}": [name]}))
    )
    again = await service.get_session(app_name=name, user_id=name, session_id=name)
    assert again is not None
    assert again.state == {name: name, f"user:{name}": 1, f"app:{name}": [name]}
    assert [e.id for e in again.events] == [name]


async def test_memory_rejects_lone_surrogates_and_writes_nothing(
    redis_client: Any, worker_client: Any, populated: Any
) -> None:
    # The memory service checks its ids and custom metadata with the same helpers.
    memory = RedisMemoryService(worker_client, backend="plain")
    text = Content(parts=[Part(text="hello world")])
    await memory.add_memory(app_name=APP, user_id=USER, memories=[MemoryEntry(content=text)])
    before = await snapshot(redis_client)
    bad = LONE_SURROGATE
    calls = [
        memory.add_memory(app_name=bad, user_id=USER, memories=[MemoryEntry(content=text)]),
        memory.add_memory(app_name=APP, user_id=USER, memories=[MemoryEntry(id=bad, content=text)]),
        memory.add_memory(
            app_name=APP,
            user_id=USER,
            memories=[MemoryEntry(content=text)],
            custom_metadata={bad: 1},
        ),
        memory.add_memory(
            app_name=APP,
            user_id=USER,
            memories=[MemoryEntry(content=text, custom_metadata={"k": [bad]})],
        ),
        memory.add_events_to_memory(
            app_name=APP, user_id=USER, session_id=bad, events=[Event(content=text)]
        ),
        memory.add_events_to_memory(
            app_name=APP, user_id=USER, events=[Event(id=bad, content=text)]
        ),
        memory.add_session_to_memory(
            Session(app_name=APP, user_id=bad, id="s", events=[Event(content=text)])
        ),
        memory.delete_memory(app_name=APP, user_id=USER, memory_id=bad),
        memory.search_memory(app_name=APP, user_id=bad, query="hello"),
        memory.add_events_to_memory(
            app_name=APP, user_id=USER, events=[Event(author=bad, content=text)]
        ),
        memory.add_memory(
            app_name=APP, user_id=USER, memories=[MemoryEntry(author=bad, content=text)]
        ),
    ]
    for call in calls:
        with pytest.raises(InvalidInputError, match="surrogate"):
            await call
    assert await snapshot(redis_client) == before


async def test_malformed_events_and_sessions(
    service: RedisSessionService, redis_client: Any, populated: Any
) -> None:
    before = await snapshot(redis_client)
    with pytest.raises(InvalidInputError, match="not an event"):
        await service.append_event(populated, {"author": "x"})  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="not a session"):
        await service.append_event({"id": "x"}, Event())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="timestamp"):
        await service.append_event(populated, Event(timestamp=math.nan))
    with pytest.raises(InvalidInputError, match="event id"):
        await service.append_event(populated, Event(id=""))
    with pytest.raises(InvalidInputError, match="JSON"):
        await service.append_event(populated, Event(custom_metadata={"x": Unserializable()}))
    assert await snapshot(redis_client) == before


async def test_oversized_payloads(make_service: Any, redis_client: Any) -> None:
    service = make_service(max_payload_bytes=2000)
    s = await service.create_session(app_name=APP, user_id=USER)
    before = await snapshot(redis_client)
    with pytest.raises(PayloadTooLargeError, match="over the limit of 2000 bytes"):
        await service.append_event(s, Event(actions=EventActions(state_delta={"k": "x" * 2000})))
    with pytest.raises(PayloadTooLargeError):
        await service.create_session(app_name=APP, user_id=USER, state={"k": "x" * 2000})
    # Keys count as much as values, and many small keys add up.
    with pytest.raises(PayloadTooLargeError):
        await service.create_session(app_name=APP, user_id=USER, state={"k" * 5000: 1})
    many = {f"key-{i:03d}": "v" * 30 for i in range(500)}
    with pytest.raises(PayloadTooLargeError):
        await service.create_session(app_name=APP, user_id=USER, state=many)
    with pytest.raises(PayloadTooLargeError):
        await service.append_event(s, Event(actions=EventActions(state_delta={"k" * 2000: 1})))
    # A delta is stored in the event and in the state: 950 bytes of it take ~1.9 KB.
    with pytest.raises(PayloadTooLargeError):
        await service.append_event(s, Event(actions=EventActions(state_delta={"k": "x" * 950})))
    assert await snapshot(redis_client) == before
    await service.append_event(s, Event(actions=EventActions(state_delta={"k": "x" * 500})))
    fits = {f"user:{'k' * 900}": 1, f"app:{'a' * 900}": 2, "s": "x" * 100}
    await service.create_session(app_name=APP, user_id=USER, state=fits)


async def test_payload_limit_counts_exactly(make_service: Any, redis_client: Any) -> None:
    """The limit is on bytes stored: keys as UTF-8 (a 3-byte character counts 3)."""
    service = make_service(max_payload_bytes=100)
    # "\u20ac" is 3 bytes; value 1 is 1 byte: 33 * 3 + 1 = 100 fits, one more byte does not.
    await service.create_session(app_name=APP, user_id=USER, state={"\u20ac" * 33: 1})
    with pytest.raises(PayloadTooLargeError, match="101 bytes"):
        await service.create_session(app_name=APP, user_id=USER, state={"\u20ac" * 33: 10})


def test_errors_share_one_root() -> None:
    for name in ("InvalidInputError", "PayloadTooLargeError", "CorruptDataError"):
        import redis_agent_sessions

        assert issubclass(getattr(redis_agent_sessions, name), RedisSessionsError)
    assert issubclass(InvalidInputError, ValueError)


# -- data corrupted by hand in Redis -----------------------------------------------------------


async def test_corrupt_state_json_names_the_key(
    service: RedisSessionService, redis_client: Any, populated: Any
) -> None:
    key = KeySpace().user_state(APP, USER)
    await redis_client.hset(key, "u", "{not json")
    with pytest.raises(CorruptDataError, match=r"user_state.*'u'"):
        await service.get_session(app_name=APP, user_id=USER, session_id=populated.id)


async def test_corrupt_event_json_names_the_key(
    service: RedisSessionService, redis_client: Any, populated: Any
) -> None:
    keys = KeySpace().session(APP, USER, populated.id)
    await redis_client.xadd(keys.events, {"event": '{"timestamp": "soon"}'})
    with pytest.raises(CorruptDataError, match=":events"):
        await service.get_session(app_name=APP, user_id=USER, session_id=populated.id)
    await redis_client.xadd(keys.events, {"other": "x"})
    with pytest.raises(CorruptDataError, match="no 'event' field"):
        await service.get_session(app_name=APP, user_id=USER, session_id=populated.id)


async def test_corrupt_metadata_names_the_key(
    service: RedisSessionService, redis_client: Any, populated: Any
) -> None:
    keys = KeySpace().session(APP, USER, populated.id)
    await redis_client.hset(keys.meta, "rev", "many")
    with pytest.raises(CorruptDataError, match=keys.meta.replace("{", r"\{").replace("}", r"\}")):
        await service.get_session(app_name=APP, user_id=USER, session_id=populated.id)
    with pytest.raises(CorruptDataError):
        await service.list_sessions(app_name=APP)


async def test_key_of_foreign_type_fails_before_any_write(
    service: RedisSessionService, redis_client: Any, populated: Any
) -> None:
    keys = KeySpace().session(APP, USER, populated.id)
    await redis_client.delete(keys.app_state)
    await redis_client.set(keys.app_state, "someone else's string")
    before = await snapshot_of_failing_slot(redis_client, service, APP)
    event = Event(actions=EventActions(state_delta={"k": 2, "app:a": 2}))
    with pytest.raises(CorruptDataError, match="app_state"):
        await service.append_event(populated, event)
    assert await snapshot_of_failing_slot(redis_client, service, APP) == before
    with pytest.raises(CorruptDataError, match="app_state"):
        await service.create_session(app_name=APP, user_id=USER)
    assert await snapshot_of_failing_slot(redis_client, service, APP) == before


@pytest.mark.parametrize("which", ["meta", "state", "user_state", "app_state", "events"])
async def test_reads_name_a_key_of_foreign_type(
    service: RedisSessionService, redis_client: Any, populated: Any, which: str
) -> None:
    key = getattr(KeySpace().session(APP, USER, populated.id), which)
    await redis_client.delete(key)
    await redis_client.rpush(key, "x")
    pattern = key.replace("{", r"\{").replace("}", r"\}")
    with pytest.raises(CorruptDataError, match=pattern):
        await service.get_session(app_name=APP, user_id=USER, session_id=populated.id)
    if which in ("user_state", "app_state"):
        with pytest.raises(CorruptDataError, match=pattern):
            await service.list_sessions(app_name=APP)


@pytest.mark.parametrize(
    "which", ["events", "event_ids", "meta", "state", "user_state", "app_state"]
)
async def test_append_names_any_key_of_foreign_type(
    service: RedisSessionService, redis_client: Any, populated: Any, which: str
) -> None:
    keys = KeySpace().session(APP, USER, populated.id)
    key = getattr(keys, which)
    await redis_client.delete(key)
    await redis_client.set(key, "x")

    async def take(client: Any, service: RedisSessionService) -> Snapshot:
        if which == "app_state":
            return await snapshot_of_failing_slot(client, service, APP)
        return await snapshot(client)

    before = await take(redis_client, service)
    with pytest.raises(CorruptDataError, match=key.replace("{", r"\{").replace("}", r"\}")):
        await service.append_event(
            populated, Event(actions=EventActions(state_delta={"k": 3, "user:u": 3, "app:a": 3}))
        )
    assert await take(redis_client, service) == before


async def test_get_session_config_must_be_ours(
    service: RedisSessionService, populated: Any
) -> None:
    with pytest.raises(InvalidInputError, match="config must be a GetSessionConfig, got dict"):
        await service.get_session(
            app_name=APP,
            user_id=USER,
            session_id=populated.id,
            config={"num_recent_events": 1},  # type: ignore[arg-type]
        )


@pytest.mark.parametrize(
    ("lost", "named"),
    [("events", "events"), ("event_ids", "event ids"), ("state", "session state")],
)
async def test_a_session_evicted_in_part_is_refused_everywhere_and_can_be_deleted(
    service: RedisSessionService, redis_client: Any, populated: Any, lost: str, named: str
) -> None:
    """What Redis does to a session under an evicting maxmemory-policy (one key goes),
    done by hand: every read and write names what is missing, nothing is written, and the
    session can still be deleted (tests/test_memory_pressure.py has the real eviction)."""
    where = {"app_name": APP, "user_id": USER, "session_id": populated.id}
    await service.get_session(**where)  # the read cache, when on, holds it
    await redis_client.delete(getattr(KeySpace().session(APP, USER, populated.id), lost))
    before = await snapshot(redis_client)
    with pytest.raises(IncompleteSessionError, match=named) as refused:
        await service.get_session(**where)
    assert (refused.value.session_id, refused.value.missing) == (populated.id, [named])
    with pytest.raises(IncompleteSessionError, match=named):
        await service.refresh(populated)
    with pytest.raises(IncompleteSessionError, match=named):
        await service.append_event(populated, Event(actions=EventActions(state_delta={"k": 2})))
    with pytest.raises(IncompleteSessionError, match=named):
        await anext(service.watch(**where, from_beginning=True))
    if lost != "state":
        with pytest.raises(IncompleteSessionError, match=named):
            await service.list_events(**where)
    else:  # a listing checks the state it returns
        with pytest.raises(IncompleteSessionError, match=named):
            await service.list_sessions(app_name=APP, user_id=USER)
    assert await snapshot(redis_client) == before
    await service.delete_session(**where)
    assert await service.get_session(**where) is None
