"""Appending workers and the checks after them, shared by the failover tests of a throwaway
cluster (``test_cluster_failover.py``: CLUSTER FAILOVER; ``test_cluster_kill.py``: SIGKILL).

Each worker owns one user on every shard and appends to that user's session ``s``, round
robin: session-only, ``user:`` and ``app:`` deltas in turn, retrying the same event (which
the store makes idempotent) after the errors the test allows. Afterwards every acknowledged
append must be stored exactly once and in order, the session and ``user:`` state must be the
fold of the stored deltas, and every ``app:`` key must hold its newest acknowledged write.
"""

from __future__ import annotations

import asyncio
import random
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.cluster import key_slot
from redis.exceptions import ClusterDownError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from _folds import fold_deltas
from cluster_worker import version
from redis_agent_sessions import (
    Event,
    EventActions,
    RedisSessionService,
    Session,
    SessionServiceConfig,
)
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.state import merge_state

KEYS = KeySpace()

FAILOVER_ERRORS: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ClusterDownError,
    TryAgainError,
)
"""What redis-py may raise while a primary hands over (after its own retries): a worker
retries the append with the same event. Its ConnectionError covers the library's
ConnectionLostError, which is what a lost connection redis-py raised as a bare AttributeError
or TypeError becomes (``tests/test_lost_connections.py``): those two, and any other type,
fail the test."""


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
    retried: Counter[str] = field(default_factory=Counter)  # error type -> retries
    unexpected: Counter[str] = field(default_factory=Counter)  # error type -> count
    tracebacks: dict[str, str] = field(default_factory=dict)  # error type -> the first one


@dataclass(frozen=True)
class Load:
    """What the workers of one test do."""

    app: str
    retryable: tuple[type[Exception], ...]
    """Errors the test expects while a primary changes: retried with the same event."""
    config: SessionServiceConfig = field(default_factory=SessionServiceConfig)
    max_unexpected: int = 0
    """0: any other error ends the worker at once. Else other errors are recorded (the test
    fails on them at the end, with their count) and retried, up to this many."""
    app_entry_may_be_gone: bool = False
    """Whether a worker may find its own app: outbox entry trimmed already (a retry after a
    WriteConcernError from the app step learns it was applied, and drops it)."""


async def until_done(load: Load, what: str, deadline: float, log: WorkerLog, call: Any) -> Any:
    """``await call()``, retried after the errors ``load`` allows, until ``deadline``."""
    while True:
        try:
            return await call()
        except load.retryable as exc:
            log.retried[type(exc).__name__] += 1
            error: Exception = exc
        except Exception as exc:
            if not load.max_unexpected:
                raise
            name = type(exc).__name__
            log.unexpected[name] += 1
            log.tracebacks.setdefault(name, traceback.format_exc())
            if sum(log.unexpected.values()) >= load.max_unexpected:
                raise
            error = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still failing at the deadline") from error
        await asyncio.sleep(0.02)


async def worker(
    load: Load,
    n: int,
    url: str,
    users: list[str],
    stop: asyncio.Event,
    deadline: float,
    log: WorkerLog,
) -> None:
    """Appends to one session per user, round robin, until ``stop``; the event in flight
    when ``stop`` is set is still retried until acknowledged."""
    rng = random.Random(n)
    client = RedisCluster.from_url(url, socket_timeout=5, socket_connect_timeout=2)
    service = RedisSessionService(client, config=load.config)
    try:
        sessions: dict[str, Session] = {}
        for user in users:
            found = await service.get_session(app_name=load.app, user_id=user, session_id="s")
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

            await until_done(load, f"append of {event.id} for {user}", deadline, log, append)
            log.acks.append(Ack(user, event.id, delta, sent, time.monotonic(), attempts))
            assert session.events[-1].id == event.id  # the copy follows, retried or not
            if app:
                stream_id = await _app_version(load, client, user, app, deadline, log)
                for key, value in app.items():
                    log.app_writes.append((version(stream_id, user), key, value))
            i += 1
            await asyncio.sleep(0)
    finally:
        await service.aclose()
        await client.aclose()


async def start(
    load: Load, url: str, owned: list[list[str]], deadline: float
) -> tuple[asyncio.Event, list[WorkerLog], list[asyncio.Task[None]]]:
    """Each user's session ``s``, then one worker per list of ``owned`` users: the event
    that stops them, their logs and their tasks."""
    async with RedisSessionService.from_url(url, cluster=True) as service:
        for users in owned:
            for user in users:
                await service.create_session(app_name=load.app, user_id=user, session_id="s")
    stop = asyncio.Event()
    logs = [WorkerLog() for _ in owned]
    tasks = [
        asyncio.create_task(worker(load, n, url, users, stop, deadline, logs[n]))
        for n, users in enumerate(owned)
    ]
    return stop, logs, tasks


async def _app_version(
    load: Load, client: Any, user: str, app: dict[str, str], deadline: float, log: WorkerLog
) -> str:
    """The outbox id the user's newest app: write got (this worker is the user's only writer,
    and a retry adds no entry), after checking that entry holds ``app``."""
    outbox = KEYS.app_outbox(load.app, user)
    info = await until_done(
        load, f"outbox of {user}", deadline, log, lambda: client.xinfo_stream(outbox)
    )
    stream_id: str = info["last-generated-id"]
    entry = info["last-entry"]
    assert entry is not None or load.app_entry_may_be_gone, info
    if entry is not None:
        entry_id, fields = entry
        assert entry_id == stream_id, info
        for key, value in app.items():
            assert fields[f"app:{key}".encode()] == f'"{value}"'.encode(), (fields, app)
    return stream_id


def spread_users(
    app: str, slots: list[Any], primaries: list[int], workers: int
) -> tuple[list[list[str]], dict[str, int]]:
    """Users for each worker, one per shard (named by its primary's port, from a CLUSTER
    SLOTS reply), and the shard of each user."""

    def shard(user: str) -> int:
        slot = key_slot(KEYS.user_state(app, user).encode())
        return next(int(r[2][1]) for r in slots if int(r[0]) <= slot <= int(r[1]))

    by_shard: dict[int, list[str]] = {p: [] for p in primaries}
    for i in range(10_000):
        if len(by_shard[shard(f"u{i}")]) < workers:
            by_shard[shard(f"u{i}")].append(f"u{i}")
        if all(len(us) == workers for us in by_shard.values()):
            break
    owned = [[us[w] for us in by_shard.values()] for w in range(workers)]
    return owned, {u: shard(u) for us in owned for u in us}


async def check_stored(
    app: str, url: str, acks: list[Ack], shard_of: dict[str, int], phase: Callable[[Ack], str]
) -> dict[str, Any]:
    """Every acknowledged append is stored once, in the order of the acks (one writer per
    session), nothing else is, and the state is the fold of the stored deltas; ``phase``
    names when a missing one was acknowledged. Returns the app state."""
    async with RedisSessionService.from_url(url, cluster=True) as service:
        app_state = await service.get_app_state(app_name=app)
        for user in shard_of:
            mine = [a for a in acks if a.user == user]
            session = await service.get_session(app_name=app, user_id=user, session_id="s")
            assert session is not None
            stored = [e.id for e in session.events]
            assert [i for i, c in Counter(stored).items() if c > 1] == [], f"{user}: twice"
            missing = Counter(phase(a) for a in mine if a.event_id not in set(stored))
            assert not missing, f"{user} (shard {shard_of[user]}) lost acked appends: {missing}"
            # One writer per session, retrying each event until acknowledged: the stored
            # order is the order of the acks, and nothing else is stored.
            assert stored == [a.event_id for a in mine], user
            assert [e.actions.state_delta for e in session.events] == [a.delta for a in mine]
            fold, user_fold = fold_deltas(session.events)
            assert await service.get_user_state(app_name=app, user_id=user) == user_fold, user
            assert session.state == merge_state(fold, user_fold, app_state), user
    return app_state


async def check_app_writes(
    app: str,
    url: str,
    logs: list[WorkerLog],
    shard_of: dict[str, int],
    shards: set[int],
    app_state: dict[str, Any],
) -> None:
    """Every app: key holds its newest acknowledged write, whichever shard recorded it, and
    users of every shard wrote every key (else newest-wins would prove little)."""
    newest: dict[str, tuple[str, str]] = {}
    writers: dict[str, set[int]] = {}
    for log in logs:
        for ver, key, value in log.app_writes:
            if key not in newest or ver > newest[key][0]:
                newest[key] = (ver, value)
            writers.setdefault(key, set()).add(shard_of[value.split("-")[0]])
    assert writers == dict.fromkeys(newest, shards)
    assert app_state == {key: value for key, (_, value) in newest.items()}
    async with RedisCluster.from_url(url) as client:
        versions = await client.hgetall(KEYS.app_versions(app))
    assert {k.decode(): v.decode() for k, v in versions.items()} == {
        key: ver for key, (ver, _) in newest.items()
    }
