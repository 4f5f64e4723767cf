"""Expired sessions leave the indexes by themselves: ordinary writes check the members of
the app's expiry index that are due (up to ``Layout.expired_per_write`` a write), and drop
the entries of sessions that are gone.

Each test runs on fakeredis, on the cluster code path over a slot-checking fakeredis, on
Redis 7 (as an admin, and as the documented least-privilege ACL user) and on a real cluster.
Sessions expire for real: TTLs of a second or two, and waits. Memory is compared with a store
that never had the expired sessions: on real servers by ``MEMORY USAGE ... SAMPLES 0`` of
every key under each store's prefix (what each store's keys hold, without the server's own
overhead and allocator noise that ``INFO used_memory`` carries), on fakeredis (which has no
MEMORY command) by what the keys hold: members, fields and entries, and the bytes of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest

from _acl import acl_user
from _backends import BACKENDS, backend, pick
from _backends import worker as service_client
from _cli import Cli
from _snapshot import snapshot
from redis_agent_sessions import (
    CorruptDataError,
    Event,
    EventActions,
    RedisSessionService,
    SessionNotFoundError,
    SessionServiceConfig,
)
from redis_agent_sessions.keys import KeySpace, split_app_member
from redis_agent_sessions.sessions._layout import Layout

APP = "exp_app"


@pytest.fixture(params=BACKENDS)
async def admin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Like conftest's ``redis_client``, without the read cache variants (nothing here
    depends on it, and every test waits for TTLs)."""
    async with backend(request.param, monkeypatch) as client:
        yield client


@pytest.fixture
async def worker(admin: Any, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """What the services run on: ``admin``, or under ``acl`` the documented ACL user."""
    async with service_client(request.node.callspec.params.get("admin"), admin) as client:
        yield client


def service(client: Any, prefix: str = "ras", **config: Any) -> RedisSessionService:
    return RedisSessionService(client, config=SessionServiceConfig(key_prefix=prefix, **config))


def event(i: int, text: str = "") -> Event:
    return Event(author="agent", actions=EventActions(state_delta={"n": i, "note": text}))


def cluster_path(svc: RedisSessionService) -> bool:
    return svc._engine.layout.name == "cluster"


async def indexed(admin: Any, prefix: str, users: list[str]) -> list[tuple[str, str, str]]:
    """Every (index key, user, session) that the app's and ``users``' indexes hold."""
    keys = KeySpace(prefix)
    found: list[tuple[str, str, str]] = []
    for index in (keys.app_sessions(APP), keys.app_updated(APP)):
        for member in await admin.zrange(index, 0, -1):
            user, sid = split_app_member(member.decode())
            found.append((index, user, sid))
    for user in users:
        for index in (keys.user_sessions(APP, user), keys.user_updated(APP, user)):
            found += [(index, user, m.decode()) for m in await admin.zrange(index, 0, -1)]
    return found


async def stale(admin: Any, prefix: str, users: list[str]) -> list[tuple[str, str, str]]:
    """The index members that name sessions that no longer exist."""
    keys = KeySpace(prefix)
    return [
        (index, user, sid)
        for index, user, sid in await indexed(admin, prefix, users)
        if not await admin.exists(keys.session(APP, user, sid).meta)
    ]


async def footprint(admin: Any, prefix: str) -> int:
    """What the keys under ``prefix`` take: MEMORY USAGE on a real server, else the bytes of
    their members, fields, values and entries (fakeredis has no MEMORY command)."""
    total = 0
    real = not isinstance(admin, fakeredis.FakeAsyncRedis)
    async for key in admin.scan_iter(match=f"{prefix}:*", count=1000):
        if real:
            total += await admin.memory_usage(key, samples=0) or 0
            continue
        kind = (await admin.type(key)).decode()
        if kind == "zset":
            items = await admin.zrange(key, 0, -1, withscores=True)
            total += sum(len(m) + 8 for m, _ in items)
        elif kind == "hash":
            total += sum(len(k) + len(v) for k, v in (await admin.hgetall(key)).items())
        elif kind == "stream":
            for entry_id, fields in await admin.xrange(key):
                total += len(entry_id) + sum(len(k) + len(v) for k, v in fields.items())
        else:
            total += len(await admin.dump(key) or b"")
        total += len(key)
    return total


async def others_write(client: Any, prefix: str, count: int, tag: str) -> None:
    """``count`` ordinary writes of users who are not the ones whose sessions expired: each a
    create (with a day's TTL) then an append, as a Runner's turn does; no listing."""
    svc = service(client, prefix, ttl_seconds=86_400)
    for i in range(0, count, 2):
        s = await svc.create_session(app_name=APP, user_id=f"other{i % 17}", session_id=f"{tag}{i}")
        await svc.append_event(s, event(i, "x" * 800))


async def expired(admin: Any, prefix: str, sessions: list[tuple[str, str]]) -> None:
    """Returns once none of ``sessions`` (user, session id) of APP exists any more, their
    TTLs being a second: polled, where a fixed wait would have to guess how long a loaded
    runner takes (a TTL runs from the write that set it; the index entries that name the
    session are due by then, their time taken before that write)."""
    keys = KeySpace(prefix)
    # Newest first, one key a poll: the newest expires last, so asking after every key each
    # poll asked after hundreds that were still there (most of the suite's time on
    # fakeredis). An expired key does not come back, so each is asked after until it is gone.
    alive = [keys.session(APP, user, sid).meta for user, sid in reversed(sessions)]
    deadline = time.monotonic() + EXPIRY_SECONDS
    while alive:
        if not await admin.exists(alive[0]):
            alive.pop(0)
            continue
        assert time.monotonic() < deadline, f"{len(alive)} sessions of a 1 s TTL still exist"
        await asyncio.sleep(0.02)


EXPIRY_SECONDS = 15.0  # the most expired() waits for sessions of a 1 s TTL to be gone


def made(users: list[str], count: int, prefix: str = "s") -> list[tuple[str, str]]:
    """The (user, session id) of sessions ``prefix0..`` made round-robin over ``users``."""
    return [(users[i % len(users)], f"{prefix}{i}") for i in range(count)]


async def they_leave(admin: Any, worker: Any, users: list[str], cluster: bool) -> None:
    """The proof, once 300 sessions of ``users`` (s0..s299, round-robin) were written to
    store ``ras:a`` with TTLs of a second, their own writes not cleaning up: when they have
    expired, every index member of theirs is left; 300 ordinary writes of other users later
    (to ``ras:a``, and to ``ras:b``, which never had them) <= 1% is, and ``ras:a`` holds
    about what ``ras:b`` does."""
    await expired(admin, "ras:a", made(users, 300))
    left = await stale(admin, "ras:a", users)
    assert len(left) == 300 * (3 if cluster else 4)

    await others_write(worker, "ras:a", 300, "o")
    await others_write(worker, "ras:b", 300, "o")

    remaining = await stale(admin, "ras:a", users)
    assert len(remaining) <= len(left) // 100, remaining[:10]
    with_them, without = await footprint(admin, "ras:a"), await footprint(admin, "ras:b")
    # Users who ever wrote keep a little on a cluster (their outbox, their registration for
    # the sweep): the documentation's "What expires" (docs/redis-layout.md).
    assert with_them <= without * 1.05, (with_them, without)


# -- the proof: per layout, expired sessions leave by themselves ----------------------------


async def append_unless_expired(svc: RedisSessionService, s: Any, e: Event) -> None:
    """An append to a session of a 1 s TTL: on a loaded machine (CI runs three suites side
    by side) it may already have expired, which leaves its index members all the same."""
    with contextlib.suppress(SessionNotFoundError):
        await svc.append_event(s, e)


async def test_expired_sessions_leave_the_indexes_with_ordinary_writes(
    admin: Any, worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 sessions of 30 users expire; 300 ordinary writes of other users later, the index
    members naming them are gone (<= 1%), and the store holds about what a store that
    never had them holds."""
    expiring = service(worker, "ras:a", ttl_seconds=1)
    users = [f"user{u}" for u in range(30)]
    # On a loaded machine the first sessions expire while the last are made: their own
    # writes must not clean up yet, or fewer would be left behind than the test counts.
    with monkeypatch.context() as patched:
        patched.setattr(Layout, "expired_per_write", 0)
        for i in range(300):
            user = users[i % 30]
            s = await expiring.create_session(app_name=APP, user_id=user, session_id=f"s{i}")
            await append_unless_expired(expiring, s, event(i))
    await they_leave(admin, worker, users, cluster_path(expiring))


async def test_mixed_ttls_expire_alike_and_sessions_without_one_stay(
    admin: Any, worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proof again with every way a session gets a TTL, among sessions of the same users
    that have none: 300 expire (a third by the service's TTL, a third by their own on a
    service without one, a third by their own shorter than their service's); 300 ordinary
    writes later <= 1% of their members are left, the 60 without a TTL are all still listed
    and readable, and the store holds about what a store with only those 60 holds."""
    by_service = service(worker, "ras:a", ttl_seconds=1)
    plain = service(worker, "ras:a")
    long = service(worker, "ras:a", ttl_seconds=3600)
    users = [f"user{u}" for u in range(30)]
    ways = [(by_service, None), (plain, 1), (long, 1)]

    async def keep(prefix: str) -> None:
        # Without a TTL: made by a service without one, and opted out (0) of the service's.
        kinds = [(service(worker, prefix), None), (service(worker, prefix, ttl_seconds=1), 0)]
        for i in range(60):
            svc, ttl = kinds[i % 2]
            s = await svc.create_session(
                app_name=APP, user_id=users[i % 30], session_id=f"k{i}", ttl=ttl
            )
            await svc.append_event(s, event(i))

    with monkeypatch.context() as patched:
        patched.setattr(Layout, "expired_per_write", 0)  # as in the test above
        await keep("ras:a")
        for i in range(300):
            svc, ttl = ways[i % 3]
            s = await svc.create_session(
                app_name=APP, user_id=users[i % 30], session_id=f"s{i}", ttl=ttl
            )
            await append_unless_expired(svc, s, event(i))

    await keep("ras:b")  # a store that never had the expiring ones
    await they_leave(admin, worker, users, cluster_path(plain))
    kept = {sid for _, user, sid in await indexed(admin, "ras:a", users) if user in users}
    assert {f"k{i}" for i in range(60)} <= kept
    for i in range(60):
        assert await plain.get_session(app_name=APP, user_id=users[i % 30], session_id=f"k{i}")


async def test_a_burst_of_expiries_drains_within_a_few_writes(
    admin: Any, worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 sessions of 30 users expire together; 40 ordinary writes of other users later
    (20 turns: on a cluster only the 20 creates reach the app's slot), <= 1% of their index
    members are left: a write takes every member due, up to ``expired_per_write``, not a
    fixed few (4 a write left half of them)."""
    expiring = service(worker, "ras:a", ttl_seconds=1)
    users = [f"user{u}" for u in range(30)]
    with monkeypatch.context() as patched:
        patched.setattr(Layout, "expired_per_write", 0)  # as in the tests above
        for i in range(300):
            s = await expiring.create_session(
                app_name=APP, user_id=users[i % 30], session_id=f"s{i}"
            )
            await append_unless_expired(expiring, s, event(i))
    await expired(admin, "ras:a", made(users, 300))
    left = await stale(admin, "ras:a", users)
    assert len(left) == 300 * (3 if cluster_path(expiring) else 4)
    await others_write(worker, "ras:a", 40, "o")
    remaining = await stale(admin, "ras:a", users)
    assert len(remaining) <= len(left) // 100, (len(remaining), remaining[:10])


@pytest.mark.parametrize(("overdue_ms", "again_in_ms"), [(10, 1000), (20_000, 20_000)])
async def test_a_session_alive_past_its_time_is_checked_again_soon(
    admin: Any, worker: Any, overdue_ms: int, again_in_ms: int
) -> None:
    """A session whose expiry entry comes due while it still exists (most often it expires
    that instant: Redis's deadline runs from when the write's script ran, its time from the
    writer's clock before that; else a writer's clock runs behind) is checked again after a
    second, or after as long as it has outlived its time: not a minute later, which left a
    busy store's expiring sessions in the indexes for a minute."""
    svc = service(worker, ttl_seconds=3600)
    await svc.create_session(app_name=APP, user_id="ann", session_id="s")
    keys = KeySpace("ras")
    sk = keys.session(APP, "ann", "s")
    past = int(time.time() * 1000) - overdue_ms
    await admin.hset(sk.meta, "expires", past)
    await admin.zadd(keys.app_expiry(APP), {sk.app_member: past}, xx=True)
    before = int(time.time() * 1000)
    await svc.create_session(app_name=APP, user_id="bob")  # a write: it takes what is due
    after = int(time.time() * 1000)
    score = await admin.zscore(keys.app_expiry(APP), sk.app_member)
    assert score is not None
    assert before + again_in_ms <= score <= after + again_in_ms + (after - past), score - after
    assert await svc.get_session(app_name=APP, user_id="ann", session_id="s") is not None


async def test_session_ttls_of_every_kind(admin: Any, worker: Any) -> None:
    """Per-session TTLs mixed with the service's and with none: those without a TTL stay,
    a session whose TTL appends slid stays until it really expires, and a session made
    again under an expired one's id is not taken for its predecessor."""
    short = service(worker, ttl_seconds=1)
    plain = service(worker)
    long = service(worker, ttl_seconds=3600)
    users = ["ann", "bob"]
    made = {  # id -> (the service that made it and appends to it, its user, its own TTL)
        "default": (short, "ann", None),
        "own": (plain, "ann", 1),
        "zero": (short, "ann", 0),
        "none": (plain, "bob", None),
        "slid": (long, "bob", 3),
        "again": (short, "bob", None),
        "again_ttl": (short, "ann", None),
    }
    sessions = {}
    for sid, (svc, user, ttl) in made.items():
        sessions[sid] = await svc.create_session(
            app_name=APP, user_id=user, session_id=sid, ttl=ttl
        )
        await svc.append_event(sessions[sid], event(1))
    # The waits below are measured from when the writes returned, not fixed: a loaded runner
    # delays the steps, never the expiry they wait for. The slid session's TTL (3 s) leaves
    # more than a second either side of each check.
    written = time.monotonic()
    await asyncio.sleep(1.5)
    # Slid by an append (its own TTL, whoever appends): now due 3 s after this one.
    await plain.append_event(sessions["slid"], event(2))
    slid = time.monotonic()
    # Expired, then made again: without a TTL, and with a long one.
    await plain.create_session(app_name=APP, user_id="bob", session_id="again")
    await long.create_session(app_name=APP, user_id="ann", session_id="again_ttl")

    async def present() -> set[str]:
        return {sid for _, user, sid in await indexed(admin, "ras", users) if user in users}

    await others_write(worker, "ras", 40, "p")
    assert await present() == {"zero", "none", "slid", "again", "again_ttl"}
    assert await stale(admin, "ras", users) == []
    # Past the slid session's first TTL (a cluster's app index still has that estimate):
    # checked, found alive, kept.
    await asyncio.sleep(max(0.0, written + 3.2 - time.monotonic()))
    await others_write(worker, "ras", 40, "q")
    assert "slid" in await present()
    assert await short.get_session(app_name=APP, user_id="bob", session_id="slid") is not None
    assert time.monotonic() < slid + 3  # else the checks above proved nothing
    # Past its slid TTL: gone, and only it.
    await asyncio.sleep(max(0.0, slid + 3.3 - time.monotonic()))
    await others_write(worker, "ras", 40, "r")
    assert await present() == {"zero", "none", "again", "again_ttl"}
    assert await stale(admin, "ras", users) == []
    for sid, user in (("zero", "ann"), ("none", "bob"), ("again", "bob"), ("again_ttl", "ann")):
        assert await plain.get_session(app_name=APP, user_id=user, session_id=sid) is not None


async def test_a_session_deleted_or_made_again_leaves_no_due_entry(admin: Any, worker: Any) -> None:
    svc = service(worker, ttl_seconds=600)
    keys = KeySpace()
    s = await svc.create_session(app_name=APP, user_id="ann", session_id="s")
    await svc.append_event(s, event(1))
    assert await admin.zrange(keys.app_expiry(APP), 0, -1) == [b"ann:s"]
    assert int(await admin.hget(keys.session(APP, "ann", "s").meta, "expires")) > 0
    await svc.delete_session(app_name=APP, user_id="ann", session_id="s")
    assert await admin.exists(keys.app_expiry(APP)) == 0
    await svc.create_session(app_name=APP, user_id="ann", session_id="s")
    await service(worker).delete_session(app_name=APP, user_id="ann", session_id="s")
    await service(worker).create_session(app_name=APP, user_id="ann", session_id="s")
    assert await admin.exists(keys.app_expiry(APP)) == 0  # made again without a TTL


@pytest.mark.parametrize("admin", pick("fake-slots", "cluster"), indirect=True)
async def test_the_sweep_checks_what_appends_cannot_reach(admin: Any, worker: Any) -> None:
    """On a cluster an append without app: keys never reaches the app's slot: the sweep
    checks the due members there (on a single node every write reaches the index)."""
    svc = service(worker, ttl_seconds=1)
    assert cluster_path(svc)
    users = [f"u{i}" for i in range(5)]
    for i in range(20):
        await svc.create_session(app_name=APP, user_id=users[i % 5], session_id=f"s{i}")
    keeper = await svc.create_session(app_name=APP, user_id="keeper", ttl=0)
    await expired(admin, "ras", made(users, 20))
    for i in range(20):
        await svc.append_event(keeper, event(i))
    assert len(await stale(admin, "ras", users)) == 60
    before = await snapshot(admin)
    dry = await svc.sweep_app_writes(app_name=APP, dry_run=True)
    assert (dry.expired_due, dry.expired_dropped) == (20, 0)
    assert await snapshot(admin) == before
    done = await svc.sweep_app_writes(app_name=APP, limit=150)
    assert (done.expired_due, done.expired_dropped, done.more) == (20, 20, False)
    assert await stale(admin, "ras", users) == []
    assert await admin.zcard(KeySpace().app_sessions(APP)) == 1


# -- bad input and permissions ---------------------------------------------------------------


async def test_an_expiry_index_of_foreign_type_is_named_and_nothing_written(
    admin: Any, worker: Any
) -> None:
    svc = service(worker, ttl_seconds=600)
    s = await svc.create_session(app_name=APP, user_id="ann", session_id="s")
    key = KeySpace().app_expiry(APP)
    await admin.delete(key)
    await admin.set(key, "not a zset")
    pattern = key.replace("{", r"\{").replace("}", r"\}")
    if cluster_path(svc):
        # The app's slot is the second step, as for every app key (docs/cluster.md).
        with pytest.raises(CorruptDataError, match=pattern):
            await svc.create_session(app_name=APP, user_id="ann", session_id="t")
        return
    before = await snapshot(admin)
    with pytest.raises(CorruptDataError, match=pattern):
        await svc.create_session(app_name=APP, user_id="ann", session_id="t")
    with pytest.raises(CorruptDataError, match=pattern):
        await svc.append_event(s, event(1))
    with pytest.raises(CorruptDataError, match=pattern):
        await svc.delete_session(app_name=APP, user_id="ann", session_id="s")
    assert await snapshot(admin) == before


@pytest.mark.real
@pytest.mark.acl
@pytest.mark.parametrize("layout", ["single", "cluster-layout"])
async def test_the_readme_user_cleans_up_and_nothing_new_is_refused(
    layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real kind: the README user on database 0, where the acl kind would take ACL_DB.
    async with backend("real", monkeypatch) as admin, acl_user(admin) as worker:
        cluster = layout != "single" or None
        svc = RedisSessionService(
            worker, config=SessionServiceConfig(ttl_seconds=1, cluster=cluster)
        )
        users = ["ann", "bob"]
        for i in range(8):
            s = await svc.create_session(app_name=APP, user_id=users[i % 2], session_id=f"s{i}")
            await svc.append_event(s, event(i))
        await expired(admin, "ras", made(users, 8))
        keep = RedisSessionService(
            worker, config=SessionServiceConfig(ttl_seconds=600, cluster=cluster)
        )
        for i in range(4):
            s = await keep.create_session(app_name=APP, user_id="cat", session_id=f"k{i}")
            await keep.append_event(s, event(i))
        assert await stale(admin, "ras", users) == []
        report = await keep.sweep_app_writes(app_name=APP, older_than=120)
        assert report.expired_dropped == 0
        assert await keep.check_ready()


# -- the operator's path: a backlog written before the expiry index --------------------------


async def test_the_cli_drops_a_backlog_and_stats_counts_it(cli: Cli) -> None:
    users = ["u0", "u1", "u2", "u3"]
    async with cli.service() as svc:
        for i in range(12):
            s = await svc.create_session(
                app_name=APP, user_id=users[i % 4], session_id=f"s{i}", ttl=1
            )
            await svc.append_event(s, event(i))
        for i in range(3):
            await svc.create_session(app_name=APP, user_id="keeper", session_id=f"k{i}")
    client = cli.client()
    async with client:
        # Data written before the expiry index existed: none of it is in there.
        await client.delete(KeySpace(cli.prefix).app_expiry(APP))
        await expired(client, cli.prefix, made(users, 12))
        row = cli.json("stats", APP)["apps"][0]
        assert (row["sessions"], row["expired_sessions"]) == (15, 12)
        human = cli.run("stats", APP)
        assert human.returncode == 0, human.stderr
        assert "EXPIRED" in human.stdout

        before = await snapshot(client, match=f"{cli.prefix}*")
        dry = cli.run("expired", APP, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert f"12 of 15 sessions in the index of app {APP!r} no longer exist" in dry.stdout
        assert cli.json("expired", APP, "--dry-run")["dropped"] == 0
        assert await snapshot(client, match=f"{cli.prefix}*") == before
        assert len(await stale(client, cli.prefix, users)) == 12 * (3 if cli.cluster else 4)

        done = cli.run("expired", APP)
        assert done.returncode == 0, done.stderr
        assert "dropped the index entries of 12" in done.stderr
        assert await stale(client, cli.prefix, users) == []
        row = cli.json("stats", APP)["apps"][0]
        assert (row["sessions"], row["expired_sessions"]) == (3, 0)
        again = cli.json("expired", APP)
        assert (again["checked"], again["expired"], again["dropped"]) == (3, 0, 0)

        assert cli.run("expired", "nope").returncode == 1
        bad = cli.run("expired", " padded ")
        assert bad.returncode == 2
        assert "app_name" in bad.stderr
