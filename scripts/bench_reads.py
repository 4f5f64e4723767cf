"""Read benchmarks (not tests), run by ``scripts/bench.py``: the verified read cache against
cold reads of a 10,000-event session (core and ADK models), what copying cached events would
cost instead of sharing them, the Python memory of decoded events per byte of their JSON,
and ADK full reads against ADK's own parsing of the same events.

Run alone: ``.venv/bin/python scripts/bench_reads.py [--quick]`` (own throwaway server).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import inspect
import json
import statistics
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from google.adk.events import Event as AdkEvent
from pydantic import TypeAdapter
from redis.asyncio import Redis

# Next to this file (on sys.path when run as a script).
from bench import make_event, throwaway_redis
from bench_adk import make_event as make_adk_event
from redis_agent_sessions import RedisSessionService, SessionServiceConfig
from redis_agent_sessions.adk import RedisSessionService as AdkService

APP, USER = "bench_reads", "reader"
BIG = 10_000
TARGET_WARM_VS_COLD = 0.10
TARGET_ADK_VS_PARSE = 1.2
CACHE = 1 << 30


async def _median_ms(call: Callable[[], Awaitable[Any]], rounds: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        await call()
    gc.collect()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def _sync_median_ms(call: Callable[[], Any], rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


async def _fill(service: Any, make: Callable[[int], Any], n: int) -> Any:
    session = await service.create_session(app_name=APP, user_id=USER, session_id=str(uuid.uuid4()))
    for i in range(n):
        await service.append_event(session, make(i))
    return session


async def warm_vs_cold(
    client: Redis, prefix: str, family: str, events: int, rounds: int
) -> dict[str, float]:
    """p50 of a full get_session of an ``events``-long session: cold (no cache) and warm (the
    cache holds all but the newest event, which another worker appended: the read fetches
    and parses one event)."""
    config = SessionServiceConfig(key_prefix=prefix)
    cached_config = config.model_copy(update={"read_cache_bytes": CACHE})
    if family == "adk":
        cold: Any = AdkService(client, config=config)
        warm: Any = AdkService(client, config=cached_config)
        make: Callable[[int], Any] = make_adk_event
    else:
        cold = RedisSessionService(client, config=config)
        warm = RedisSessionService(client, config=cached_config)
        invocation = str(uuid.uuid4())

        def make(i: int) -> Any:
            return make_event(i, invocation)

    session = await _fill(cold, make, events)
    ids = {"app_name": APP, "user_id": USER, "session_id": session.id}
    turn = [events]

    async def warm_read() -> None:
        # A new event each time, as in a conversation another worker goes on with.
        await cold.append_event(session, make(turn[0]))
        turn[0] += 1
        started = time.perf_counter()
        got = await warm.get_session(**ids)
        warm_times.append(time.perf_counter() - started)
        assert got is not None
        assert len(got.events) == turn[0]

    async def cold_read() -> None:
        got = await cold.get_session(**ids)
        assert got is not None

    warm_times: list[float] = []
    await warm.get_session(**ids)  # fills the cache
    for _ in range(rounds * 4):
        await warm_read()
    cold_ms = await _median_ms(cold_read, rounds)
    warm_ms = statistics.median(warm_times) * 1000
    return {"events": events, "cold_ms": cold_ms, "warm_ms": warm_ms, "ratio": warm_ms / cold_ms}


def copy_costs(events: Sequence[Any], rounds: int) -> dict[str, float]:
    """ms to give a caller ``events`` it may change without touching the originals, by each
    way of copying (the cache shares them instead: the new list only)."""
    cls = type(events[0])
    dicts = [e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in events]
    return {
        "share (new list, shared events)": _sync_median_ms(lambda: list(events), rounds),
        "model_copy() each (shallow)": _sync_median_ms(
            lambda: [e.model_copy() for e in events], rounds
        ),
        "copy.deepcopy": _sync_median_ms(lambda: copy.deepcopy(list(events)), max(1, rounds // 3)),
        "model_validate from cached dicts": _sync_median_ms(
            lambda: [cls.model_validate(d) for d in dicts], max(1, rounds // 3)
        ),
    }


def memory_per_json_byte(events: Sequence[Any]) -> float:
    """Python memory of ``events`` decoded from their stored JSON, per byte of that JSON."""
    cls = type(events[0])
    raws = [e.__pydantic_serializer__.to_json(e, exclude_none=True) for e in events]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    decoded = [cls.model_validate(orjson.loads(r)) for r in raws]
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    used = sum(s.size_diff for s in after.compare_to(before, "filename"))
    del decoded
    return used / sum(map(len, raws))


async def adk_vs_parse(client: Redis, prefix: str, events: int, rounds: int) -> dict[str, float]:
    """ADK get_session (no cache) of ``events`` events against ``Event.model_validate`` of
    the same stored events (dicts), interleaved so that drift hits both alike.

    The floor keeps the events it builds in a list, as a read must; ``parse_dropped_ms``
    is the same loop dropping each event at once (reusing freed memory: cheaper), which
    is how this was measured before 2026-11-23."""
    adk = AdkService(client, config=SessionServiceConfig(key_prefix=prefix))
    session = await _fill(adk, make_adk_event, events)
    keys = adk._engine.keys.session(APP, USER, session.id)
    entries: Any = await client.xrange(keys.events)
    dicts = [orjson.loads(fields[b"event"]) for _, fields in entries]
    ids = {"app_name": APP, "user_id": USER, "session_id": session.id}

    def dropped() -> None:
        for d in dicts:
            AdkEvent.model_validate(d)

    ms = await _interleaved_ms(
        {
            "read": lambda: adk.get_session(**ids),
            "parse": lambda: [AdkEvent.model_validate(d) for d in dicts],
            "dropped": dropped,
        },
        rounds,
    )
    return {
        "events": events,
        "read_ms": ms["read"],
        "parse_ms": ms["parse"],
        "parse_dropped_ms": ms["dropped"],
        "ratio": ms["read"] / ms["parse"],
    }


async def decode_per_event_vs_batch(events: Sequence[Any], rounds: int) -> dict[str, float]:
    """p50 of decoding the stored JSON of ``events`` as the engine does (one pydantic
    ``validate_json`` per event) against one call for the whole batch as a JSON array (how
    it decoded before 2026-11-23), interleaved rounds; the events are kept, as a read does."""
    cls = type(events[0])
    raws = [e.__pydantic_serializer__.to_json(e, exclude_none=True) for e in events]
    per_event = cls.__pydantic_validator__.validate_json
    batch = TypeAdapter(list[cls]).validate_json  # type: ignore[valid-type]
    joined = b"[" + b",".join(raws) + b"]"
    ms = await _interleaved_ms(
        {"one": lambda: [per_event(r) for r in raws], "all": lambda: batch(joined)}, rounds
    )
    return {"per_event_ms": ms["one"], "batch_ms": ms["all"], "ratio": ms["one"] / ms["all"]}


async def _interleaved_ms(calls: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """p50 ms of each call (sync, or returning an awaitable), run in turn in every round so
    that drift hits all alike; the first 2 rounds warm up. The garbage collector runs
    before each call, and what a call returns is kept until it is timed, as a caller
    keeps a read."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(rounds + 2):
        for name, call in calls.items():
            gc.collect()
            start = time.perf_counter()
            result = call()
            if inspect.isawaitable(result):
                result = await result
            elapsed = time.perf_counter() - start
            del result
            if i >= 2:
                samples[name].append(elapsed)
    return {name: statistics.median(taken) * 1000 for name, taken in samples.items()}


async def bench_reads(client: Redis, prefix: str, quick: bool) -> dict[str, Any]:
    events = 1000 if quick else BIG
    rounds = 3 if quick else 7
    result: dict[str, Any] = {
        "cache": {
            family: await warm_vs_cold(client, f"{prefix}-{family}", family, events, rounds)
            for family in ("core", "adk")
        },
        "adk_vs_parse": await adk_vs_parse(client, f"{prefix}-parse", 1000, rounds * 3),
    }
    invocation = str(uuid.uuid4())
    core_events = [make_event(i, invocation) for i in range(events)]
    adk_events = [make_adk_event(i) for i in range(events)]
    result["copy_ms"] = {
        "core": copy_costs(core_events, rounds),
        "adk": copy_costs(adk_events, rounds),
    }
    result["decode_1000"] = {
        "core": await decode_per_event_vs_batch(core_events[:1000], rounds * 5),
        "adk": await decode_per_event_vs_batch(adk_events[:1000], rounds * 3),
    }
    result["memory_per_json_byte"] = {
        "core": memory_per_json_byte(core_events[:2000]),
        "adk": memory_per_json_byte(adk_events[:2000]),
    }
    return result


def report(result: dict[str, Any]) -> str:
    lines = []
    for family, r in result["cache"].items():
        lines.append(
            f"get_session of {r['events']:,} {family} events: cold {r['cold_ms']:.2f} ms, "
            f"warm (cache, 1 new event) {r['warm_ms']:.3f} ms = {r['ratio']:.1%} of cold"
        )
    a = result["adk_vs_parse"]
    lines.append(
        f"ADK get_session of {a['events']} events {a['read_ms']:.2f} ms / Event.model_validate "
        f"{a['parse_ms']:.2f} ms (events kept) = {a['ratio']:.2f}x; with each event dropped "
        f"at once {a['parse_dropped_ms']:.2f} ms = {a['read_ms'] / a['parse_dropped_ms']:.2f}x"
    )
    for family, d in result["decode_1000"].items():
        lines.append(
            f"decoding 1,000 {family} events, one pydantic call each {d['per_event_ms']:.2f} ms / "
            f"one call for the batch {d['batch_ms']:.2f} ms = {d['ratio']:.2f}x"
        )
    for family, costs in result["copy_ms"].items():
        listed = ", ".join(f"{name} {ms:.2f}" for name, ms in costs.items())
        lines.append(f"copying {family} events for a caller, ms: {listed}")
    mem = result["memory_per_json_byte"]
    lines.append(
        "Python memory of decoded events per byte of stored JSON: "
        + ", ".join(f"{k} {v:.1f}" for k, v in mem.items())
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    async def run(url: str) -> dict[str, Any]:
        client = Redis.from_url(url)
        try:
            return await bench_reads(client, f"ras-reads-{uuid.uuid4().hex[:8]}", args.quick)
        finally:
            await client.aclose()

    with throwaway_redis() as url:
        result = asyncio.run(run(url))
    print(json.dumps(result, indent=2) if args.json else report(result))


if __name__ == "__main__":
    main()
