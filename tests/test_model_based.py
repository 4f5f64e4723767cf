"""Random operation sequences checked against a small pure-Python model of the semantics."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from _backends import backend
from _servers import skip_without
from redis_agent_sessions import (
    AlreadyExistsError,
    Event,
    EventActions,
    GetSessionConfig,
    RedisSessionService,
    Session,
    SessionNotFoundError,
    SessionServiceConfig,
    StaleSessionError,
)
from redis_agent_sessions.state import merge_state, split_state_delta, without_temp

APPS, USERS, SIDS = ["a1", "a:2"], ["u1", "u{2}"], ["s1", "s 2"]
KEYS = ["k", "k2", "app:x", "user:y", "user:z", "temp:t"]
values = st.one_of(
    st.none(), st.integers(-3, 3), st.text(max_size=3), st.lists(st.integers(-9, 9), max_size=2)
)
states = st.dictionaries(st.sampled_from(KEYS), values, max_size=4)
where = st.tuples(st.sampled_from(APPS), st.sampled_from(USERS), st.sampled_from(SIDS))
ops = st.one_of(
    st.tuples(st.just("create"), where, states),
    st.tuples(st.just("append"), where, states, st.booleans()),
    st.tuples(st.just("get"), where, st.one_of(st.none(), st.integers(0, 3))),
    st.tuples(st.just("list"), st.sampled_from(APPS), st.one_of(st.none(), st.sampled_from(USERS))),
    st.tuples(st.just("delete"), where),
)


# Once failed at random (issue 28): the model kept only the last of two events for
# num_recent_events=3. Every variant always runs it, with the other edges of the window.
WHERE = ("a1", "u1", "s1")
FEWER_EVENTS_THAN_ASKED = [
    ("create", WHERE, {}),
    ("append", WHERE, {"k": 1}, True),
    ("append", WHERE, {"k": 2}, True),
    ("get", WHERE, 3),
    ("get", WHERE, 2),
    ("get", WHERE, 1),
    ("get", WHERE, 0),
    ("get", WHERE, None),
]


@dataclass
class ModelSession:
    state: dict[str, Any]
    deltas: list[dict[str, Any]] = field(default_factory=list)
    revision: int = 0


@dataclass
class Model:
    """The reference: ADK semantics with stale-writer rejection, in plain dicts."""

    sessions: dict[tuple[str, str, str], ModelSession] = field(default_factory=dict)
    users: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    apps: dict[str, dict[str, Any]] = field(default_factory=dict)

    def apply(self, app: str, user: str, delta: dict[str, Any]) -> dict[str, Any]:
        scoped = split_state_delta(delta)
        self.users.setdefault((app, user), {}).update(scoped.user)
        self.apps.setdefault(app, {}).update(scoped.app)
        return scoped.session

    def merged(self, app: str, user: str, sid: str) -> dict[str, Any]:
        return merge_state(
            self.sessions[app, user, sid].state,
            self.users.get((app, user), {}),
            self.apps.get(app, {}),
        )


def recent(deltas: list[dict[str, Any]], n: int | None) -> list[dict[str, Any]]:
    """ADK's ``num_recent_events``: ``None`` keeps every event, ``0`` none, and ``n`` the last
    ``n`` in append order, all of them when the session has fewer."""
    if n is None:
        return deltas
    return deltas[-n:] if n else []


async def run(service: RedisSessionService, steps: list[Any]) -> None:
    model = Model()
    held: dict[tuple[str, str, str], Session] = {}
    for step in steps:
        kind, *args = step
        if kind == "create":
            (app, user, sid), state = args
            if (app, user, sid) in model.sessions:
                with pytest.raises(AlreadyExistsError):
                    await service.create_session(
                        app_name=app, user_id=user, session_id=sid, state=state
                    )
                continue
            created = await service.create_session(
                app_name=app, user_id=user, session_id=sid, state=state
            )
            model.sessions[app, user, sid] = ModelSession(model.apply(app, user, state))
            assert created.state == model.merged(app, user, sid)
            held[app, user, sid] = created
        elif kind == "append":
            (app, user, sid), delta, use_held = args
            copy = held.get((app, user, sid)) if use_held else None
            if copy is None:
                copy = await service.get_session(app_name=app, user_id=user, session_id=sid)
            stored = model.sessions.get((app, user, sid))
            if copy is None:
                assert stored is None
                continue
            event = Event(author="t", actions=EventActions(state_delta=dict(delta)))
            if stored is None:
                with pytest.raises(SessionNotFoundError):
                    await service.append_event(copy, event)
            elif copy._revision != stored.revision:
                with pytest.raises(StaleSessionError):
                    await service.append_event(copy, event)
            else:
                await service.append_event(copy, event)
                stored.state.update(model.apply(app, user, without_temp(delta)))
                stored.deltas.append(without_temp(delta))
                stored.revision += 1
                held[app, user, sid] = copy
        elif kind == "get":
            (app, user, sid), n = args
            got = await service.get_session(
                app_name=app,
                user_id=user,
                session_id=sid,
                config=GetSessionConfig(num_recent_events=n),
            )
            if (app, user, sid) not in model.sessions:
                assert got is None
                continue
            assert got is not None
            stored = model.sessions[app, user, sid]
            assert got.state == model.merged(app, user, sid)
            assert [e.actions.state_delta for e in got.events] == recent(stored.deltas, n)
            held[app, user, sid] = got
        elif kind == "list":
            app, user = args
            listed = (await service.list_sessions(app_name=app, user_id=user)).sessions
            want_ids = {(u, s) for (a, u, s) in model.sessions if a == app and user in (None, u)}
            assert {(s.user_id, s.id) for s in listed} == want_ids
            for s in listed:
                assert s.state == model.merged(app, s.user_id, s.id)
                assert s.events == []
            times = [s.last_update_time for s in listed]
            assert times == sorted(times)
        else:
            ((app, user, sid),) = args
            await service.delete_session(app_name=app, user_id=user, session_id=sid)
            model.sessions.pop((app, user, sid), None)
        for (app, user), state in model.users.items():
            assert await service.get_user_state(app_name=app, user_id=user) == state


async def on_backend(kind: str, check: Callable[[Any], Awaitable[None]]) -> None:
    """``check`` on an empty backend of the registry, one per example: hypothesis refuses
    function-scoped fixtures (pytest's ``monkeypatch`` among them), and each example runs in
    its own event loop, which a client may not outlive."""
    with pytest.MonkeyPatch.context() as patch:
        async with backend(kind, patch) as client:
            await check(client)


def test_the_model_window_is_adks() -> None:
    """The reference itself: more events asked than stored gives them all, 0 gives none."""
    deltas: list[dict[str, Any]] = [{"k": 1}, {"k": 2}]
    assert recent(deltas, 3) == recent(deltas, 2) == recent(deltas, None) == deltas
    assert recent(deltas, 1) == [{"k": 2}]
    assert recent(deltas, 0) == recent([], 3) == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=1, max_size=25))
@example(FEWER_EVENTS_THAN_ASKED)
@pytest.mark.fake
def test_fakeredis_matches_the_model(steps: list[Any]) -> None:
    asyncio.run(on_backend("fake", lambda client: run(RedisSessionService(client), steps)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=1, max_size=25))
@example(FEWER_EVENTS_THAN_ASKED)
@pytest.mark.fake
@pytest.mark.cluster
def test_cluster_layout_matches_the_model(steps: list[Any]) -> None:
    """The cluster code path on fakeredis, every script and transaction checked to stay
    in one hash slot."""

    def check(client: Any) -> Awaitable[None]:
        return run(RedisSessionService(client, config=SessionServiceConfig(cluster=True)), steps)

    asyncio.run(on_backend("fake-slots", check))


# Module-scoped, so that hypothesis accepts them, and so that a missing server skips before
# any example is drawn (the examples' clients come from the registry, which reads the same
# variables).
@pytest.fixture(scope="module")
def cluster_url() -> str:
    return skip_without("REDIS_CLUSTER_URL")


@pytest.fixture(scope="module")
def redis_url() -> str:
    return skip_without("REDIS_URL")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=1, max_size=25))
@example(FEWER_EVENTS_THAN_ASKED)
@pytest.mark.real
@pytest.mark.cluster
def test_real_cluster_matches_the_model(cluster_url: str, steps: list[Any]) -> None:
    asyncio.run(on_backend("cluster", lambda client: run(RedisSessionService(client), steps)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=1, max_size=25))
@example(FEWER_EVENTS_THAN_ASKED)
@pytest.mark.real
def test_real_redis_matches_the_model(redis_url: str, steps: list[Any]) -> None:
    asyncio.run(on_backend("real", lambda client: run(RedisSessionService(client), steps)))
