"""Hostile input to the session API, core and ADK facade (issue 52): state keys that are not
strings and state nested past the depth limit. Each refusal is the exact typed error, and
every key of the database has the same type and DUMP bytes after it as before."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from redis_agent_sessions import (
    Event,
    InvalidInputError,
    RedisSessionService,
)
from redis_agent_sessions._redis.codec import MAX_DEPTH

APP, USER = "app", "user"


async def dumps(client: Any) -> dict[bytes, tuple[bytes, bytes]]:
    """Every key's TYPE and DUMP: two equal snapshots mean a byte-identical database."""
    keys = [key async for key in client.scan_iter(count=1000)]
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
        pipe.dump(key)
    replies = await pipe.execute() if keys else []
    kinds = [k.encode() if isinstance(k, str) else k for k in replies[::2]]
    return dict(zip(keys, zip(kinds, replies[1::2], strict=True), strict=True))


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
    errors = []
    for call in calls:
        before = await dumps(client)
        with pytest.raises(InvalidInputError, match=match) as caught:
            await call()
        assert type(caught.value) is InvalidInputError
        assert await dumps(client) == before
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
