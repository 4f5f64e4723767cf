"""The Redis Cluster layout under concurrency, crashes and retries.

On a cluster, an operation runs one script in the user's slot, which records its ``app:``
writes and app index changes in the user's outbox; a second step (``AppOutbox.apply``)
applies them in the app's slot. These tests prove the guarantees of that split:
many processes of users on different shards lose nothing and every ``app:`` key ends at its
newest write; a worker dying between the two steps loses nothing, the next operation of that
user finishes the job, and a late or repeated apply never overwrites a newer value; a retry
after a failed second step stores the event once and finishes the apply.

The crash tests run on a slot-checking fakeredis (the cluster code path, with every script
refused unless it stays in one slot) and on the real cluster named by REDIS_CLUSTER_URL.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.cluster import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError

import cluster_worker
from _backends import backend, pick
from _folds import fold_deltas
from _servers import skip_without
from redis_agent_sessions import (
    AlreadyExistsError,
    Event,
    EventActions,
    RedisMemoryService,
    RedisSessionService,
)
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.sessions._outbox import AppOutbox
from redis_agent_sessions.state import merge_state

APP = "cluster_app"
KEYS = KeySpace()


@pytest.fixture
async def cluster(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[RedisCluster]:
    async with backend("cluster", monkeypatch) as client:
        yield client


@pytest.fixture
def cluster_url(cluster: RedisCluster) -> str:
    """The real cluster's URL, for worker processes; flushed before and after the test."""
    return skip_without("REDIS_CLUSTER_URL")


@pytest.fixture(params=pick("fake-slots", "cluster"))
async def client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    async with backend(request.param, monkeypatch) as opened:
        yield opened


class FailingApply:
    """Makes the app-slot step fail once when armed, as if the worker died or lost the
    connection right after the user-slot script; keeps what that step was asked to apply."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = False
        self.missed: dict[str, Any] = {}
        original = AppOutbox.apply

        async def apply(outbox: AppOutbox, **kwargs: Any) -> Any:
            if self.armed:
                self.armed = False
                self.missed = kwargs
                raise RedisConnectionError("connection lost between the two steps")
            return await original(outbox, **kwargs)

        monkeypatch.setattr(AppOutbox, "apply", apply)

    def arm(self) -> None:
        self.armed = True


@pytest.fixture
def failing(monkeypatch: pytest.MonkeyPatch) -> FailingApply:
    return FailingApply(monkeypatch)


def event(delta: dict[str, Any]) -> Event:
    return Event(author="agent", actions=EventActions(state_delta=delta))


async def app_index(client: Any) -> list[str]:
    return sorted(m.decode() for m in await client.zrange(KEYS.app_sessions(APP), 0, -1))


async def listed(service: RedisSessionService) -> list[tuple[str, str]]:
    return sorted((s.user_id, s.id) for s in (await service.list_sessions(app_name=APP)).sessions)


async def app_slot(client: Any) -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
    """The app's versions and applied-outbox hashes, to show a late apply changed nothing."""
    return (
        await client.hgetall(KEYS.app_versions(APP)),
        await client.hgetall(KEYS.app_applied(APP)),
    )


async def newer_write(service: RedisSessionService, user: str, sid: str, delta: Any) -> None:
    """Another user's write, a few ms later than everything before it: versions start with
    the writing shard's clock, so this one is newer by time, not only by sequence."""
    await asyncio.sleep(0.005)
    session = await service.get_session(app_name=APP, user_id=user, session_id=sid)
    assert session is not None
    await service.append_event(session, event(delta))


# -- many processes on the real cluster ----------------------------------------------------


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.cluster
async def test_processes_of_users_on_every_shard_lose_nothing(
    cluster_url: str, cluster: RedisCluster
) -> None:
    ranges = await cluster.cluster_slots()
    shards = {info["primary"] for info in ranges.values()}

    def shard(key: str) -> Any:
        slot = key_slot(key.encode())
        return next(info["primary"] for (lo, hi), info in ranges.items() if lo <= slot <= hi)

    # One app writer per shard: app writes are versioned by every shard's clock, and all
    # but one writer record them away from the app's own shard.
    writers: dict[Any, str] = {}
    for i in range(1000):
        writers.setdefault(shard(KEYS.user_state(APP, f"w{i}")), f"w{i}")
    assert len(shards) >= 2, "needs a cluster of at least two primaries"
    assert set(writers) == shards
    users = sorted(writers.values())

    service = RedisSessionService(cluster)
    await service.create_session(app_name=APP, user_id="alice", session_id="s")
    # alice's session and user keys: two processes per policy, all on one session.
    shared = [(f"p{i}", "reject" if i < 2 else "merge") for i in range(4)]
    shared_rounds, app_rounds = 20, 40
    ctx = multiprocessing.get_context("spawn")

    def run_all() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        with ctx.Pool(len(shared) + len(users)) as pool:
            shared_jobs = [
                pool.apply_async(
                    cluster_worker.shared_writer,
                    (cluster_url, APP, "alice", "s", name, shared_rounds, policy),
                )
                for name, policy in shared
            ]
            app_jobs = [
                pool.apply_async(cluster_worker.app_writer, (cluster_url, APP, u, app_rounds, n))
                for n, u in enumerate(users)
            ]
            return [j.get(120) for j in shared_jobs], [j.get(120) for j in app_jobs]

    # Meanwhile, watch the app's slot: no app key may ever go back to an older write.
    run = asyncio.get_running_loop().run_in_executor(None, run_all)
    seen: dict[bytes, bytes] = {}
    backwards: list[tuple[bytes, bytes, bytes]] = []
    polls = 0
    while not run.done():
        for field, version in (await cluster.hgetall(KEYS.app_versions(APP))).items():
            if version < seen.get(field, b""):
                backwards.append((field, seen[field], version))
            seen[field] = version
        polls += 1
        await asyncio.sleep(0.002)
    shared_results, app_results = await run
    assert polls >= 50  # the watch covered the run
    assert backwards == []

    app_state = await service.get_app_state(app_name=APP)
    # Every append that landed is stored, once; the state is the fold of the events.
    stored_sessions = [("alice", "s", [e for r in shared_results for e in r["landed"]])]
    stored_sessions += [(r["user"], "main", r["landed"]) for r in app_results]
    for user, sid, landed in stored_sessions:
        session = await service.get_session(app_name=APP, user_id=user, session_id=sid)
        assert session is not None
        assert sorted(e.id for e in session.events) == sorted(landed), user
        fold, user_fold = fold_deltas(session.events)
        # Each user's user: keys are written through this one session only.
        assert await service.get_user_state(app_name=APP, user_id=user) == user_fold, user
        assert session.state == merge_state(fold, user_fold, app_state), user
    assert sum(r["stale"] for r in shared_results[2:]) == 0  # merge writers never are

    # Every app: key holds the value of its newest write, whichever shard wrote it and
    # in whatever order the applies reached the app's slot.
    newest: dict[str, tuple[str, str]] = {}
    for r in app_results:
        for version, field, value in r["writes"]:
            if field not in newest or version > newest[field][0]:
                newest[field] = (version, value)
    assert app_state == {field: value for field, (_, value) in newest.items()}
    versions = await cluster.hgetall(KEYS.app_versions(APP))
    assert {k.decode(): v.decode() for k, v in versions.items()} == {
        field: version for field, (version, _) in newest.items()
    }
    # Every key was written by every writer (else newest-wins would prove little).
    for field in newest:
        assert {
            r["user"] for r in app_results if any(f == field for _, f, _ in r["writes"])
        } == set(users)

    # The app-wide index, kept through the outboxes, lists exactly the live sessions.
    expected = [("alice", "s")] + [(r["user"], s) for r in app_results for s in r["sessions"]]
    assert await listed(service) == sorted(expected)


# -- a worker dying between the user-slot step and the app-slot step -----------------------


@pytest.mark.parametrize("next_op", ["get_session", "session_only_append"])
async def test_append_whose_app_step_failed(
    client: Any, failing: FailingApply, next_op: str
) -> None:
    ann, bob = RedisSessionService(client), RedisSessionService(client)
    s = await ann.create_session(app_name=APP, user_id="ann", session_id="s")
    other = await ann.create_session(app_name=APP, user_id="ann", session_id="other")
    await bob.create_session(app_name=APP, user_id="bob", session_id="b")

    failing.arm()
    written = event({"app:color": "red", "user:seen": 1, "n": 1})
    with pytest.raises(RedisConnectionError):
        await ann.append_event(s, written)

    # Only the user-slot step happened: the event and the user key are stored, but other
    # users do not see the app write yet.
    assert await client.xlen(KEYS.session(APP, "ann", "s").events) == 1
    assert await bob.get_user_state(app_name=APP, user_id="ann") == {"seen": 1}
    assert await bob.get_app_state(app_name=APP) == {}
    b = await bob.get_session(app_name=APP, user_id="bob", session_id="b")
    assert b is not None
    assert "app:color" not in b.state

    # A new worker takes over for ann (the first one is gone); her next operation applies.
    worker = RedisSessionService(client)
    if next_op == "get_session":
        got = await worker.get_session(app_name=APP, user_id="ann", session_id="s")
        assert got is not None
        assert got.state == {"n": 1, "user:seen": 1, "app:color": "red"}
    else:
        await worker.append_event(other, event({"m": 1}))
    assert await bob.get_app_state(app_name=APP) == {"color": "red"}
    got = await bob.get_session(app_name=APP, user_id="ann", session_id="s")
    assert got is not None
    assert [e.id for e in got.events] == [written.id]

    # The failed step, run late (its worker was only slow) after bob wrote the key anew:
    # an entry already applied is not applied again.
    await newer_write(bob, "bob", "b", {"app:color": "blue"})
    before = await app_slot(client)
    await AppOutbox(client).apply(**failing.missed)
    assert await bob.get_app_state(app_name=APP) == {"color": "blue"}
    assert await app_slot(client) == before


async def test_late_apply_loses_to_a_newer_write(client: Any, failing: FailingApply) -> None:
    """The entry is first applied after another user's newer write of the same key: the
    key keeps the newer value, while the rest of the entry still counts as applied."""
    ann, bob = RedisSessionService(client), RedisSessionService(client)
    s = await ann.create_session(app_name=APP, user_id="ann", session_id="s")
    await bob.create_session(app_name=APP, user_id="bob", session_id="b")
    failing.arm()
    with pytest.raises(RedisConnectionError):
        await ann.append_event(s, event({"app:color": "red", "app:size": "L"}))
    await newer_write(bob, "bob", "b", {"app:color": "blue"})

    got = await RedisSessionService(client).get_session(app_name=APP, user_id="ann", session_id="s")
    assert got is not None
    assert got.state == {"app:color": "blue", "app:size": "L"}
    assert got.events[0].actions.state_delta == {"app:color": "red", "app:size": "L"}
    assert await bob.get_app_state(app_name=APP) == {"color": "blue", "size": "L"}
    versions = await client.hgetall(KEYS.app_versions(APP))
    assert versions[b"color"].endswith(b":bob")
    assert versions[b"size"].endswith(b":ann")


@pytest.mark.parametrize("next_op", ["get_session", "session_only_append"])
async def test_create_whose_app_step_failed(
    client: Any, failing: FailingApply, next_op: str
) -> None:
    ann, bob = RedisSessionService(client), RedisSessionService(client)
    other = await ann.create_session(app_name=APP, user_id="ann", session_id="other")
    await bob.create_session(app_name=APP, user_id="bob", session_id="b")

    failing.arm()
    with pytest.raises(RedisConnectionError):
        await ann.create_session(
            app_name=APP,
            user_id="ann",
            session_id="new",
            state={"app:theme": "dark", "user:plan": "pro", "k": 1},
        )

    # Created in ann's slot, but neither its app index entry nor its app key is applied.
    assert await app_index(client) == ["ann:other", "bob:b"]
    assert await bob.get_app_state(app_name=APP) == {}

    worker = RedisSessionService(client)
    if next_op == "get_session":
        got = await worker.get_session(app_name=APP, user_id="ann", session_id="new")
        assert got is not None
        assert got.state == {"k": 1, "user:plan": "pro", "app:theme": "dark"}
    else:
        await worker.append_event(other, event({"m": 1}))
    assert await listed(bob) == [("ann", "new"), ("ann", "other"), ("bob", "b")]
    assert await bob.get_app_state(app_name=APP) == {"theme": "dark"}

    # Run late, the failed step must neither bring back the index entry of the session
    # deleted since, nor the app key bob has written since.
    await worker.delete_session(app_name=APP, user_id="ann", session_id="new")
    await newer_write(bob, "bob", "b", {"app:theme": "light"})
    before = await app_slot(client)
    await AppOutbox(client).apply(**failing.missed)
    assert await app_index(client) == ["ann:other", "bob:b"]
    assert await bob.get_app_state(app_name=APP) == {"theme": "light"}
    assert await app_slot(client) == before


@pytest.mark.parametrize("next_op", ["get_session", "session_only_append"])
async def test_delete_whose_app_step_failed(
    client: Any, failing: FailingApply, next_op: str
) -> None:
    ann, bob = RedisSessionService(client), RedisSessionService(client)
    other = await ann.create_session(app_name=APP, user_id="ann", session_id="other")
    await ann.create_session(app_name=APP, user_id="ann", session_id="gone")
    await bob.create_session(app_name=APP, user_id="bob", session_id="b")

    failing.arm()
    with pytest.raises(RedisConnectionError):
        await ann.delete_session(app_name=APP, user_id="ann", session_id="gone")

    # Deleted in ann's slot; the removal from the app index is not applied yet.
    assert await app_index(client) == ["ann:gone", "ann:other", "bob:b"]

    worker = RedisSessionService(client)
    if next_op == "get_session":
        assert await worker.get_session(app_name=APP, user_id="ann", session_id="other")
    else:
        await worker.append_event(other, event({"m": 1}))
    assert await app_index(client) == ["ann:other", "bob:b"]
    assert await listed(bob) == [("ann", "other"), ("bob", "b")]

    # Run late, after ann re-created a session of that id, the removal must not apply.
    await worker.create_session(app_name=APP, user_id="ann", session_id="gone")
    await AppOutbox(client).apply(**failing.missed)
    assert await app_index(client) == ["ann:gone", "ann:other", "bob:b"]
    assert await listed(bob) == [("ann", "gone"), ("ann", "other"), ("bob", "b")]


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.cluster
async def test_process_killed_between_the_steps_loses_nothing(cluster_url: str) -> None:
    """As above, but the worker is a real process that exits inside the second step."""
    async with RedisSessionService.from_url(cluster_url, cluster=True) as service:
        await service.create_session(app_name=APP, user_id="ann", session_id="s")
        proc = multiprocessing.get_context("spawn").Process(
            target=cluster_worker.die_between_steps,
            args=(cluster_url, APP, "ann", "s", {"app:color": "red", "n": 1}),
        )
        proc.start()
        await asyncio.to_thread(proc.join, 60)
        assert proc.exitcode == cluster_worker.CRASH_EXIT_CODE

        assert await service.get_app_state(app_name=APP) == {}
        got = await service.get_session(app_name=APP, user_id="ann", session_id="s")
        assert got is not None
        assert len(got.events) == 1
        assert got.state == {"n": 1, "app:color": "red"}
        assert await service.get_app_state(app_name=APP) == {"color": "red"}


# -- a retry after the second step failed --------------------------------------------------


async def test_retry_after_a_failed_app_step_stores_once_and_applies(
    client: Any, failing: FailingApply
) -> None:
    service, bob = RedisSessionService(client), RedisSessionService(client)
    s = await service.create_session(app_name=APP, user_id="ann", session_id="s")
    failing.arm()
    written = event({"app:color": "red", "user:seen": 1, "n": 1})
    with pytest.raises(RedisConnectionError):
        await service.append_event(s, written)
    # The caller's copy is as before the call: to it, the append may not have landed.
    assert s.events == []
    assert s.state == {}

    assert await service.append_event(s, written) is written
    assert [e.id for e in s.events] == [written.id]
    assert s.state == {"n": 1, "user:seen": 1, "app:color": "red"}
    # The retry finished the apply: other users see the app write.
    assert await bob.get_app_state(app_name=APP) == {"color": "red"}
    stored = await bob.get_session(app_name=APP, user_id="ann", session_id="s")
    assert stored is not None
    assert [e.id for e in stored.events] == [written.id]
    assert stored.state == s.state
    # The copy is up to date, revision included: the next append from it is not stale.
    await service.append_event(s, event({"n": 2}))


@pytest.mark.parametrize("op", ["delete", "create"])
async def test_create_or_delete_retried_after_a_failed_app_step_finishes_it(
    client: Any, failing: FailingApply, op: str
) -> None:
    """A caller that lost the reply retries the same call: a create finds the session its
    first attempt made (AlreadyExistsError), a delete finds nothing left to delete. Either
    retry is an operation of that user, so it must re-send what is not applied yet."""
    service = RedisSessionService(client)
    await service.create_session(app_name=APP, user_id="bob", session_id="b")
    if op == "delete":
        await service.create_session(app_name=APP, user_id="ann", session_id="s")

    async def call() -> None:
        if op == "create":
            await service.create_session(
                app_name=APP, user_id="ann", session_id="s", state={"app:theme": "dark"}
            )
        else:
            await service.delete_session(app_name=APP, user_id="ann", session_id="s")

    failing.arm()
    with pytest.raises(RedisConnectionError):
        await call()
    if op == "create":
        with pytest.raises(AlreadyExistsError):
            await call()
        assert await app_index(client) == ["ann:s", "bob:b"]
        assert await service.get_app_state(app_name=APP) == {"theme": "dark"}
    else:
        await call()
        assert await app_index(client) == ["bob:b"]


@pytest.mark.real
@pytest.mark.cluster
async def test_fresh_cluster_client_takes_concurrent_first_calls(cluster_url: str) -> None:
    """redis-py 8.1's RedisCluster fails when its very first commands run concurrently;
    the services initialize it once, so a worker may start with a burst of requests."""
    async with RedisSessionService.from_url(cluster_url, cluster=True) as service:
        made = await asyncio.gather(
            *(service.create_session(app_name="fresh", user_id=f"u{i}") for i in range(8))
        )
        assert len({s.id for s in made}) == 8
    async with RedisMemoryService.from_url(cluster_url, cluster=True, backend="plain") as memory:
        found = await asyncio.gather(
            *(memory.search_memory(app_name="fresh", user_id=f"u{i}", query="x") for i in range(8))
        )
        assert all(f.memories == [] for f in found)
