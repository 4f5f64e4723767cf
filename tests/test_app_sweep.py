"""The sweep of app-scope writes that dead workers left half done (cluster layout).

On a cluster an app-scope write (an ``app:`` key, the app-wide index entry of a create or a
delete) is recorded in the user's slot, then applied in the app's. A worker dying between the
two steps leaves the write visible to that user only. Workers register the user in the app's
slot before the first step (``ras:{<app>}:app_pending``); ``sweep_app_writes`` applies what
registered users left pending. These tests kill workers between the steps (the layout's
app step replaced by a lost connection), then check that a sweep makes every reader see what
one-step application on a single node gives, applies each write once however often and
concurrently it runs, keeps what it must keep in the registry, and does nothing on a single
node. They run on a slot-checking fakeredis, the cluster layout on a real node, and a real
cluster; the CLI and the ACL tests on real servers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any

import fakeredis
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from _acl import acl_user
from _backends import backend, pick
from _cli import Cli
from _snapshot import snapshot
from redis_agent_sessions import (
    Event,
    EventActions,
    InvalidInputError,
    RedisSessionService,
    SessionNotFoundError,
    SessionServiceConfig,
    StaleSessionError,
    SweepReport,
)
from redis_agent_sessions.keys import KeySpace, escape
from redis_agent_sessions.sessions import _sweep

APP, OTHER = "sweep_app", "sweep other"
KEYS = KeySpace()


@dataclass
class Target:
    """A client and how services are built on it."""

    client: Any
    config: SessionServiceConfig

    def service(self) -> RedisSessionService:
        return RedisSessionService(self.client, config=self.config)


@pytest.fixture(
    params=[
        *pick("fake-slots"),
        # The registry's real node, with the services told it is a cluster.
        pytest.param("layout", marks=[pytest.mark.real, pytest.mark.cluster]),
        *pick("cluster"),
    ]
)
async def target(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The cluster code path: on a slot-checking fakeredis, on one real node
    (``cluster=True``), and on a real cluster."""
    layout = request.param == "layout"
    async with backend("real" if layout else request.param, monkeypatch) as client:
        yield Target(
            client, SessionServiceConfig(cluster=True) if layout else SessionServiceConfig()
        )


@pytest.fixture
def bound(monkeypatch: pytest.MonkeyPatch) -> float:
    """Workers trust a registration for 0.1 s (not a minute), so a sweep may look at users
    registered 0.2 s ago: the smallest ``older_than`` it then takes."""
    monkeypatch.setattr(_sweep, "REGISTER_EVERY", 0.1)
    return 0.2


async def aged(bound: float) -> None:
    """Until every registration made so far is older than ``bound``."""
    await asyncio.sleep(bound * 1.5)


def dies(service: RedisSessionService) -> RedisSessionService:
    """``service``'s worker dies right after each user-slot step: no app step follows, nor
    the apps index write of a create."""

    async def died(*args: Any, **kwargs: Any) -> Any:
        raise RedisConnectionError("the worker died between the two steps")

    layout: Any = service._engine.layout
    layout.created = died
    layout.settle = died
    return service


def event(delta: dict[str, Any]) -> Event:
    return Event(author="agent", actions=EventActions(state_delta=delta))


async def scenario(setup: RedisSessionService, worker: RedisSessionService, *, dead: bool) -> None:
    """Sessions made by a healthy worker; then app-scope writes of five users (an append, two
    by one user, creates, a delete, the first session of another app) by ``worker``, which
    (``dead``) dies after each one's user-slot step."""

    async def attempt(op: Awaitable[Any]) -> None:
        if not dead:
            await op
            return
        with pytest.raises(RedisConnectionError):
            await op

    ann = await setup.create_session(app_name=APP, user_id="ann", session_id="a")
    await setup.create_session(app_name=APP, user_id="bob", session_id="b1")
    await setup.create_session(app_name=APP, user_id="cat", session_id="c1")
    await setup.create_session(
        app_name=APP, user_id="dave", session_id="d", state={"app:motd": "hi"}
    )
    eve = await setup.create_session(app_name=APP, user_id="eve", session_id="e")
    await attempt(worker.append_event(ann, event({"app:color": "red", "app:size": "L", "n": 1})))
    # A version starts with the writing shard's clock: a few ms later is newer on any shard.
    await asyncio.sleep(0.005)
    await attempt(worker.append_event(eve, event({"app:color": "blue"})))
    await attempt(
        worker.create_session(
            app_name=APP, user_id="eve", session_id="e2", state={"app:theme": "dark"}
        )
    )
    await asyncio.sleep(0.005)
    await attempt(
        worker.create_session(
            app_name=APP, user_id="bob", session_id="b2", state={"app:theme": "light", "k": 1}
        )
    )
    await attempt(worker.delete_session(app_name=APP, user_id="cat", session_id="c1"))
    await attempt(
        worker.create_session(
            app_name=OTHER, user_id="fay", session_id="f", state={"app:plan": "pro"}
        )
    )


async def app_index(client: Any, app: str) -> list[str]:
    return sorted(m.decode() for m in await client.zrange(KEYS.app_sessions(app), 0, -1))


async def apps(client: Any, keys: KeySpace = KEYS) -> list[bytes]:
    return sorted(await client.zrange(keys.apps(), 0, -1))


async def registry(client: Any, app: str = APP) -> dict[bytes, float]:
    return dict(await client.zrange(KEYS.app_pending(app), 0, -1, withscores=True))


async def app_slot(client: Any) -> tuple[Any, ...]:
    """The app's versions and applied-outbox hashes: a write applied again would move them."""
    return (
        await client.hgetall(KEYS.app_versions(APP)),
        await client.hgetall(KEYS.app_applied(APP)),
    )


async def outcome(service: RedisSessionService, client: Any) -> dict[str, Any]:
    """What readers of every kind see of both apps."""
    seen: dict[str, Any] = {"apps": await apps(client)}
    for app in (APP, OTHER):
        listed = (await service.list_sessions(app_name=app)).sessions
        seen[app] = {
            "app_state": await service.get_app_state(app_name=app),
            "listed": sorted((s.user_id, s.id, sorted(s.state.items())) for s in listed),
            "index": await app_index(client, app),
        }
    dave = await service.get_session(app_name=APP, user_id="dave", session_id="d")
    assert dave is not None
    seen["dave"] = dave.state
    return seen


async def one_step_outcome() -> dict[str, Any]:
    """The same scenario on a single node, where one script writes everything."""
    client = fakeredis.FakeAsyncRedis()
    service = RedisSessionService(client)
    await scenario(service, service, dead=False)
    return await outcome(service, client)


# -- a sweep finishes what dead workers left ------------------------------------------------


async def test_a_sweep_makes_every_reader_see_what_dead_workers_wrote(
    target: Target, bound: float
) -> None:
    await scenario(target.service(), dies(target.service()), dead=True)
    client = target.client

    # Only the user-slot steps happened: other users see none of it.
    reader = target.service()
    assert await reader.get_app_state(app_name=APP) == {"motd": "hi"}
    assert await reader.get_app_state(app_name=OTHER) == {}
    dave = await reader.get_session(app_name=APP, user_id="dave", session_id="d")
    assert dave is not None
    assert dave.state == {"app:motd": "hi"}
    assert await app_index(client, APP) == ["ann:a", "bob:b1", "cat:c1", "dave:d", "eve:e"]
    assert await app_index(client, OTHER) == []
    assert await apps(client) == [APP.encode()]
    assert set(await registry(client)) == {b"ann", b"bob", b"cat", b"dave", b"eve"}

    await aged(bound)
    sweeper = target.service()
    report = await sweeper.sweep_app_writes(app_name=APP, older_than=bound)
    assert report == SweepReport(
        users_examined=5, users_pending=4, entries_pending=5, entries_applied=5, users_cleared=5
    )
    other = await sweeper.sweep_app_writes(app_name=OTHER, older_than=bound)
    assert other == SweepReport(1, 1, 1, 1, 1)

    # Every reader (a new worker, another user's session, the listings, the apps index) now
    # sees what one-step application gives.
    assert await outcome(target.service(), client) == await one_step_outcome()
    assert await registry(client) == {}
    assert await registry(client, OTHER) == {}


async def test_sweeps_run_twice_or_concurrently_apply_each_write_once(
    target: Target, bound: float
) -> None:
    await scenario(target.service(), dies(target.service()), dead=True)
    await aged(bound)
    sweeps = [target.service().sweep_app_writes(app_name=APP, older_than=bound) for _ in "ab"]
    first, second = await asyncio.gather(*sweeps)
    assert first.entries_applied + second.entries_applied == 5
    assert first.users_cleared + second.users_cleared == 5

    done = await app_slot(target.client)
    assert await target.service().sweep_app_writes(app_name=APP, older_than=bound) == (
        SweepReport()
    )
    assert await app_slot(target.client) == done
    seen = await outcome(target.service(), target.client)
    assert seen[APP] == (await one_step_outcome())[APP]


async def test_a_sweep_in_batches_resumes_where_it_stopped(target: Target, bound: float) -> None:
    await scenario(target.service(), dies(target.service()), dead=True)
    await aged(bound)
    sweeper = target.service()
    reports = [await sweeper.sweep_app_writes(app_name=APP, older_than=bound, limit=2)]
    while reports[-1].more:
        reports.append(await sweeper.sweep_app_writes(app_name=APP, older_than=bound, limit=2))
    assert [r.users_examined for r in reports] == [2, 2, 1]
    assert sum(r.entries_applied for r in reports) == 5
    assert sum(r.users_cleared for r in reports) == 5
    seen = await outcome(target.service(), target.client)
    assert seen[APP] == (await one_step_outcome())[APP]


# -- what stays in the registry -------------------------------------------------------------


async def test_a_recent_registration_is_left_for_a_later_sweep(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sweep, "REGISTER_EVERY", 1.0)
    service = target.service()
    s = await service.create_session(app_name=APP, user_id="ann", session_id="a")
    with pytest.raises(RedisConnectionError):
        await dies(target.service()).append_event(s, event({"app:color": "red"}))
    # Its worker may still be writing, trusting the registration: it stays, untouched.
    before = await registry(target.client)
    assert set(before) == {b"ann"}
    assert await service.sweep_app_writes(app_name=APP, older_than=2.0) == SweepReport()
    assert await registry(target.client) == before
    assert await service.get_app_state(app_name=APP) == {}


async def test_a_registered_user_with_nothing_pending_is_cleared(
    target: Target, bound: float
) -> None:
    service = target.service()
    s = await service.create_session(app_name=APP, user_id="ann", session_id="a")
    await service.append_event(s, event({"app:color": "red"}))
    assert set(await registry(target.client)) == {b"ann"}
    await aged(bound)
    report = await target.service().sweep_app_writes(app_name=APP, older_than=bound)
    assert report == SweepReport(users_examined=1, users_cleared=1)
    assert await registry(target.client) == {}
    assert await service.get_app_state(app_name=APP) == {"color": "red"}


async def test_a_worker_registering_during_a_sweep_keeps_its_registration(
    target: Target, bound: float
) -> None:
    s = await target.service().create_session(app_name=APP, user_id="ann", session_id="a")
    await aged(bound)
    sweeper = target.service()
    registry_of: Any = sweeper._engine.layout
    call = registry_of.registry._call

    async def meanwhile(key: str, *args: Any) -> Any:
        if args[0] == "clear":
            # After the sweep read ann's outbox (nothing pending), another worker registers
            # ann afresh, records an app write and dies before applying it.
            with pytest.raises(RedisConnectionError):
                await dies(target.service()).append_event(s, event({"app:color": "red"}))
        return await call(key, *args)

    registry_of.registry._call = meanwhile
    report = await sweeper.sweep_app_writes(app_name=APP, older_than=bound)
    assert report == SweepReport(users_examined=1)
    assert set(await registry(target.client)) == {b"ann"}
    assert await sweeper.get_app_state(app_name=APP) == {}

    # Its registration kept, the next sweep finds the write.
    await aged(bound)
    report = await target.service().sweep_app_writes(app_name=APP, older_than=bound)
    assert report == SweepReport(1, 1, 1, 1, 1)
    assert await sweeper.get_app_state(app_name=APP) == {"color": "red"}


async def test_a_refused_write_leaves_the_registry_as_it_was(target: Target, bound: float) -> None:
    service = target.service()
    s = await service.create_session(app_name=APP, user_id="ann", session_id="a")
    stale = s.model_copy(deep=True)
    await service.append_event(s, event({"n": 1}))
    gone = await service.create_session(app_name=APP, user_id="bob", session_id="b")
    await service.delete_session(app_name=APP, user_id="bob", session_id="b")
    await aged(bound)
    before = await snapshot(target.client)
    scores = await registry(target.client)
    assert set(scores) == {b"ann", b"bob"}

    # Workers that never registered ann or bob: their registration is undone with the write.
    with pytest.raises(StaleSessionError):
        await target.service().append_event(stale, event({"app:color": "red"}))
    with pytest.raises(SessionNotFoundError):
        await target.service().append_event(gone, event({"app:color": "red"}))
    assert await registry(target.client) == scores
    assert await snapshot(target.client) == before


async def test_only_the_first_app_write_of_a_user_per_interval_registers(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sweep, "REGISTER_EVERY", 30.0)
    service = target.service()
    layout: Any = service._engine.layout
    call = layout.registry._call
    adds: list[str] = []

    async def counting(key: str, *args: Any) -> Any:
        if args[0] == "add":
            adds.append(args[1])
        return await call(key, *args)

    layout.registry._call = counting
    s = await service.create_session(app_name=APP, user_id="ann", session_id="a")
    for i in range(4):
        await service.append_event(s, event({"app:n": i, "n": i}))
    await service.create_session(app_name=APP, user_id="ann", session_id="b")
    await service.delete_session(app_name=APP, user_id="ann", session_id="b")
    assert adds == ["ann"]
    # Appends without app: keys record nothing for the app's slot: no registration.
    bob = await target.service().create_session(app_name=APP, user_id="bob", session_id="b")
    await service.append_event(bob, event({"n": 1, "user:x": 1}))
    assert adds == ["ann"]
    await service.append_event(bob, event({"app:n": 9}))
    assert adds == ["ann", "bob"]
    # Once the interval is over, the next app write registers again.
    monkeypatch.setattr(_sweep, "REGISTER_EVERY", 0.0)
    await service.append_event(s, event({"app:n": 5}))
    assert adds == ["ann", "bob", "ann"]


# -- a single node, bad input ---------------------------------------------------------------


@pytest.fixture(params=pick("fake", "real"))
async def single(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    async with backend(request.param, monkeypatch) as client:
        yield client


async def test_a_single_node_has_nothing_to_sweep(single: Any, bound: float) -> None:
    service = RedisSessionService(single)
    await scenario(service, service, dead=False)
    await aged(bound)
    before = await snapshot(single)

    def no_command(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the sweep sent a command on a single node: {args}")

    single.execute_command = no_command
    single.pipeline = no_command
    for app in (APP, OTHER):
        assert await service.sweep_app_writes(app_name=app, older_than=bound) == SweepReport()
    del single.execute_command, single.pipeline
    assert await snapshot(single) == before


BAD: list[dict[str, Any]] = [
    {"app_name": ""},
    {"app_name": " padded"},
    {"app_name": 5},
    {"older_than": -1},
    {"older_than": 0},
    {"older_than": 119.9},
    {"older_than": float("nan")},
    {"older_than": float("inf")},
    {"older_than": "300"},
    {"older_than": True},
    {"limit": 0},
    {"limit": -1},
    {"limit": 10_001},
    {"limit": 1.5},
    {"limit": True},
]


@pytest.mark.parametrize("dry_run", [False, True])
async def test_bad_sweep_arguments_are_refused_before_anything_runs(
    service: RedisSessionService, redis_client: Any, dry_run: bool
) -> None:
    s = await service.create_session(app_name=APP, user_id="ann", session_id="a")
    await service.append_event(s, event({"app:color": "red"}))
    before = await snapshot(redis_client)
    for bad in BAD:
        arguments: dict[str, Any] = {"app_name": APP, **bad}
        with pytest.raises(InvalidInputError):
            await service.sweep_app_writes(**arguments, dry_run=dry_run)
    assert await snapshot(redis_client) == before
    # The smallest bound it takes: twice the time a worker trusts its registration.
    report = await service.sweep_app_writes(app_name=APP, older_than=120, limit=10_000)
    assert report == SweepReport()


# -- as the documented least-privilege user ---------------------------------------------------


@pytest.mark.real
@pytest.mark.acl
@pytest.mark.cluster
@pytest.mark.parametrize("url", ["REDIS_URL", "REDIS_CLUSTER_URL"])
async def test_the_readme_user_may_sweep(
    url: str, bound: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real kind: the README user on database 0, as on the cluster (which has no other),
    # where the acl kind would take ACL_DB.
    kind = "cluster" if url == "REDIS_CLUSTER_URL" else "real"
    async with backend(kind, monkeypatch) as admin, acl_user(admin) as worker:
        config = SessionServiceConfig(cluster=True)

        def make() -> RedisSessionService:
            return RedisSessionService(worker, config=config)

        await scenario(make(), dies(make()), dead=True)
        await aged(bound)
        dry = await make().sweep_app_writes(app_name=APP, older_than=bound, dry_run=True)
        assert (dry.users_pending, dry.entries_pending, dry.entries_applied) == (4, 5, 0)
        report = await make().sweep_app_writes(app_name=APP, older_than=bound, limit=5)
        assert report.entries_applied == 5
        assert report.users_cleared == 5
        assert await outcome(make(), admin) == {
            **await one_step_outcome(),
            "apps": [APP.encode()],  # OTHER not swept here
            OTHER: {"app_state": {}, "listed": [], "index": []},
        }


# -- the CLI ---------------------------------------------------------------------------------


async def test_cli_sweep_and_stats(cli: Cli) -> None:
    keys = KeySpace(cli.prefix)
    async with cli.service() as setup, cli.service() as worker:
        await scenario(setup, dies(worker) if cli.cluster else worker, dead=cli.cluster)
    client = cli.client()
    async with client:
        # As if registered ten minutes ago: the CLI's bound is at least two minutes.
        for app in (APP, OTHER):
            for member, score in await client.zrange(keys.app_pending(app), 0, -1, withscores=True):
                await client.zadd(keys.app_pending(app), {member: score - 600_000})

        async def state() -> Any:
            return await client.hgetall(keys.app_state(APP))

        async def registered() -> Any:
            return await client.zrange(keys.app_pending(APP), 0, -1, withscores=True)

        before = (await state(), await registered())

        due = {a["app_name"]: a for a in cli.json("stats")["apps"]}[APP]
        counts = [due[f"app_writes_{n}"] for n in ("due_users", "unapplied_users")]
        assert counts == ([5, 4] if cli.cluster else [0, 0])
        assert due["app_writes_unapplied_entries"] == (5 if cli.cluster else 0)
        human = cli.run("stats", APP)
        assert human.returncode == 0, human.stderr
        assert ("UNAPPLIED" in human.stdout) == cli.cluster

        dry = cli.run("sweep", APP, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        report = cli.json("sweep", APP, "--dry-run")
        assert (await state(), await registered()) == before
        if not cli.cluster:
            assert "nothing to sweep" in dry.stdout
            assert report["users_examined"] == 0
            assert cli.json("sweep", APP)["entries_applied"] == 0
            return
        assert "5 users registered over 300 s ago: 4 with 5 unapplied" in dry.stdout
        assert report == {
            "app_name": APP,
            "older_than": 300.0,
            "dry_run": True,
            "users_examined": 5,
            "users_pending": 4,
            "entries_pending": 5,
            "entries_applied": 0,
            "users_cleared": 0,
            "more": False,
            "expired_due": 0,
            "expired_dropped": 0,
        }
        # fay's create died before the apps index learnt of her app: stats finds it by name.
        assert cli.json("stats", OTHER)["apps"][0]["app_writes_unapplied_users"] == 1

        too_soon = cli.run("sweep", APP, "--older-than", "1m")
        assert too_soon.returncode == 2
        assert "older_than" in too_soon.stderr
        done = cli.json("sweep", APP, "--limit", "2")
        assert (done["entries_applied"], done["users_cleared"], done["more"]) == (5, 5, False)
        swept = cli.run("sweep", OTHER)
        assert swept.returncode == 0, swept.stderr
        assert "applied 1, cleared 1 user from the registry" in swept.stderr
        assert await registered() == []
        assert await state() == {b"motd": b'"hi"', b"color": b'"blue"', b"size": b'"L"',
                                 b"theme": b'"light"'}  # fmt: skip

        after = {a["app_name"]: a for a in cli.json("stats")["apps"]}
        assert set(after) == {APP, OTHER}
        assert [after[APP][f"app_writes_{n}"] for n in ("due_users", "unapplied_users")] == [0, 0]
        assert [s["id"] for s in cli.json("ls", OTHER)["sessions"]] == ["f"]
        assert escape(OTHER).encode() in await apps(client, keys)
