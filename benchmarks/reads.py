"""Read benchmark (not a test): the verified read cache against cold reads of a long session
(core and ADK models), and the Python memory of decoded events per byte of their JSON.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.reads            # 10,000-event sessions, ~1 minute
    .venv/bin/python -m benchmarks.reads --quick    # 1,000-event sessions
    .venv/bin/python -m benchmarks.reads --json out.json

Cold: ``get_session`` of the whole session without the cache. Warm: the same read through a
service with ``read_cache_bytes`` set, after another service appended one event (as in a
conversation another worker goes on with): the read fetches and parses that one event.
Interleaved rounds (4 warm reads, then 1 cold read, per round); the ratio is taken within
each round, then the median of the rounds. What copying cached events would cost instead
of sharing them, and decoding per event vs per batch, are pure CPU: ``benchmarks.cpu``.
ADK reads against ADK's own parsing: ``benchmarks.adk``.
"""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from redis.asyncio import Redis

from benchmarks.harness import report, servers, timing
from benchmarks.harness.workloads import make_adk_event, make_event, seed_session
from redis_agent_sessions import RedisSessionService, SessionServiceConfig
from redis_agent_sessions.adk import RedisSessionService as AdkService

APP, USER = "bench_reads", "reader"
BIG = 10_000
TARGET_WARM_VS_COLD = 0.10
CACHE = 1 << 30
WARM_PER_ROUND = 4

progress = report.Progress("reads")


async def warm_vs_cold(
    client: Redis, prefix: str, family: str, events: int, rounds: int
) -> dict[str, float]:
    """p50 of a full get_session of an ``events``-long session: cold (no cache) and warm (the
    cache holds all but the newest event, which another worker appended)."""
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

    progress(f"{family}: seeding a session with {events:,} events")
    session = await seed_session(cold, APP, USER, events, make, session_id=str(uuid.uuid4()))
    ids = {"app_name": APP, "user_id": USER, "session_id": session.id}
    turn = [events]
    samples = timing.Rounds()

    async def warm_read(round_no: int) -> None:
        # A new event each time, untimed, as in a conversation another worker goes on with.
        await cold.append_event(session, make(turn[0]))
        turn[0] += 1
        started = time.perf_counter_ns()
        got = await warm.get_session(**ids)
        samples.add("warm", round_no, [time.perf_counter_ns() - started])
        assert got is not None
        assert len(got.events) == turn[0]

    async def cold_read(round_no: int) -> None:
        started = time.perf_counter_ns()
        got = await cold.get_session(**ids)
        samples.add("cold", round_no, [time.perf_counter_ns() - started])
        assert got is not None

    await warm.get_session(**ids)  # fills the cache
    await cold.get_session(**ids)  # warm-up
    progress(f"{family}: {rounds} rounds of {WARM_PER_ROUND} warm reads and 1 cold read")
    for round_no in range(rounds):
        with timing.settled_gc():
            for _ in range(WARM_PER_ROUND):
                await warm_read(round_no)
        with timing.settled_gc():
            await cold_read(round_no)
    cold_ms = samples.p50_ms("cold")
    warm_ms = samples.p50_ms("warm")
    return {
        "events": events,
        "cold_ms": cold_ms,
        "warm_ms": warm_ms,
        "ratio": samples.ratio("warm", "cold"),
        "ratio_range": [min(samples.ratios("warm", "cold")), max(samples.ratios("warm", "cold"))],
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


async def run(url: str, quick: bool) -> dict[str, Any]:
    events = 1000 if quick else BIG
    rounds = 3 if quick else 7
    client = Redis.from_url(url)
    prefix = f"ras-reads-{uuid.uuid4().hex[:8]}"
    try:
        env = await report.server_environment(client, quick=quick, url=url)
        cache = {
            family: await warm_vs_cold(client, f"{prefix}-{family}", family, events, rounds)
            for family in ("core", "adk")
        }
    finally:
        await client.aclose()
    invocation = str(uuid.uuid4())
    memory = {
        "core": memory_per_json_byte([make_event(i, invocation) for i in range(2000)]),
        "adk": memory_per_json_byte([make_adk_event(i) for i in range(2000)]),
    }
    ratios = [
        report.ratio_row(
            f"{family}: warm get_session({r['events']:,} events, read cache) / cold, p50, "
            f"median of {rounds} rounds",
            r["ratio"],
            TARGET_WARM_VS_COLD,
            fmt="{:.1%}",
        )
        for family, r in cache.items()
    ]
    return {
        "environment": env,
        "rounds": rounds,
        "cache": cache,
        "memory_per_json_byte": memory,
        "ratios": ratios,
    }


def render(result: dict[str, Any]) -> str:
    env = result["environment"]
    run_name = "quick" if env["quick"] else "full"
    lines = [
        *report.environment_lines(f"redis-agent-sessions read benchmark ({run_name} run)", env),
        "",
    ]
    for family, r in result["cache"].items():
        low, high = r["ratio_range"]
        lines.append(
            f"get_session of {r['events']:,} {family} events: cold {r['cold_ms']:.2f} ms, "
            f"warm (cache, 1 new event) {r['warm_ms']:.3f} ms = {r['ratio']:.1%} of cold "
            f"(per round {low:.1%}-{high:.1%})"
        )
    mem = result["memory_per_json_byte"]
    lines += [
        "Python memory of decoded events per byte of stored JSON: "
        + ", ".join(f"{k} {v:.1f}" for k, v in mem.items()),
        "",
        report.ratio_table(result["ratios"]),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = report.parser(__doc__)
    report.add_flags(parser, quick="1,000-event sessions instead of 10,000")
    args = parser.parse_args(argv)
    with servers.redis7() as node:
        result = asyncio.run(run(node.url, args.quick))
    report.emit(result, render, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
