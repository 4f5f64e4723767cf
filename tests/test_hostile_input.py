"""Hostile input to the session API, core and ADK facade (issue 52): state keys that are not
strings, state nested past the depth limit, and key prefixes whose keys would be another
prefix's. Each refusal is the exact typed error, and every key of the database has the same
type and DUMP bytes after it as before."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from _snapshot import snapshot
from redis_agent_sessions import (
    Event,
    InvalidInputError,
    RedisSessionService,
    SessionServiceConfig,
)
from redis_agent_sessions._redis.codec import MAX_DEPTH
from redis_agent_sessions.keys import LAYOUT_WORDS, KeySpace, SessionKeys

APP, USER = "app", "user"


def nested(levels: int) -> Any:
    """A value of ``levels`` lists and objects, one inside the other (0: a number)."""
    value: Any = 1
    for i in range(levels):
        value = {"k": value} if i % 2 else [value]
    return value


class Facade:
    """One session API (the core's or the ADK drop-in's) and its event models."""

    def __init__(self, kind: str, client: Any) -> None:
        self.kind = kind
        if kind == "core":
            self.service: Any = RedisSessionService(client)
            self._event: Any = Event
            return
        from google.adk.events import Event as AdkEvent

        from redis_agent_sessions.adk import RedisSessionService as AdkService

        self.service = AdkService(client)
        self._event = AdkEvent

    def event(self, delta: dict[Any, Any]) -> Any:
        """An event setting ``delta``, put in after validation (as a caller changing its
        event's dict in place does: the models would refuse some of it)."""
        event = self._event(author="agent", invocation_id="i")
        event.actions.state_delta = delta
        return event


@pytest.fixture(params=["core", pytest.param("adk", marks=pytest.mark.adk)])
async def facade(request: pytest.FixtureRequest, worker_client: Any) -> Facade:
    return Facade(request.param, worker_client)


async def refused(
    client: Any, calls: list[Callable[[], Awaitable[Any]]], match: str
) -> list[InvalidInputError]:
    """Run each call against a populated database: each raises InvalidInputError matching
    ``match`` and leaves every key exactly as it was."""
    # One snapshot before them all: each call must leave the store as the first found it,
    # so the state after one is the state before the next.
    errors: list[InvalidInputError] = []
    before = await snapshot(client)
    for call in calls:
        with pytest.raises(InvalidInputError, match=match) as caught:
            await call()
        assert type(caught.value) is InvalidInputError
        assert await snapshot(client) == before
        errors.append(caught.value)
    return errors


BAD_KEYS = [1, None, (1, 2), b"k", 1.5, frozenset({"a"})]


async def test_state_keys_that_are_not_strings_write_nothing(
    facade: Facade, redis_client: Any
) -> None:
    service = facade.service
    session = await service.create_session(app_name=APP, user_id=USER, state={"k": 1})
    await service.append_event(session, facade.event({"user:u": 1, "app:a": 1}))
    calls: list[Callable[[], Awaitable[Any]]] = []
    for bad in BAD_KEYS:
        # Beside good keys of every scope, so a write of the good part would show.
        state = {"s": 1, "user:x": 2, "app:y": 3, bad: "v"}
        calls.append(lambda s=state: service.create_session(app_name=APP, user_id=USER, state=s))
        calls.append(lambda s=state: service.append_event(session, facade.event(s)))
    errors = await refused(redis_client, calls, "state keys must be strings")
    assert str(errors[0]) == "state keys must be strings, got int 1"
    assert len(session.events) == 1
    assert "s" not in session.state


@pytest.mark.parametrize("scope", ["", "user:", "app:", "temp:"])
async def test_state_nested_past_the_limit_writes_nothing(
    facade: Facade, redis_client: Any, scope: str
) -> None:
    service = facade.service
    session = await service.create_session(app_name=APP, user_id=USER, state={"k": 1})
    calls: list[Callable[[], Awaitable[Any]]] = []
    for levels in (MAX_DEPTH + 1, 10_000):
        state = {"s": 1, f"{scope}deep": nested(levels)}
        calls.append(lambda s=state: service.create_session(app_name=APP, user_id=USER, state=s))
        calls.append(lambda s=state: service.append_event(session, facade.event(s)))
    if scope == "temp:":
        # temp: values are never stored, so never refused: nothing of them reaches Redis.
        for call in calls:
            await call()
        return
    errors = await refused(redis_client, calls, f"more than {MAX_DEPTH} levels deep")
    where = {"": "session", "user:": "user", "app:": "app"}[scope]
    assert str(errors[0]) == (
        f"state value 'deep' ({where} scope) nests lists and objects more than 100 levels deep"
    )
    assert session.events == []
    assert "s" not in session.state


async def test_state_at_the_depth_limit_is_stored_and_read_back(facade: Facade) -> None:
    # Every reader takes what the limit lets through, pydantic's JSON parser (the events)
    # and orjson (the state hashes) alike, with validation on or off (``validate``).
    service = facade.service
    deepest = {"s": nested(MAX_DEPTH), "user:u": nested(MAX_DEPTH), "app:a": nested(MAX_DEPTH)}
    created = await service.create_session(app_name=APP, user_id=USER, state=deepest)
    await service.append_event(created, facade.event({"e": nested(MAX_DEPTH)}))
    again = await service.get_session(app_name=APP, user_id=USER, session_id=created.id)
    assert again is not None
    assert again.state == {**deepest, "e": nested(MAX_DEPTH)}
    assert again.events[0].actions.state_delta == {"e": nested(MAX_DEPTH)}


# -- key prefixes ---------------------------------------------------------------------------

# "apps" is refused with the other words though only one key ends there today ("ras:apps"):
# the rule reserves every word the layout puts right after a prefix.
COLLIDING = ["ras:mem", "ras:demo", "ras:apps", "a:b:mem", "ras::mem", "ras:mem:x", "x:demo:"]
FINE = ["ras", "mem", "demo", "apps", "ras:memory", "prod:ras-demo-1a2b", "ras:", "a:b:c", "a b"]


@pytest.mark.parametrize("prefix", COLLIDING)
def test_a_prefix_with_a_layout_word_after_a_colon_is_refused(prefix: str) -> None:
    word = next(p for p in prefix.split(":")[1:] if p in LAYOUT_WORDS)
    rule = f"key prefix {prefix!r} has {word!r} after a ':'"
    with pytest.raises(InvalidInputError, match=rule):
        KeySpace(prefix)
    with pytest.raises(ValueError, match=rule):
        SessionServiceConfig(key_prefix=prefix)
    with pytest.raises(InvalidInputError, match=rule):
        RedisSessionService.from_url(f"redis://localhost/0?key_prefix={prefix}")


@pytest.mark.parametrize("prefix", FINE)
def test_prefixes_that_cannot_collide_are_accepted(prefix: str) -> None:
    assert KeySpace(prefix).prefix == SessionServiceConfig(key_prefix=prefix).key_prefix


async def test_the_issues_collision_is_refused_before_anything_is_written(
    redis_client: Any, worker_client: Any
) -> None:
    # Issue 52: prefix "ras:mem"'s session hash "ras:mem:{a:u}:session:s1" is prefix "ras"'s
    # memory set of that session. A config that skipped validation is refused by the keys.
    sessions = RedisSessionService(worker_client)
    await sessions.create_session(app_name="a", user_id="u", session_id="s0")
    before = await snapshot(redis_client)
    unchecked = SessionServiceConfig().model_copy(update={"key_prefix": "ras:mem"})
    with pytest.raises(InvalidInputError, match="has 'mem' after a ':'"):
        RedisSessionService(worker_client, config=unchecked)
    assert await snapshot(redis_client) == before


# Parts a prefix may be made of: the layout's words, its other fixed names, and a few others.
_PARTS = st.sampled_from(
    [*LAYOUT_WORDS, "ras", "", "x", "stats", "df", "ctx", "idx", "vidx", "backend", "vectors"]
)
_PREFIXES = st.lists(_PARTS, min_size=1, max_size=4).map(":".join).filter(bool)
# A key of one prefix can only be another's when one prefix extends the other past a ':'.
_EXTENDED = st.tuples(_PREFIXES, st.lists(_PARTS, min_size=1, max_size=3)).map(
    lambda drawn: (drawn[0], ":".join([drawn[0], *drawn[1]]))
)
_PAIRS = st.one_of(st.tuples(_PREFIXES, _PREFIXES), _EXTENDED)
_IDS = st.sampled_from(["a", "u", "mem", "apps", "demo", "s1", "a:b", "{x}", "x}:y"])
# What a KeySpace builds besides keys and index names: patterns, a parser, and what each
# search index covers (checked apart).
_COVERS = {"memory_index_prefix", "memory_user_index_prefix", "memory_app_index_prefix"}
_NOT_KEYS = {
    "app_acl_keys",
    "job_shard",
    "memory_entries_pattern",
    "memory_owner",
    "session",
    *_COVERS,
}
_NOT_KEY_FIELDS = {"app_member", "user_member", "app_name"}


def _built(space: KeySpace, ids: list[str]) -> tuple[set[str], set[str]]:
    """(every key and index name ``space`` builds from ``ids``, its indexes' key prefixes)."""
    names: set[str] = set()
    covers: set[str] = set()
    for name, method in inspect.getmembers(space, inspect.ismethod):
        if name.startswith("_") or (name in _NOT_KEYS and name not in _COVERS):
            continue
        arity = len(inspect.signature(method).parameters)
        if name == "demo":  # any number of parts
            names.update(method(*ids[:n]) for n in range(1, len(ids) + 1))
            continue
        built = method(*ids[:arity])
        if dataclasses.is_dataclass(built):  # a set of keys (one queue shard's)
            names.update(v for v in dataclasses.asdict(built).values() if isinstance(v, str))
            continue
        (covers if name in _COVERS else names).add(built)
    keys = space.session(*ids[:3])
    names.update(
        getattr(keys, f) for f in SessionKeys.__dataclass_fields__ if f not in _NOT_KEY_FIELDS
    )
    return names, covers


@given(_PAIRS, st.lists(_IDS, min_size=4, max_size=4))
@settings(max_examples=300)
# The collisions the rule prevents, always tried: the issue's, and the demo's keys.
@example(("ras", "ras:mem"), ["a", "u", "s1", "x"])
@example(("ras", "ras:demo"), ["mem", "backend", "s1", "x"])
@example(("ras", "ras:demo"), ["apps", "u", "s1", "x"])
def test_no_two_accepted_prefixes_share_a_key(pair: tuple[str, str], ids: list[str]) -> None:
    first, second = pair
    spaces = []
    for prefix in (first, second):
        breaks_rule = bool(set(prefix.split(":")[1:]) & set(LAYOUT_WORDS))
        try:
            spaces.append(KeySpace(prefix))
        except InvalidInputError:
            assert breaks_rule
        else:
            assert not breaks_rule
    if len(spaces) < 2 or first == second:
        return
    (mine, my_covers), (theirs, their_covers) = (_built(s, ids) for s in spaces)
    assert not mine & theirs
    # Nor does a search index of one cover the other's keys.
    assert not any(k.startswith(c) for k in theirs for c in my_covers)
    assert not any(k.startswith(c) for k in mine for c in their_covers)
