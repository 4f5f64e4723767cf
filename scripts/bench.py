"""Benchmark of redis-agent-sessions (not a test): latency, throughput, and where time goes.

Usage::

    .venv/bin/python scripts/bench.py            # full run, ~1 minute
    .venv/bin/python scripts/bench.py --quick    # smoke run, well under 20 s
    .venv/bin/python scripts/bench.py --json     # machine-readable result on stdout
    .venv/bin/python scripts/bench.py --url redis://127.0.0.1:6379/0

Without ``--url`` it starts a throwaway ``redis-server`` (from PATH) on a free loopback
port in a temporary directory and always stops it. With ``--url`` it writes only keys
under a random prefix and deletes them at the end.

Everything runs in one process, on one ``redis.asyncio.Redis`` client (bytes replies,
hiredis parser when installed), so the raw EVALSHA round trips and the library calls
are measured on the same connection pool in the same run. Latencies come from
``time.perf_counter_ns`` around each awaited call; before every timed phase the
garbage collector runs and the survivors are frozen (``gc.freeze``), and it stays
enabled while timing, as in an application. The Python profile (manual timers and
cProfile) runs last, in its own phase, so it does not touch the main numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import math
import os
import platform
import pstats
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson
import redis
from redis.asyncio import Redis
from redis.asyncio.connection import DefaultParser

from redis_agent_sessions import (
    Content,
    Event,
    EventActions,
    GetSessionConfig,
    Part,
    RedisSessionService,
    Session,
    SessionServiceConfig,
)
from redis_agent_sessions._redis import prebuilt
from redis_agent_sessions._redis import scripts as scripts_module
from redis_agent_sessions._redis.scripts import lua_source
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.sessions import _engine as engine_module

APP = "bench_app"
USERS = 50
HISTORY_SIZES = (1, 100, 1000, 10_000)
GET_SESSION_EVENTS = 1000
RECENT = 20
TARGET_APPEND_VS_RAW = 1.5
TARGET_10K_VS_1 = 1.2
TARGET_GET_MS = 8.0

TRIVIAL_LUA = "return 1"
HSET_XADD_LUA = """\
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XADD', KEYS[2], '*', 'event', ARGV[3])
"""


@dataclass(frozen=True)
class Plan:
    """How many operations each phase runs."""

    name: str
    appends: int  # measured appends per history size
    warmup: int  # untimed calls before each timed phase
    raw_calls: int
    get_full_calls: int
    get_recent_calls: int
    throughput_appends: int  # per concurrency case, split across the tasks
    profile_appends: int


FULL = Plan("full", 2000, 200, 5000, 300, 2000, 8000, 3000)
QUICK = Plan("quick", 200, 30, 500, 30, 200, 800, 300)


# -- statistics ------------------------------------------------------------------------------


@dataclass
class Stats:
    """Latency summary of one series, in microseconds."""

    n: int
    p50_us: float
    p99_us: float
    mean_us: float
    min_us: float


def summarize(samples_ns: Sequence[int]) -> Stats:
    ordered = sorted(samples_ns)
    n = len(ordered)
    mid = n // 2
    median = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    p99 = ordered[max(0, math.ceil(0.99 * n) - 1)]  # nearest rank
    return Stats(n, median / 1e3, p99 / 1e3, sum(ordered) / n / 1e3, ordered[0] / 1e3)


@contextmanager
def settled_gc() -> Iterator[None]:
    """Collect, then freeze what survives, so old histories are not rescanned while timing."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# -- redis server ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def throwaway_redis() -> Iterator[str]:
    """A redis-server of our own on loopback, stopped (by its pid) on the way out."""
    exe = shutil.which("redis-server")
    if exe is None:
        sys.exit("redis-server is not on PATH; install it or pass --url")
    with tempfile.TemporaryDirectory(prefix="ras-bench-") as tmp:
        for _attempt in range(3):
            port = free_port()
            options = {
                "port": str(port),
                "bind": "127.0.0.1",
                "save": "",
                "appendonly": "no",
                "dir": tmp,
                "logfile": os.path.join(tmp, "redis.log"),
            }
            command = [
                exe,
                *(arg for name, value in options.items() for arg in (f"--{name}", value)),
            ]
            proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                if wait_for_ping(proc, port):
                    yield f"redis://127.0.0.1:{port}/0"
                    return
            finally:
                stop_process(proc)
        sys.exit("could not start redis-server on a free loopback port")


def run_on_server(
    run: Callable[[str, bool, Any], Awaitable[dict[str, Any]]], url: str | None, plan: Any
) -> dict[str, Any]:
    """``run(url, owned, plan)`` on ``url``, or on a throwaway server of our own when None;
    its result with the wall time in ``environment.wall_seconds``."""
    started = time.perf_counter()
    if url:
        result = asyncio.run(run(url, False, plan))
    else:
        with throwaway_redis() as own:
            result = asyncio.run(run(own, True, plan))
    result["environment"]["wall_seconds"] = round(time.perf_counter() - started, 1)
    return result


def wait_for_ping(proc: subprocess.Popen[bytes], port: int) -> bool:
    probe = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.2)
    try:
        for _ in range(100):
            if proc.poll() is not None:
                return False  # exited, e.g. the port was taken in the meantime
            try:
                if probe.ping():
                    return True
            except redis.ConnectionError:
                time.sleep(0.05)
        return False
    finally:
        probe.close()


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- workload --------------------------------------------------------------------------------

_USER_LINES = (
    "I need a flight from Lisbon to Berlin next Tuesday morning, one adult, economy please.",
    "Aisle seat if possible, and I will bring one checked bag of about 20 kg.",
    "The 08:40 departure works. Can you also check whether there is a later return on Friday?",
    "Please use the card ending in 4421 and send the confirmation to my work address.",
)
_AGENT_LINES = (
    "I found three nonstop options: TP 552 at 08:40 (EUR 129), LH 1167 at 11:05 (EUR 164) and "
    "TP 556 at 17:20 (EUR 118). All include a cabin bag; a checked bag costs EUR 35 extra.",
    "Seat 14C (aisle) is available on TP 552. I have added one checked bag, total now EUR 164.",
    "On Friday the latest return is TP 557 at 20:55 from Berlin, arriving 23:10, fare EUR 141.",
    "Booking confirmed: reference K7QX2M. The e-ticket and receipt are on their way by email.",
)


def make_event(turn: int, invocation_id: str) -> Event:
    """One realistic turn: text content, and a delta on session and ``user:`` keys."""
    by_user = turn % 2 == 0
    lines = _USER_LINES if by_user else _AGENT_LINES
    delta: dict[str, Any] = {
        "booking_step": ("search", "select", "extras", "pay")[turn % 4],
        "turn": turn,
        "user:last_seen": time.time(),
    }
    if not by_user:
        delta["itinerary"] = {"from": "LIS", "to": "BER", "flight": "TP552", "fare": 129.0}
        delta["user:preferred_seat"] = "aisle"
    return Event(
        invocation_id=invocation_id,
        author="user" if by_user else "booking_agent",
        content=Content(
            role="user" if by_user else "model", parts=[Part(text=lines[turn % len(lines)])]
        ),
        actions=EventActions(state_delta=delta),
    )


class Workload:
    """Sessions and events of the benchmark, all under one service."""

    def __init__(self, service: RedisSessionService) -> None:
        self.service = service
        self._next_user = 0

    def next_user(self) -> str:
        self._next_user += 1
        return f"user-{self._next_user % USERS}"

    async def new_session(self, service: RedisSessionService | None = None) -> Session:
        return await (service or self.service).create_session(
            app_name=APP,
            user_id=self.next_user(),
            state={"booking_step": "start", "user:name": "Ravi", "app:fare_currency": "EUR"},
        )

    async def fill(self, session: Session, count: int) -> None:
        """Append ``count`` events with the real ``append_event``."""
        invocation = str(uuid.uuid4())
        start = len(session.events)
        for turn in range(start, start + count):
            await self.service.append_event(session, make_event(turn, invocation))

    async def sessions_with(self, count: int, events: int) -> list[Session]:
        limit = asyncio.Semaphore(16)

        async def one() -> Session:
            async with limit:
                session = await self.new_session()
                await self.fill(session, events)
                return session

        return list(await asyncio.gather(*(one() for _ in range(count))))


def events_for(sessions: Sequence[Session], count: int) -> list[tuple[Session, Event]]:
    """``count`` (session, event) pairs, round-robin over ``sessions``."""
    invocation = str(uuid.uuid4())
    return [
        (s, make_event(len(s.events) + i // len(sessions), invocation))
        for i, s in ((i, sessions[i % len(sessions)]) for i in range(count))
    ]


# -- timed phases ----------------------------------------------------------------------------


async def time_calls(call: Callable[[], Awaitable[Any]], count: int, warmup: int) -> list[int]:
    for _ in range(warmup):
        await call()
    clock = time.perf_counter_ns
    samples: list[int] = []
    with settled_gc():
        for _ in range(count):
            start = clock()
            await call()
            samples.append(clock() - start)
    return samples


async def time_appends(
    service: RedisSessionService, pairs: list[tuple[Session, Event]]
) -> list[int]:
    samples: list[int] = []
    with settled_gc():
        await append_all(service, pairs, samples)
    return samples


@dataclass
class AppendCase:
    history: int
    sessions: int
    history_range: str
    stats: Stats


async def bench_raw(client: Redis, prefix: str, plan: Plan) -> dict[str, Stats]:
    trivial = await client.script_load(TRIVIAL_LUA)
    hset_xadd = await client.script_load(HSET_XADD_LUA)
    sample = make_event(1, "raw")
    payload = sample.__pydantic_serializer__.to_json(sample, exclude_none=True)
    keys = (f"{prefix}:raw:hash", f"{prefix}:raw:stream")
    counter = iter(range(10**9))

    async def call_trivial() -> Any:
        return await client.evalsha(trivial, 0)

    async def call_hset_xadd() -> Any:
        return await client.evalsha(hset_xadd, 2, *keys, f"f{next(counter) % 64}", b'"v"', payload)

    return {
        "return 1": summarize(await time_calls(call_trivial, plan.raw_calls, plan.warmup)),
        "HSET + XADD": summarize(await time_calls(call_hset_xadd, plan.raw_calls, plan.warmup)),
    }


async def bench_floor(work: Workload, client: Redis, prefix: str, plan: Plan) -> dict[str, Stats]:
    """The append floor, interleaved so that drift hits all alike: per round one raw
    EVALSHA of ``return 1``, one of a script doing HSET+XADD (both packed by redis-py, as
    any caller's), one append_event to a session holding 1 event, and one more with the
    script call packed by redis-py instead of hiredis (what ``_redis/prebuilt.py`` saves)."""
    trivial = await client.script_load(TRIVIAL_LUA)
    hset_xadd = await client.script_load(HSET_XADD_LUA)
    sample = make_event(1, "raw")
    payload = sample.__pydantic_serializer__.to_json(sample, exclude_none=True)
    keys = (f"{prefix}:floor:hash", f"{prefix}:floor:stream")
    sessions = await work.sessions_with(2 * plan.appends, 1)
    pairs = events_for(sessions, 2 * plan.appends)
    await work.fill(await work.new_session(), plan.warmup)
    clock = time.perf_counter_ns
    names = ("return 1", "HSET + XADD", "append_event", "append_event, redis-py packing")
    samples: dict[str, list[int]] = {name: [] for name in names}
    hiredis_pack = prebuilt._pack
    with settled_gc():
        for i in range(plan.appends):
            stamps = [clock()]
            await client.evalsha(trivial, 0)
            stamps.append(clock())
            await client.evalsha(hset_xadd, 2, *keys, f"f{i % 64}", b'"v"', payload)
            stamps.append(clock())
            await work.service.append_event(*pairs[2 * i])
            stamps.append(clock())
            prebuilt._pack = None
            try:
                await work.service.append_event(*pairs[2 * i + 1])
            finally:
                prebuilt._pack = hiredis_pack
            stamps.append(clock())
            for name, start, end in zip(names, stamps, stamps[1:], strict=False):
                samples[name].append(end - start)
    return {name: summarize(taken) for name, taken in samples.items()}


async def bench_appends(work: Workload, plan: Plan) -> list[AppendCase]:
    cases = []
    scratch = await work.new_session()
    for history in HISTORY_SIZES:
        # Enough sessions that each grows by at most 10 % while measured (history 1: one
        # append per session, so every measured append really meets exactly 1 event).
        count = max(1, math.ceil(plan.appends / max(1, history // 10)))
        progress(f"building {count} session(s) with {history} events each")
        sessions = await work.sessions_with(count, history)
        pairs = events_for(sessions, plan.appends)
        await work.fill(scratch, plan.warmup)  # warm-up, untimed
        stats = summarize(await time_appends(work.service, pairs))
        top = max(len(s.events) for s in sessions) - 1
        span = f"{history}" if top == history else f"{history}..{top}"
        cases.append(AppendCase(history, count, span, stats))
        progress(f"append at {history}: p50 {stats.p50_us:.1f} us")
    return cases


async def fetch(
    service: RedisSessionService, session: Session, config: GetSessionConfig | None = None
) -> Session | None:
    return await service.get_session(
        app_name=APP, user_id=session.user_id, session_id=session.id, config=config
    )


async def bench_get_session(work: Workload, plan: Plan) -> dict[str, Stats]:
    progress(f"building a session with {GET_SESSION_EVENTS} events for get_session")
    session = await work.new_session()
    await work.fill(session, GET_SESSION_EVENTS)
    recent = GetSessionConfig(num_recent_events=RECENT)
    full_copy = await fetch(work.service, session)
    recent_copy = await fetch(work.service, session, recent)
    if full_copy is None or len(full_copy.events) != GET_SESSION_EVENTS:
        raise RuntimeError("get_session did not return the 1000-event session")
    if recent_copy is None or len(recent_copy.events) != RECENT:
        raise RuntimeError(f"get_session did not return the last {RECENT} events")

    async def full() -> Any:
        return await fetch(work.service, session)

    async def last() -> Any:
        return await fetch(work.service, session, recent)

    warm = max(5, plan.warmup // 10)
    return {
        "full": summarize(await time_calls(full, plan.get_full_calls, warm)),
        f"last {RECENT}": summarize(await time_calls(last, plan.get_recent_calls, plan.warmup)),
    }


@dataclass
class ThroughputCase:
    mode: str
    tasks: int
    appends: int
    per_second: float
    p50_us: float
    p99_us: float


async def bench_throughput(
    work: Workload, merge: RedisSessionService, plan: Plan
) -> list[ThroughputCase]:
    cases = []
    for mode, service, task_counts in (
        ("own session per task (reject)", work.service, (1, 4, 16)),
        ("one shared session (merge)", merge, (4, 16)),
    ):
        for tasks in task_counts:
            per_task = plan.throughput_appends // tasks
            if service is merge:
                copies = await shared_copies(work, merge, tasks)
            else:
                copies = [await work.new_session() for _ in range(tasks)]
            batches = [events_for([c], per_task) for c in copies]
            await work.fill(await work.new_session(), plan.warmup)
            samples: list[int] = []
            with settled_gc():
                start = time.perf_counter_ns()
                await asyncio.gather(*(append_all(service, b, samples) for b in batches))
                elapsed = (time.perf_counter_ns() - start) / 1e9
            total = per_task * tasks
            stats = summarize(samples)
            rate = total / elapsed
            cases.append(ThroughputCase(mode, tasks, total, rate, stats.p50_us, stats.p99_us))
            progress(f"{mode}, {tasks} task(s): {rate:,.0f} appends/s")
    return cases


async def shared_copies(work: Workload, merge: RedisSessionService, count: int) -> list[Session]:
    """``count`` copies of one new session, one per task, like separate workers hold.

    Under the merge policy every append applies, each state key taking the last writer.
    """
    first = await work.new_session(merge)
    copies = []
    for _ in range(count):
        copy = await merge.get_session(app_name=APP, user_id=first.user_id, session_id=first.id)
        if copy is None:
            raise RuntimeError("the shared session vanished")
        copies.append(copy)
    return copies


async def append_all(
    service: RedisSessionService, pairs: list[tuple[Session, Event]], samples: list[int]
) -> None:
    clock = time.perf_counter_ns
    for session, event in pairs:
        start = clock()
        await service.append_event(session, event)
        samples.append(clock() - start)


# -- profile (separate phase) ----------------------------------------------------------------


class Timers:
    """Accumulating wall-clock timers around sync and async callables."""

    def __init__(self) -> None:
        self.ns: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)
        self.last_end: dict[str, int] = {}

    def sync(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self.ns[name] += time.perf_counter_ns() - start
                self.calls[name] += 1

        return timed

    def coro(self, name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return await fn(*args, **kwargs)
            finally:
                end = time.perf_counter_ns()
                self.ns[name] += end - start
                self.calls[name] += 1
                self.last_end[name] = end

        return timed

    def instrument(
        self, target: object, attr: str, name: str, *, is_async: bool = False
    ) -> AbstractContextManager[None]:
        """Time every call of ``target.attr`` under ``name`` while the context is open."""
        original = getattr(target, attr)
        wrapper = self.coro(name, original) if is_async else self.sync(name, original)
        return patched(target, attr, wrapper)

    def mean_us(self, name: str, per: int) -> float:
        return self.ns[name] / per / 1e3


@contextmanager
def patched(target: object, name: str, value: Any) -> Iterator[None]:
    """Temporarily replace an attribute (only in this process, only for the profile)."""
    had_own = name in getattr(target, "__dict__", {})
    old = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        if had_own:
            setattr(target, name, old)
        else:
            delattr(target, name)


def timer_overhead_us() -> float:
    """What one timed wrapper adds to a call, to read the breakdown with."""
    timers = Timers()
    bare = len
    wrapped = timers.sync("x", len)
    rounds = 200_000
    start = time.perf_counter_ns()
    for _ in range(rounds):
        bare("")
    mid = time.perf_counter_ns()
    for _ in range(rounds):
        wrapped("")
    end = time.perf_counter_ns()
    return max(0.0, ((end - mid) - (mid - start)) / rounds / 1e3)


async def command_stats(client: Redis) -> dict[str, tuple[int, int]]:
    info = await client.info("commandstats")
    return {
        key.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for key, v in info.items()
        if isinstance(v, dict)
    }


def stats_delta(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    out = {}
    for cmd, (calls, usec) in after.items():
        calls0, usec0 = before.get(cmd, (0, 0))
        if calls > calls0:
            out[cmd] = (calls - calls0, usec - usec0)
    return out


def without_acl_checks(source: str) -> str:
    """The script with its ACL questions (lua/_permitted.lua) answered "allowed" unasked."""
    asked = "if not redis.acl_check_cmd then return nil end"
    assert asked in source
    return source.replace(asked, "if true then return nil end")


async def raw_append_script(
    work: Workload, client: Redis, plan: Plan, *, acl_checks: bool = True
) -> Stats:
    """append_event.lua itself, by raw EVALSHA with prebuilt arguments (layout: the .lua);
    without ``acl_checks``, with its ACL questions skipped (what they cost)."""
    source = lua_source("append_event")
    sha = await client.script_load(source if acl_checks else without_acl_checks(source))
    session = await work.new_session()
    k = work.service._engine.keys.session(APP, session.user_id, session.id)
    keys = [k.meta, k.state, k.events, k.event_ids, k.user_state, k.app_state]
    keys += [k.user_updated, k.compactions, k.app_updated]
    calls: list[list[bytes | str | int]] = []
    for _, event in events_for([session], plan.profile_appends + plan.warmup):
        raw = event.__pydantic_serializer__.to_json(event, exclude_none=True)
        ts = event.timestamp
        delta = event.actions.state_delta
        own = [(f, orjson.dumps(v)) for f, v in delta.items() if ":" not in f]
        user = [(f.removeprefix("user:"), orjson.dumps(v)) for f, v in delta.items() if ":" in f]
        args: list[bytes | str | int] = [*keys, "", "", "merge", event.id, raw]
        args += [int(ts * 1000), repr(ts), 0, "", session.id, k.app_member, "", "", 0, ""]
        args += [len(own), len(user), 0]
        calls.append(args + [part for pair in own + user for part in pair])
    pending = iter(calls)

    async def call() -> Any:
        return await client.evalsha(sha, len(keys), *next(pending))

    return summarize(await time_calls(call, plan.profile_appends, plan.warmup))


async def profile_append(work: Workload, client: Redis, plan: Plan) -> dict[str, Any]:
    service = work.service
    engine = service._engine
    sessions = await work.sessions_with(10, 100)
    pairs = events_for(sessions, plan.profile_appends)
    await work.fill(await work.new_session(), plan.warmup)
    timers = Timers()
    probes = [
        (engine_module, "split_state_delta", "split", False),
        (engine_module, "encode_fields", "fields", False),
        (engine._codec, "encode_event", "encode", False),
        (KeySpace, "session", "keys", False),
        (engine, "_run", "run", True),
        # The script call: packing, redis-py, socket, server.
        (scripts_module, "call", "script", True),
    ]
    with ExitStack() as stack:
        for target, attr, label, is_async in probes:
            stack.enter_context(timers.instrument(target, attr, label, is_async=is_async))
        before = await command_stats(client)
        samples: list[int] = []
        after_reply = 0  # from the script's reply back in _run to append_event returning
        with settled_gc():
            for session, event in pairs:
                start = time.perf_counter_ns()
                await service.append_event(session, event)
                end = time.perf_counter_ns()
                samples.append(end - start)
                after_reply += end - timers.last_end["run"]
        after = await command_stats(client)
    n = len(samples)
    total = summarize(samples)
    server = stats_delta(before, after)
    evalsha_calls, evalsha_usec = server.get("evalsha", (n, 0))
    script_us = timers.mean_us("script", n)
    server_us = evalsha_usec / max(1, evalsha_calls)
    parts = {
        "pydantic encode_event (Event -> JSON)": timers.mean_us("encode", n),
        "encode_fields (state values: check + orjson)": timers.mean_us("fields", n),
        "split_state_delta": timers.mean_us("split", n),
        "KeySpace.session (building the key names)": timers.mean_us("keys", n),
        "_run: argument flattening": timers.mean_us("run", n) - script_us,
        "script call: packing, redis-py, event loop, socket": script_us - server_us,
        "script call: server-side Lua (INFO commandstats)": server_us,
        "after the reply: status check, session/state/events update": after_reply / n / 1e3,
    }
    rest = total.mean_us - sum(parts.values())
    parts["rest before the call: checks, temp filter, argument list"] = rest
    inner = {
        cmd: (calls / n, usec / n)
        for cmd, (calls, usec) in sorted(server.items(), key=lambda kv: -kv[1][1])
        if cmd not in ("evalsha", "info")
    }
    return {
        "appends": n,
        "history": f"100..{100 + n // len(sessions)} ({len(sessions)} sessions)",
        "mean_us": total.mean_us,
        "p50_us": total.p50_us,
        "parts_us": parts,
        "timer_overhead_us_per_wrapper": timer_overhead_us(),
        "server_inner_commands_per_append": {
            cmd: {"calls": c, "usec": u} for cmd, (c, u) in inner.items()
        },
        "raw_evalsha_append_lua": asdict(await raw_append_script(work, client, plan)),
        "append_without_script": asdict(await append_without_script(work, plan)),
        "append_without_script_idle": asdict(await append_without_script(work, plan, 0.0002)),
        "acl_checks_server_us": await acl_check_cost(work, client, plan),
    }


async def acl_check_cost(work: Workload, client: Redis, plan: Plan) -> dict[str, float]:
    """Server time per append_event.lua run (INFO commandstats), with and without its ACL
    questions, in alternating rounds so that drift hits both alike."""
    usec = {True: 0, False: 0}
    calls = {True: 0, False: 0}
    for _ in range(3):
        for checks in (True, False):
            before = await command_stats(client)
            await raw_append_script(work, client, plan, acl_checks=checks)
            c, u = stats_delta(before, await command_stats(client)).get("evalsha", (0, 0))
            calls[checks] += c
            usec[checks] += u
    return {
        "with_checks": usec[True] / calls[True],
        "without_checks": usec[False] / calls[False],
    }


async def append_without_script(work: Workload, plan: Plan, idle_s: float = 0.0) -> Stats:
    """append_event with the script call answered at once: the library's own Python cost.
    With ``idle_s``, each append follows that long an idle wait, as a real one follows its
    round trip (the same code then runs on cold caches)."""

    async def instant(script: Any, keys: Any, args: Any) -> list[Any]:
        return [1, 1, b"0-1"]

    sessions = [await work.new_session() for _ in range(10)]
    pairs = events_for(sessions, plan.profile_appends)
    samples: list[int] = []
    clock = time.perf_counter_ns
    with patched(scripts_module, "call", instant), settled_gc():
        for session, event in pairs:
            if idle_s:
                await asyncio.sleep(idle_s)
            start = clock()
            await work.service.append_event(session, event)
            samples.append(clock() - start)
    return summarize(samples)


async def profile_get_session(work: Workload, plan: Plan) -> dict[str, Any]:
    engine = work.service._engine
    session = await work.new_session()
    await work.fill(session, GET_SESSION_EVENTS)
    rounds = max(20, plan.get_full_calls // 2)
    timers = Timers()
    with (
        timers.instrument(engine._codec, "decode_events", "decode"),
        timers.instrument(engine._codec, "build_session", "build"),
    ):
        samples = await time_calls(lambda: fetch(work.service, session), rounds, 3)
    total = summarize(samples)
    parts = {
        "decode_events (pydantic validate_json, 1000 events)": timers.mean_us("decode", rounds),
        "build_session (Session model)": timers.mean_us("build", rounds),
    }
    parts["MULTI/EXEC round trip + redis-py reply parsing + rest"] = total.mean_us - sum(
        parts.values()
    )
    return {"rounds": rounds, "mean_us": total.mean_us, "parts_us": parts}


async def cprofile_append(work: Workload, plan: Plan, top: int = 18) -> str:
    sessions = await work.sessions_with(10, 10)
    pairs = events_for(sessions, plan.profile_appends)
    profiler = cProfile.Profile()
    profiler.enable()
    for session, event in pairs:
        await work.service.append_event(session, event)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("tottime")
    stats.print_stats(top)
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    header = (
        f"cProfile of {len(pairs)} append_event calls, top {top} by own time "
        "(ncalls of coroutines count resumptions):"
    )
    return "\n".join([header, *lines[start:]]).rstrip()


# -- run & report ----------------------------------------------------------------------------


async def run(url: str, owned: bool, plan: Plan) -> dict[str, Any]:
    # Next to this file; imported here, as they import this module in turn.
    import bench_contention
    import bench_reads

    client = Redis.from_url(url, decode_responses=False)
    prefix = f"ras-bench-{uuid.uuid4().hex[:8]}"
    try:
        info = await client.info("server")
        service = RedisSessionService(client, config=SessionServiceConfig(key_prefix=prefix))
        merge = RedisSessionService(
            client, config=SessionServiceConfig(key_prefix=prefix, stale_policy="merge")
        )
        work = Workload(service)
        progress("warming up")
        await work.fill(await work.new_session(), plan.warmup)
        progress("raw EVALSHA round trips")
        raw = await bench_raw(client, prefix, plan)
        progress("append floor, interleaved with raw EVALSHA")
        floor = await bench_floor(work, client, prefix, plan)
        appends = await bench_appends(work, plan)
        gets = await bench_get_session(work, plan)
        throughput = await bench_throughput(work, merge, plan)
        progress("profile phase")
        profile = await profile_append(work, client, plan)
        profile["get_session"] = await profile_get_session(work, plan)
        profile["cprofile"] = await cprofile_append(work, plan)
        progress("reads: cold, warm (read cache), ADK parse floor, copy costs")
        reads = await bench_reads.bench_reads(client, prefix, plan.name == "quick")
        progress("same-session contention (scripts/bench_contention.py)")
        quick = plan.name == "quick"
        contention = await bench_contention.bench(
            url, 1.0 if quick else 2.0, 200 if quick else 1000, 1 if quick else 3
        )
    finally:
        if not owned:
            await delete_prefix(client, prefix)
        await client.aclose()
    by_history = {c.history: c.stats for c in appends}
    ratios = [
        ratio_row(
            "append p50 (history 1) / raw EVALSHA HSET+XADD p50, interleaved",
            floor["append_event"].p50_us / floor["HSET + XADD"].p50_us,
            TARGET_APPEND_VS_RAW,
        ),
        ratio_row(
            "append p50 (history 1) / raw EVALSHA `return 1` p50, interleaved",
            floor["append_event"].p50_us / floor["return 1"].p50_us,
            None,
        ),
        ratio_row(
            "the same append with redis-py packing the script call / raw HSET+XADD p50",
            floor["append_event, redis-py packing"].p50_us / floor["HSET + XADD"].p50_us,
            None,
        ),
        ratio_row(
            "append p50 at 10,000 events / p50 at 1 event",
            by_history[10_000].p50_us / by_history[1].p50_us,
            TARGET_10K_VS_1,
        ),
        ratio_row(
            f"get_session({GET_SESSION_EVENTS} events, full) p50, ms",
            gets["full"].p50_us / 1e3,
            TARGET_GET_MS,
        ),
    ]
    for family in ("core", "adk"):
        r = reads["cache"][family]
        ratios.append(
            ratio_row(
                f"{family}: warm get_session({r['events']:,} events, read cache) / cold, p50",
                r["ratio"],
                bench_reads.TARGET_WARM_VS_COLD,
            )
        )
    adk = reads["adk_vs_parse"]
    ratios.append(
        ratio_row(
            f"ADK get_session({adk['events']} events) / Event.model_validate of them "
            "(kept in a list), p50",
            adk["ratio"],
            bench_reads.TARGET_ADK_VS_PARSE,
        )
    )
    for writers, by_mode in contention["ratios"].items():
        runs = [r for r in contention["runs"] if r["writers"] == int(writers)]
        gave_up = sum(r["gave_up"] for r in runs if r["mode"] == "refresh")
        ratios.append(
            ratio_row(
                f"{writers} writers, one session, refresh+retry / distinct sessions, appends/s, "
                f"median of rounds ({gave_up} gave up after {bench_contention.MAX_TRIES} tries; "
                f"one writer alone: {by_mode['alone'][0]:.0%}, the ceiling)",
                by_mode["refresh"][0],
                bench_contention.TARGET_SHARE,
                at_least=True,
                ok=gave_up == 0,
            )
        )
    return {
        "environment": {
            "python": platform.python_version(),
            "redis_py": redis.__version__,
            "parser": DefaultParser.__name__,
            "redis_server": info.get("redis_version"),
            "url": url,
            "own_server": owned,
            "event_loop": type(asyncio.get_running_loop()).__name__,
            "cpus": os.cpu_count(),
            "plan": asdict(plan),
        },
        "raw_evalsha": {k: asdict(v) for k, v in raw.items()},
        "append_floor": {k: asdict(v) for k, v in floor.items()},
        "append_event": [asdict(c) for c in appends],
        "get_session_1000": {k: asdict(v) for k, v in gets.items()},
        "throughput": [asdict(c) for c in throughput],
        "ratios": ratios,
        "profile": profile,
        "reads": reads,
        "contention": contention,
    }


def ratio_row(
    name: str, value: float, target: float | None, *, at_least: bool = False, ok: bool = True
) -> dict[str, Any]:
    """A ratio and its verdict: at most ``target`` (or ``at_least`` it), and ``ok``."""
    met = target is not None and ok and (value >= target if at_least else value <= target)
    verdict = None if target is None else ("PASS" if met else "FAIL")
    return {"name": name, "value": value, "target": target, "verdict": verdict, "min": at_least}


async def delete_prefix(client: Redis, prefix: str) -> None:
    batch: list[bytes] = []
    async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            await client.unlink(*batch)
            batch = []
    if batch:
        await client.unlink(*batch)


@dataclass
class Table:
    header: tuple[str, ...]
    rows: list[tuple[str, ...]] = field(default_factory=list)

    def render(self) -> str:
        cells = [self.header, *self.rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(self.header))]

        def line(row: tuple[str, ...]) -> str:
            first = row[0].ljust(widths[0])
            rest = (c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))
            return "  ".join([first, *rest]).rstrip()

        return "\n".join([line(self.header), *(line(r) for r in self.rows)])

    def add(self, *cells: str) -> None:
        self.rows.append(cells)


def us(value: float) -> str:
    return f"{value:,.1f}"


def latency_cells(label: str, s: dict[str, Any]) -> tuple[str, ...]:
    return (label, str(s["n"]), us(s["p50_us"]), us(s["p99_us"]), us(s["mean_us"]))


def share_table(title: str, parts: dict[str, float], total: float) -> Table:
    table = Table((title, "us", "share"))
    for name, value in parts.items():
        table.add(name, us(value), f"{value / total:.0%}")
    return table


def report(result: dict[str, Any]) -> str:
    import bench_reads

    env = result["environment"]
    where = "own throwaway server" if env["own_server"] else "given --url"
    out = [
        f"redis-agent-sessions benchmark ({env['plan']['name']} run)",
        f"python {env['python']}, redis-py {env['redis_py']} ({env['parser']}), "
        f"redis-server {env['redis_server']} at {env['url']} ({where}), "
        f"{env['event_loop']}, {env['cpus']} CPUs",
        "gc: collected + frozen before each timed phase, enabled while timing",
        "",
    ]

    latency = Table(("latency (one client, sequential)", "n", "p50 us", "p99 us", "mean us"))
    for name, s in result["raw_evalsha"].items():
        latency.add(*latency_cells(f"raw EVALSHA {name}", s))
    for name, s in result["append_floor"].items():
        what = name.replace("append_event", "append_event, history 1")
        what = what if what.startswith("append") else f"raw EVALSHA {name}"
        latency.add(*latency_cells(f"{what} (interleaved)", s))
    for c in result["append_event"]:
        plural = "s" if c["sessions"] > 1 else ""
        label = f"append_event, history {c['history_range']} ({c['sessions']} session{plural})"
        latency.add(*latency_cells(label, c["stats"]))
    for name, s in result["get_session_1000"].items():
        latency.add(*latency_cells(f"get_session {GET_SESSION_EVENTS} events, {name}", s))

    header = ("throughput (concurrent asyncio tasks)", "tasks", "appends", "appends/s")
    throughput = Table((*header, "p50 us", "p99 us"))
    for c in result["throughput"]:
        counts = (c["mode"], str(c["tasks"]), str(c["appends"]), f"{c['per_second']:,.0f}")
        throughput.add(*counts, us(c["p50_us"]), us(c["p99_us"]))

    ratios = Table(("ratios from this run", "value", "target", "verdict"))
    for r in result["ratios"]:
        target = "-" if r["target"] is None else f"{'>=' if r['min'] else '<='} {r['target']}"
        ratios.add(r["name"], f"{r['value']:.2f}", target, r["verdict"] or "info")
    out += [latency.render(), "", throughput.render(), "", ratios.render(), ""]

    prof = result["profile"]
    title = f"where append_event time goes (mean of {prof['appends']}, history {prof['history']})"
    breakdown = share_table(title, prof["parts_us"], prof["mean_us"])
    breakdown.add("total append_event (timed, with wrappers)", us(prof["mean_us"]), "")
    for label, key in (
        ("reference: raw EVALSHA of append_event.lua, same client", "raw_evalsha_append_lua"),
        ("reference: append_event, script call stubbed (Python only)", "append_without_script"),
        ("  the same, each append after a 200 us idle wait", "append_without_script_idle"),
    ):
        ref = prof[key]
        breakdown.add(label, us(ref["mean_us"]), f"p50 {us(ref['p50_us'])}")
    overhead = prof["timer_overhead_us_per_wrapper"]
    acl = prof["acl_checks_server_us"]
    out += [
        breakdown.render(),
        f"(each timed wrapper adds ~{overhead:.2f} us; 6 wrappers per append)",
        f"server time per append_event.lua run: {acl['with_checks']:.1f} us with its ACL "
        f"checks, {acl['without_checks']:.1f} us without (ratio "
        f"{acl['with_checks'] / acl['without_checks']:.2f}; raw EVALSHA, alternating rounds)",
        "",
    ]

    inner = Table(("server: commands inside append_event.lua", "calls/append", "us/append"))
    for cmd, v in prof["server_inner_commands_per_append"].items():
        inner.add(cmd, f"{v['calls']:.1f}", f"{v['usec']:.2f}")

    gp = prof["get_session"]
    title = f"where get_session({GET_SESSION_EVENTS}) time goes (mean of {gp['rounds']})"
    gets = share_table(title, gp["parts_us"], gp["mean_us"])
    gets.add("total get_session", us(gp["mean_us"]), "")
    out += [inner.render(), "", gets.render(), "", bench_reads.report(result["reads"]), ""]
    out += [prof["cprofile"]]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", help="use this Redis instead of starting a throwaway one")
    parser.add_argument("--quick", action="store_true", help="small smoke run (< 20 s)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = run_on_server(run, args.url, QUICK if args.quick else FULL)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(report(result))
        print(f"\nwall time {result['environment']['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
