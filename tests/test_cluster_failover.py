"""A manual failover of every primary of a Redis Cluster while workers append: nothing
acknowledged is lost, nothing is stored twice.

The test starts its own cluster (3 primaries, 3 replicas, from the ``redis-server`` on PATH,
each node in its own temporary directory: ``_local_cluster.py``) because it changes the
cluster's topology; the shared cluster of REDIS_CLUSTER_URL is left alone. Worker tasks,
each with its own ``RedisCluster`` client, append events (session-only, ``user:`` and
``app:`` deltas) to sessions of users on every shard, while ``CLUSTER FAILOVER`` promotes
the replica of each primary in turn. redis-py follows the MOVED replies itself; anything it
still raises (connection errors, timeouts, CLUSTERDOWN) the worker retries with the same
event, which the store makes idempotent. Afterwards every acknowledged append is stored
exactly once, the session and ``user:`` state are the fold of the stored deltas, and every
``app:`` key holds its newest acknowledged write.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.cluster import key_slot
from redis.exceptions import ClusterDownError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from _folds import fold_deltas
from _local_cluster import LocalCluster, parse_nodes, settled, throwaway_cluster
from cluster_worker import version
from redis_agent_sessions import Event, EventActions, RedisSessionService, Session
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.state import merge_state

APP = "failover_app"
KEYS = KeySpace()
# A manual failover does not wait on it; a node starved for this long on a loaded runner
# must not be failed over automatically behind the test's back.
NODE_TIMEOUT_MS = 5000
# The whole test stays under a minute, whatever fails: each phase has its own bound, with
# room for a loaded 2-core runner.
SETUP_SECONDS = 30  # starting the nodes and forming the cluster (about 3 s)
BODY_SECONDS = 40  # the workers, the three failovers and the checks (about 5 s)
SWITCH_SECONDS = 8  # one failover, until every node agrees on the new roles
WARMUP_SECONDS = 0.7  # appends before the first failover
AFTER_SECONDS = 1.0  # appends after the last failover completed
WORKERS = 3  # each owns one user on every shard

# What a worker may get from redis-py while a primary hands over (after redis-py's own
# retries): it retries the append with the same event.
TRANSIENT = (RedisConnectionError, RedisTimeoutError, ClusterDownError, TryAgainError)


@pytest.fixture
def local_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A new 3-primary + 3-replica Redis Cluster on free loopback ports; every node is
    killed at teardown, whatever happened."""
    with throwaway_cluster(
        tmp_path, node_timeout_ms=NODE_TIMEOUT_MS, setup_seconds=SETUP_SECONDS
    ) as cluster:
        yield cluster


# -- failover --------------------------------------------------------------------------------


@dataclass
class Failover:
    primary: int  # port of the primary handing over
    replica: int  # port of its replica, the new primary
    started: float = 0.0  # time.monotonic() when CLUSTER FAILOVER was sent
    done: float = 0.0  # when every node agreed on the new roles


async def topology(port: int) -> dict[int, int]:
    """{primary port: its replica's port}, as the node at ``port`` sees it."""
    async with Redis(port=port, socket_timeout=2) as client:
        view = parse_nodes(await client.execute_command("CLUSTER", "NODES"))
    return {view[n["master"]]["port"]: n["port"] for n in view.values() if "slave" in n["flags"]}


async def fail_over(ports: list[int], step: Failover) -> None:
    """``CLUSTER FAILOVER`` on ``step.replica`` (the default, coordinated kind), then waits
    until every node sees it as the primary and the old primary as its replica, and the old
    primary has resynced from it."""
    clients = {p: Redis(port=p, socket_timeout=2) for p in ports}
    try:
        step.started = time.monotonic()
        assert await clients[step.replica].execute_command("CLUSTER", "FAILOVER")
        deadline = step.started + SWITCH_SECONDS
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            try:
                views = [
                    parse_nodes(await c.execute_command("CLUSTER", "NODES"))
                    for c in clients.values()
                ]
                old = await clients[step.primary].info("replication")
            except redis.RedisError:
                continue
            by_port = [{n["port"]: (i, n) for i, n in v.items()} for v in views]
            if (
                all(settled(v) for v in views)
                and all(
                    "master" in b[step.replica][1]["flags"]
                    and b[step.primary][1]["master"] == b[step.replica][0]
                    for b in by_port
                )
                and old["role"] == "slave"
                and old.get("master_port") == step.replica
                and old.get("master_link_status") == "up"
            ):
                step.done = time.monotonic()
                return
        pytest.fail(f"the replica on {step.replica} did not take over from {step.primary}")
    finally:
        for c in clients.values():
            await c.aclose()


# -- workers ---------------------------------------------------------------------------------


@dataclass
class Ack:
    """An append that returned without error."""

    user: str
    event_id: str
    delta: dict[str, Any]
    sent: float  # time.monotonic() of the first attempt
    acked: float
    attempts: int


@dataclass
class WorkerLog:
    acks: list[Ack] = field(default_factory=list)
    app_writes: list[tuple[str, str, str]] = field(default_factory=list)  # version, key, value
    retried: Counter[str] = field(default_factory=Counter)  # exception type -> retries


async def until_done(what: str, deadline: float, log: WorkerLog, call: Any) -> Any:
    """``await call()``, retried after the errors a handover may cause, until ``deadline``."""
    while True:
        try:
            return await call()
        except TRANSIENT as exc:
            log.retried[type(exc).__name__] += 1
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: still failing at the deadline") from exc
            await asyncio.sleep(0.02)


async def worker(
    n: int, url: str, users: list[str], stop: asyncio.Event, deadline: float
) -> WorkerLog:
    """Appends to one session per user, round robin, until ``stop``; the event in flight
    when ``stop`` is set is still retried until acknowledged."""
    log = WorkerLog()
    rng = random.Random(n)
    client = RedisCluster.from_url(url, socket_timeout=5, socket_connect_timeout=2)
    service = RedisSessionService(client)
    try:
        sessions: dict[str, Session] = {}
        for user in users:
            found = await service.get_session(app_name=APP, user_id=user, session_id="s")
            assert found is not None
            sessions[user] = found
        i = 0
        while not stop.is_set():
            user = users[i % len(users)]
            session = sessions[user]
            k = i // len(users)  # this user's k-th event: session-only, + user:, + app:
            delta: dict[str, Any] = {"n": k, f"s{k % 4}": f"{user}-{k}"}
            if k % 3 >= 1:
                delta |= {"user:n": k, f"user:u{k % 2}": f"{user}-{k}"}
            app: dict[str, str] = {}
            if k % 3 == 2:
                app = {f"k{j}": f"{user}-{k}-{j}" for j in rng.sample(range(3), rng.randint(1, 2))}
                delta |= {f"app:{k}": v for k, v in app.items()}
            event = Event(author=f"w{n}", actions=EventActions(state_delta=dict(delta)))
            sent = time.monotonic()
            attempts = 0

            async def append(session: Session = session, event: Event = event) -> Event:
                nonlocal attempts
                attempts += 1
                # The same event every time: a retry of an append that did land is a no-op.
                return await service.append_event(session, event)

            await until_done(f"append of {event.id} for {user}", deadline, log, append)
            log.acks.append(Ack(user, event.id, delta, sent, time.monotonic(), attempts))
            assert session.events[-1].id == event.id  # the copy follows, retried or not
            if app:
                # The version this write got: its entry is the newest of the user's outbox
                # (this worker is the user's only writer; the next operation may trim it).
                outbox = KEYS.app_outbox(APP, user)
                [(stream_id, fields)] = await until_done(
                    f"outbox of {user}",
                    deadline,
                    log,
                    lambda outbox=outbox: client.xrevrange(outbox, "+", "-", count=1),
                )
                for key, value in app.items():
                    assert fields[f"app:{key}".encode()] == f'"{value}"'.encode(), (fields, app)
                    log.app_writes.append((version(stream_id, user), key, value))
            i += 1
            await asyncio.sleep(0)
    finally:
        await service.aclose()
        await client.aclose()
    return log


# -- the test --------------------------------------------------------------------------------


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.cluster
async def test_manual_failover_of_every_primary_loses_no_acknowledged_append(
    local_cluster: LocalCluster,
) -> None:
    try:
        await asyncio.wait_for(failover_under_load(local_cluster), BODY_SECONDS)
    except asyncio.TimeoutError:
        pytest.fail(f"not done after {BODY_SECONDS} s; the nodes' logs:\n{local_cluster.logs()}")


async def failover_under_load(cluster: LocalCluster) -> None:
    ports = [n.port for n in cluster.nodes]
    pairs = await topology(ports[0])
    assert len(pairs) == 3

    # Users spread over every shard: one per shard for each worker.
    async with Redis(port=ports[0], socket_timeout=2) as probe:
        ranges = await probe.execute_command("CLUSTER", "SLOTS")

    def shard(user: str) -> int:
        slot = key_slot(KEYS.user_state(APP, user).encode())
        return next(int(r[2][1]) for r in ranges if int(r[0]) <= slot <= int(r[1]))

    by_shard: dict[int, list[str]] = {p: [] for p in pairs}
    for i in range(10_000):
        user = f"u{i}"
        if len(by_shard[shard(user)]) < WORKERS:
            by_shard[shard(user)].append(user)
        if all(len(us) == WORKERS for us in by_shard.values()):
            break
    owned = [[us[w] for us in by_shard.values()] for w in range(WORKERS)]
    users = [u for us in owned for u in us]
    shard_of = {u: shard(u) for u in users}

    async with RedisSessionService.from_url(cluster.url, cluster=True) as service:
        for user in users:
            await service.create_session(app_name=APP, user_id=user, session_id="s")

    stop = asyncio.Event()
    hard_deadline = time.monotonic() + BODY_SECONDS - 6  # leaves time for the checks
    tasks = [
        asyncio.create_task(worker(w, cluster.url, owned[w], stop, hard_deadline))
        for w in range(WORKERS)
    ]
    steps = [Failover(primary, replica) for primary, replica in pairs.items()]
    try:
        await asyncio.sleep(WARMUP_SECONDS)
        for step in steps:
            assert not any(t.done() for t in tasks), "a worker stopped early"
            await fail_over(ports, step)
        await asyncio.sleep(AFTER_SECONDS)
    finally:
        stop.set()
        logs: list[WorkerLog] = await asyncio.gather(*tasks)

    # The roles really switched: every old primary now replicates from its old replica.
    assert await topology(ports[0]) == {s.replica: s.primary for s in steps}

    acks = [a for log in logs for a in log.acks]

    def phase(ack: Ack) -> str:
        """When an append was acknowledged, relative to the handovers."""
        if ack.acked < steps[0].started:
            return "before the first handover"
        if any(s.started <= ack.acked <= s.done for s in steps):
            return "during a handover"
        return "after the last handover" if ack.acked > steps[-1].done else "between handovers"

    # Every worker kept working after the last handover, on every shard.
    last_done = max(s.done for s in steps)
    after = [a for a in acks if a.sent > last_done]
    assert {a.user for a in after} == set(users)
    assert any(phase(a) == "during a handover" for a in acks)

    # CLUSTER FAILOVER (without FORCE or TAKEOVER) is coordinated: the primary pauses its
    # writers, the replica waits until it has processed the primary's whole replication
    # stream, and only then takes over; the paused writers are then redirected to it. So
    # whatever the old primary acknowledged is on the new one: with asynchronous
    # replication a write acknowledged just before an *unplanned* failover may be lost,
    # but here not one acknowledged append may be missing, before, during or after.
    async with RedisSessionService.from_url(cluster.url, cluster=True) as service:
        app_state = await service.get_app_state(app_name=APP)
        for user in users:
            mine = [a for a in acks if a.user == user]
            session = await service.get_session(app_name=APP, user_id=user, session_id="s")
            assert session is not None
            stored = [e.id for e in session.events]
            assert [i for i, c in Counter(stored).items() if c > 1] == [], f"{user}: twice"
            missing = Counter(phase(a) for a in mine if a.event_id not in set(stored))
            assert not missing, f"{user} (shard {shard_of[user]}) lost acked appends: {missing}"
            # One writer per session, so the stored order is the order of the acks, and
            # nothing is stored that was not acknowledged (no attempt was abandoned).
            assert stored == [a.event_id for a in mine], user
            assert [e.actions.state_delta for e in session.events] == [a.delta for a in mine]
            fold, user_fold = fold_deltas(session.events)
            assert await service.get_user_state(app_name=APP, user_id=user) == user_fold, user
            assert session.state == merge_state(fold, user_fold, app_state), user

    # Every app: key holds its newest acknowledged write, whichever shard recorded it.
    newest: dict[str, tuple[str, str]] = {}
    writers: dict[str, set[int]] = {}
    for log in logs:
        for ver, key, value in log.app_writes:
            if key not in newest or ver > newest[key][0]:
                newest[key] = (ver, value)
            writers.setdefault(key, set()).add(shard_of[value.split("-")[0]])
    # (users of every shard wrote every key, else newest-wins would prove little)
    assert writers == {key: set(pairs) for key in newest}
    assert app_state == {key: value for key, (_, value) in newest.items()}
    async with RedisCluster.from_url(cluster.url) as client:
        versions = await client.hgetall(KEYS.app_versions(APP))
    assert {k.decode(): v.decode() for k, v in versions.items()} == {
        key: ver for key, (ver, _) in newest.items()
    }

    # What the handovers looked like to the workers (shown with -s, or on failure).
    retried = sum((log.retried for log in logs), Counter())
    during = [a for a in acks if phase(a) == "during a handover"]
    print(
        f"\n{len(acks)} appends acknowledged ({len(during)} during a handover, "
        f"{len(after)} after the last); switches took "
        + ", ".join(f"{(s.done - s.started) * 1000:.0f} ms" for s in steps)
        + f"; slowest append {max(a.acked - a.sent for a in acks) * 1000:.0f} ms; "
        + f"appends needing a retry: {sum(a.attempts > 1 for a in acks)}; "
        + f"worker retries by error: {dict(retried) or 'none'}"
    )
