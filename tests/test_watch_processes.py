"""Watching a session across OS processes, with the watcher's connection killed under it.

A watcher in this process follows a session that two writer processes (tests/watch_writer.py)
append to concurrently; an admin client kills the watcher's connection (``CLIENT KILL``)
while it blocks in ``XREAD``. The watcher must see exactly the stored events, in stored
order, each once: on a single Redis (with redis-py's own retries on, and off so that the
watch's own reconnect loop does the work), on a Redis Cluster, through the ADK drop-in, and
across a watcher restart resumed with ``after_event_id``.

Every test uses its own key prefix and deletes its keys afterwards (it never flushes).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from _processes import start
from _servers import skip_without
from redis_agent_sessions import RedisSessionService, SessionServiceConfig
from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions.keys import KeySpace

pytestmark = [pytest.mark.real, pytest.mark.slow]

WRITER = Path(__file__).with_name("watch_writer.py")
APP, USER, SID = "watch_app", "watch_user", "s"
IDS = {"app_name": APP, "user_id": USER, "session_id": SID}
BLOCK_MS = 200
QUIET = 3 * BLOCK_MS / 1000  # seconds without a new event that prove the watch is done
DEADLINE = 20.0  # the most any wait in this module may take


# -- processes -------------------------------------------------------------------------------


async def spawn(started: list[asyncio.subprocess.Process], *args: Any) -> Any:
    return await start(started, WRITER, *args)


async def finished(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    """What the helper printed last, once it exited 0 (a writer waiting at its barrier or
    hold goes on: its stdin closes)."""
    if proc.stdin is not None:
        proc.stdin.close()
    out, err = await asyncio.wait_for(proc.communicate(), DEADLINE)
    assert proc.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    return result


async def signalled(proc: asyncio.subprocess.Process, line: str) -> None:
    """Wait until a writer prints ``line`` (``ready``, ``held``): it then waits for :func:`go`."""
    assert proc.stdout is not None
    got = await asyncio.wait_for(proc.stdout.readline(), DEADLINE)
    assert got.decode().strip() == line, (got, proc.returncode)


async def go(*procs: asyncio.subprocess.Process) -> None:
    """Let writers waiting at a barrier or hold go on."""
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()


def writer_args(
    url: str, prefix: str, name: str, n: int, seed: int, *flags: str, hold: int | None = None
) -> list[Any]:
    return ["write", url, prefix, APP, USER, SID, name, n, seed, *([hold] if hold else []), *flags]


# -- servers, prefixes, observation ----------------------------------------------------------


@pytest.fixture
def prefix() -> str:
    return f"wp-{uuid.uuid4().hex[:10]}"


async def delete_prefix(client: Any, prefix: str) -> None:
    keys = {key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)}
    for key in keys:  # one by one: on a cluster they live in different slots
        await client.delete(key)


@pytest.fixture
async def single(prefix: str) -> AsyncIterator[tuple[str, Redis]]:
    """REDIS_URL and an admin client on it; this test's keys are deleted afterwards."""
    url = skip_without("REDIS_URL")
    admin = Redis.from_url(url)
    yield url, admin
    await delete_prefix(admin, prefix)
    await admin.aclose()


class Observed:
    """Where the connection errors of a kill were handled: inside redis-py's ``Retry``
    (``redis_py``: each failure it saw, ``redis_py_raised``: how many it gave up on), and
    how many reached the watch's own reconnect loop (``loop``)."""

    def __init__(self) -> None:
        self.redis_py: list[str] = []
        self.redis_py_raised = 0
        self.loop: list[str] = []

    def __str__(self) -> str:
        return (
            f"redis-py Retry saw {self.redis_py} (gave up {self.redis_py_raised}x); "
            f"the watch loop saw {self.loop}"
        )


@pytest.fixture
def observed(monkeypatch: pytest.MonkeyPatch) -> Observed:
    """Counts connection errors in this process (the writers run in others); observing only:
    every call still goes to the original."""
    seen = Observed()
    execute = _scripts.execute

    async def counting_execute(pipe: Any, keys: list[str]) -> list[Any]:
        try:
            return await execute(pipe, keys)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            seen.loop.append(type(exc).__name__)
            raise

    call_with_retry = Retry.call_with_retry

    async def counting_call(self: Retry, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
        async def counted_fail(*fail_args: Any) -> Any:
            seen.redis_py.append(type(fail_args[0]).__name__)
            return await fail(*fail_args)

        try:
            return await call_with_retry(self, do, counted_fail, *args, **kwargs)
        except (RedisConnectionError, RedisTimeoutError):
            seen.redis_py_raised += 1
            raise

    monkeypatch.setattr(_scripts, "execute", counting_execute)
    monkeypatch.setattr(Retry, "call_with_retry", counting_call)
    return seen


# -- waiting, watching, killing --------------------------------------------------------------


async def until(check: Callable[[], Any], what: str, task: asyncio.Task[Any] | None = None) -> Any:
    """Polls ``check`` (sync or async) until it is truthy; fails after DEADLINE, or when the
    watcher ``task`` ended (re-raising its error)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE
    while True:
        if task is not None and task.done():
            task.result()  # the watch's own error, if any
            raise AssertionError(f"the watch ended before {what}")
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def follow(events: AsyncIterator[Any], seen: list[Any]) -> None:
    async for event in events:
        seen.append(event)


async def stop(task: asyncio.Task[Any]) -> None:
    """Cancels the watch; one that does not end within DEADLINE fails the test (it
    swallowed the cancel) instead of hanging the run."""
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=DEADLINE)
    assert done, "the watch did not end when cancelled"
    try:
        task.result()
    except asyncio.CancelledError:
        pass


async def connections(admin: Redis, name: str) -> list[dict[str, Any]]:
    return [c for c in await admin.client_list() if c.get("name") == name]


async def wait_blocked(admin: Redis, name: str, task: asyncio.Task[Any]) -> None:
    async def blocked() -> bool:
        return any("b" in c["flags"] for c in await connections(admin, name))

    await until(blocked, f"{name} blocked in XREAD", task)


async def kill_blocked(admin: Redis, name: str, task: asyncio.Task[Any]) -> tuple[set[str], int]:
    """Once a connection named ``name`` blocks (in the watch's XREAD), kills every connection
    of that name by id; their ids and how many CLIENT KILL closed."""

    async def blocked() -> list[dict[str, Any]] | None:
        found = await connections(admin, name)
        return found if any("b" in c["flags"] for c in found) else None

    found = await until(blocked, f"a blocked {name} connection", task)
    killed = 0
    for client in found:
        killed += await admin.client_kill_filter(_id=client["id"])
    return {c["id"] for c in found}, killed


async def reconnected(admin: Redis, name: str, old: set[str], task: asyncio.Task[Any]) -> None:
    async def fresh() -> bool:
        return any(c["id"] not in old for c in await connections(admin, name))

    await until(fresh, f"a new {name} connection after killing {old}", task)


async def stored_ids(service: Any) -> list[str]:
    page = await service.list_events(**IDS, limit=10_000)
    assert page.next_page_token is None
    return [e.id for e in page.events]


def switches(authors: list[str]) -> int:
    """How often consecutive events come from different writers."""
    writers = [a.split("-")[0] for a in authors]
    return sum(1 for a, b in itertools.pairwise(writers) if a != b)


async def watched_two_writers_with_kills(
    *,
    url: str,
    prefix: str,
    flags: list[str],
    watcher: Any,
    watcher_name: str,
    admin: Any,
    kill_admin: Redis,
    n: int,
    kill_after: list[int],
    processes: list[asyncio.subprocess.Process],
) -> None:
    """Test A's scenario, on one server or a cluster (``kill_admin`` is a plain client on
    the node that serves the session)."""
    config = SessionServiceConfig(key_prefix=prefix)
    store = RedisSessionService(admin, config=config)
    await store.create_session(**IDS)
    service = RedisSessionService(watcher, config=config)
    seen: list[Any] = []
    task = asyncio.create_task(follow(service.watch(**IDS, block_ms=BLOCK_MS), seen))
    try:
        # The watcher is blocked in XREAD before any writer starts.
        await wait_blocked(kill_admin, watcher_name, task)
        # A barrier and a hold, not how fast processes start, make the two writers append
        # concurrently and still be appending at every kill: each stops after ``hold``
        # events (together enough for the last kill) until the kills are done.
        hold = max(kill_after) // 2 + 5
        assert hold < n
        writers = [
            await spawn(processes, *writer_args(url, prefix, f"w{k}", n, k, *flags, hold=hold))
            for k in (1, 2)
        ]
        for writer in writers:
            await signalled(writer, "ready")
        await go(*writers)
        for threshold in kill_after:
            await until(lambda t=threshold: len(seen) >= t, f"{threshold} events", task)
            assert all(w.returncode is None for w in writers), "a writer ended before the kill"
            old, killed = await kill_blocked(kill_admin, watcher_name, task)
            assert killed >= 1, f"CLIENT KILL closed nothing of {old}"
            await reconnected(kill_admin, watcher_name, old, task)
        results = [await finished(w) for w in writers]
        await until(lambda: len(seen) >= 2 * n, f"{2 * n} events", task)
        await asyncio.sleep(QUIET)  # nothing more (no duplicate) may follow
        assert not task.done()
    finally:
        await stop(task)

    stored = await stored_ids(store)
    watched = [e.id for e in seen]
    assert len(stored) == 2 * n
    assert len(set(stored)) == 2 * n
    assert set(stored) == set(results[0]["ids"]) | set(results[1]["ids"])
    assert watched == stored
    page = await store.list_events(**IDS, limit=10_000)
    assert seen == page.events  # the whole events, not only their ids
    for k, result in enumerate(results, 1):
        own = set(result["ids"])
        assert len(result["ids"]) == n
        assert [i for i in watched if i in own] == result["ids"]
        assert [e.author for e in seen if e.id in own] == [f"w{k}-{i}" for i in range(n)]
    # The two processes really appended concurrently.
    assert switches([e.author for e in seen]) >= 5, [e.author for e in seen]


# -- A: single Redis, two writer processes, two kills ----------------------------------------


@pytest.mark.parametrize("retrying", ["watch-loop", "redis-py"])
async def test_a_watcher_sees_two_processes_appends_through_connection_kills(
    single: tuple[str, Redis],
    prefix: str,
    processes: list[asyncio.subprocess.Process],
    observed: Observed,
    retrying: str,
) -> None:
    """``watch-loop``: no retry in redis-py (what ``Redis.from_url`` gives by default in
    redis-py 8.1), so every kill reaches the watch's own reconnect loop. ``redis-py``: the
    client retries a failed pipeline itself (as ``Redis(...)`` built without a URL does)."""
    url, admin = single
    name = f"ras-watcher-{prefix}"
    retry = Retry(NoBackoff(), 0)
    if retrying == "redis-py":
        retry = Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.5), 3)
    watcher = Redis.from_url(url, client_name=name, retry=retry)
    try:
        await watched_two_writers_with_kills(
            url=url,
            prefix=prefix,
            flags=[],
            watcher=watcher,
            watcher_name=name,
            admin=admin,
            kill_admin=admin,
            n=60,
            kill_after=[20, 70],
            processes=processes,
        )
    finally:
        await watcher.aclose()
    print(f"\n[{retrying}] {observed}")
    # The kills were felt where this variant says they are handled.
    if retrying == "watch-loop":
        assert len(observed.loop) >= 2, str(observed)
    else:
        assert len(observed.redis_py) >= 2, str(observed)


# -- B: resume by event id across a watcher restart ------------------------------------------


async def test_a_new_watcher_resumes_after_the_last_event_the_old_one_saw(
    single: tuple[str, Redis], prefix: str, processes: list[asyncio.subprocess.Process]
) -> None:
    url, admin = single
    n, first_part = 40, 12
    config = SessionServiceConfig(key_prefix=prefix)
    service = RedisSessionService(admin, config=config)
    await service.create_session(**IDS)
    old_watcher = await spawn(processes, "watch", url, prefix, APP, USER, SID, first_part)
    # The writer stops mid-way (after ``hold`` events) until the old watcher is gone, so
    # the new one must resume from where the old stopped, with more still to come.
    hold = 20
    writer = await spawn(processes, *writer_args(url, prefix, "w1", n, 7, hold=hold))
    await signalled(writer, "ready")
    await go(writer)
    first = (await finished(old_watcher))["ids"]
    await signalled(writer, "held")
    # No watcher runs now, and the writer is still appending.
    assert len(await stored_ids(service)) == hold
    assert writer.returncode is None
    written = (await finished(writer))["ids"]
    stored = await stored_ids(service)
    assert stored == written
    assert len(first) == first_part
    assert first == stored[:first_part]

    seen: list[Any] = []
    resumed = service.watch(**IDS, after_event_id=first[-1], block_ms=BLOCK_MS)
    task = asyncio.create_task(follow(resumed, seen))
    try:
        await until(lambda: len(seen) >= n - first_part, "the remaining events", task)
        await asyncio.sleep(QUIET)  # and nothing after them
        assert not task.done()
    finally:
        await stop(task)
    assert first + [e.id for e in seen] == stored
    assert [e.author for e in seen] == [f"w1-{i}" for i in range(first_part, n)]


# -- C: the same on a Redis Cluster ----------------------------------------------------------


@pytest.fixture
async def cluster(prefix: str) -> AsyncIterator[tuple[str, RedisCluster]]:
    """REDIS_CLUSTER_URL and an admin cluster client; this test's keys are deleted after."""
    url = skip_without("REDIS_CLUSTER_URL")
    admin = RedisCluster.from_url(url)
    yield url, admin
    await delete_prefix(admin, prefix)
    await admin.aclose()


@pytest.mark.cluster
async def test_a_cluster_watcher_sees_two_processes_appends_through_a_connection_kill(
    cluster: tuple[str, RedisCluster],
    prefix: str,
    processes: list[asyncio.subprocess.Process],
    observed: Observed,
) -> None:
    url, admin = cluster
    name = f"ras-watcher-{prefix}"
    watcher = RedisCluster.from_url(url, client_name=name)
    await watcher.initialize()
    node = watcher.get_node_from_key(KeySpace(prefix).session(APP, USER, SID).events)
    node_admin = Redis(host=node.host, port=node.port)
    try:
        await watched_two_writers_with_kills(
            url=url,
            prefix=prefix,
            flags=["--cluster"],
            watcher=watcher,
            watcher_name=name,
            admin=admin,
            kill_admin=node_admin,
            n=20,
            kill_after=[8],
            processes=processes,
        )
    finally:
        await watcher.aclose()
        await node_admin.aclose()
    print(f"\n[cluster] {observed}")


# -- D: the ADK drop-in ----------------------------------------------------------------------


@pytest.mark.adk
async def test_an_adk_watcher_sees_what_an_adk_process_appends(
    single: tuple[str, Redis], prefix: str, processes: list[asyncio.subprocess.Process]
) -> None:
    pytest.importorskip("google.adk")
    from google.adk.events import Event as AdkEvent

    from redis_agent_sessions.adk import RedisSessionService as AdkSessionService

    url, admin = single
    n = 15
    service = AdkSessionService(admin, config=SessionServiceConfig(key_prefix=prefix))
    await service.create_session(**IDS)
    seen: list[Any] = []
    task = asyncio.create_task(follow(service.watch(**IDS, block_ms=BLOCK_MS), seen))
    try:
        writer = await spawn(processes, *writer_args(url, prefix, "adk", n, 3, "--adk"))
        result = await finished(writer)
        await until(lambda: len(seen) >= n, f"{n} ADK events", task)
        await asyncio.sleep(QUIET)
        assert not task.done()
    finally:
        await stop(task)
    session = await service.get_session(**IDS)
    assert session is not None
    assert all(isinstance(e, AdkEvent) for e in seen)
    assert seen == session.events
    assert [e.id for e in seen] == result["ids"]
    assert seen == [AdkEvent.model_validate_json(e) for e in result["events"]]
    assert [e.author for e in seen] == [f"adk-{i}" for i in range(n)]
    assert seen[-1].content is not None
    assert seen[-1].content.parts[0].text == f"adk #{n - 1}"  # type: ignore[index]
