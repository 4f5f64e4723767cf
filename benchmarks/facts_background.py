"""Background generation (issue 54): what recording a job costs an agent's turn, against an
append, and how jobs' throughput grows with worker processes, in one run.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.facts_background             # ~2 minutes
    .venv/bin/python -m benchmarks.facts_background --quick     # smoke run
    .venv/bin/python -m benchmarks.facts_background --json out.json
    .venv/bin/python -m benchmarks.facts_background --url redis://127.0.0.1:6379/0

It starts a Redis 7 of its own (or uses ``--url``, removing its keys after).

**Enqueue against append.** On one client, in interleaved rounds (``timing.interleave``,
calls in turn, the order rotated each round): ``append_event`` of a text event to a session
of 20 events; ``add_session_to_memory`` in background mode of a session of 20 events not
queued yet (a new job: the script adds a stream entry); and of a session whose job is
already queued (coalesced: the script finds it and writes nothing). Target: the new job's
p50 at most 1.5x the append's (the ratio is the median of the rounds' ratios).

**Throughput.** ``--sessions`` sessions (``--per-user`` each, default 1: many users) of 20
events are recorded as jobs, then
1, 2 and 4 worker processes (``--processes``), each a ``FactWorker`` of concurrency 4, are
told to go at once; a scripted model answers each job after ``--latency`` (200 ms) with one
fact. Jobs/s = sessions / the time until the queue is empty (polled every 50 ms). Target:
>= 3.4x at 4 processes over 1. The issue asks for 1,000 sessions and 8 processes; on the
project's 2-core machine shared with others, the default is 200 sessions and 1/2/4
processes (``--sessions 1000 --processes 1,2,4,8`` runs the full size).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from redis.asyncio import Redis

from benchmarks.harness import report, servers, timing
from redis_agent_sessions import (
    Content,
    Event,
    FactSettings,
    FactWorker,
    GenerationRequest,
    MemoryOperation,
    Part,
    RedisMemoryService,
    RedisSessionService,
    Session,
    SessionServiceConfig,
)
from redis_agent_sessions.keys import JobKeys, KeySpace

APP = "bg_bench"
EVENTS = 20
CONCURRENCY = 4
"""Jobs at once per worker process (each is mostly a model's wait)."""


def said(i: int) -> Event:
    words = f"turn {i}: I would like a window seat on the morning flight to Lisbon, please."
    return Event(author="user", content=Content(role="user", parts=[Part(text=words)]))


class Scripted:
    """A model answering after ``latency`` seconds with one new fact."""

    def __init__(self, latency: float) -> None:
        self.latency = latency

    async def generate(self, request: GenerationRequest) -> list[MemoryOperation]:
        await asyncio.sleep(self.latency)
        return [MemoryOperation(action="add", fact=f"The user flew {len(request.events)} times.")]


def services(client: Any, prefix: str, latency: float) -> tuple[Any, RedisMemoryService]:
    config = SessionServiceConfig(key_prefix=prefix)
    facts = FactSettings(mode="background", max_backlog=10_000_000)
    memory = RedisMemoryService(
        client, config=config, backend="plain", generator=Scripted(latency), facts=facts
    )
    return RedisSessionService(client, config=config), memory


# -- enqueue against append -------------------------------------------------------------------


@dataclass
class Latency:
    p50_us: float
    p99_us: float


@dataclass
class EnqueueResult:
    append: Latency
    enqueue_new: Latency
    enqueue_coalesced: Latency
    new_over_append: float
    """Median over rounds of (new job p50) / (append p50) of the same round."""
    coalesced_over_append: float
    rounds: int


async def enqueue_vs_append(url: str, rounds: int, per_round: int) -> EnqueueResult:
    prefix = f"bgb-{uuid.uuid4().hex[:8]}"
    client = Redis.from_url(url)
    sessions, memory = services(client, prefix, 0.0)
    session = await sessions.create_session(app_name=APP, user_id="appender")
    for i in range(EVENTS):
        await sessions.append_event(session, said(i))
    events = list(session.events)
    queued = Session(id="queued", app_name=APP, user_id="waiter", events=events)
    await memory.add_session_to_memory(queued)
    counter = iter(range(10**9))

    async def append() -> None:
        await sessions.append_event(session, said(next(counter)))

    async def new_job() -> None:
        n = next(counter)
        fresh = Session(id=f"s{n}", app_name=APP, user_id=f"u{n % 997}", events=events)
        await memory.add_session_to_memory(fresh)

    async def coalesced() -> None:
        await memory.add_session_to_memory(queued)

    try:
        result = await timing.interleave(
            {"append": append, "new": new_job, "coalesced": coalesced},
            rounds,
            per_round=per_round,
            warmup_rounds=2,
            order=timing.alternate,
        )
    finally:
        await servers.delete_prefix(client, prefix)
        await client.aclose()

    def latency(name: str) -> Latency:
        pooled = result.pooled(name)
        return Latency(timing.percentile(pooled, 50) / 1e3, timing.percentile(pooled, 99) / 1e3)

    return EnqueueResult(
        latency("append"), latency("new"), latency("coalesced"),
        result.ratio("new", "append"), result.ratio("coalesced", "append"), rounds,
    )  # fmt: skip


# -- throughput -------------------------------------------------------------------------------


@dataclass
class Throughput:
    processes: int
    sessions: int
    seconds: float
    jobs_per_s: float
    speedup: float = 1.0


async def throughput(
    url: str, processes: int, sessions_n: int, latency: float, per_user: int
) -> Throughput:
    prefix = f"bgb-{uuid.uuid4().hex[:8]}"
    client = Redis.from_url(url)
    sessions, memory = services(client, prefix, latency)
    try:
        for n in range(sessions_n):
            session = await sessions.create_session(app_name=APP, user_id=f"u{n // per_user}")
            for i in range(EVENTS):
                await sessions.append_event(session, said(i))
            await memory.add_session_to_memory(session)
        command = [sys.executable, "-m", "benchmarks.facts_background", "--worker"]
        pipes = {"stdin": asyncio.subprocess.PIPE, "stdout": asyncio.subprocess.PIPE}
        procs = [
            await asyncio.create_subprocess_exec(*command, url, prefix, str(latency), **pipes)
            for _ in range(processes)
        ]
        for proc in procs:
            assert proc.stdout is not None
            assert (await proc.stdout.readline()).strip() == b"ready"
        started = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        keys = [KeySpace(prefix).jobs(APP, n) for n in range(JobKeys.SHARDS)]
        while True:  # polled, cheaply (the workers share the CPU): the queue's end
            pipe = client.pipeline(transaction=False)
            for k in keys:
                pipe.zcard(k.queued)
                pipe.zcard(k.active)
            if not any(await pipe.execute()):
                break
            await asyncio.sleep(0.05)
        seconds = time.perf_counter() - started
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
            await proc.wait()
    finally:
        await servers.delete_prefix(client, prefix)
        await client.aclose()
    return Throughput(processes, sessions_n, seconds, sessions_n / seconds)


async def worker(url: str, prefix: str, latency: float) -> None:
    """One worker process: waits for ``go``, runs jobs until stdin closes."""
    client = Redis.from_url(url)
    _, memory = services(client, prefix, latency)
    runner = FactWorker(memory, concurrency=CONCURRENCY, apps=[APP], poll_interval=0.01)
    print("ready", flush=True)
    stdin = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    await stdin.readline()
    running = asyncio.create_task(runner.run())
    await stdin.read()  # until the benchmark closes it
    runner.stop()
    await running
    await client.aclose()


# -- the run ----------------------------------------------------------------------------------


async def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    progress = report.Progress("facts_background")
    progress("enqueue against append")
    rounds, per_round = (3, 50) if args.quick else (args.rounds, 200)
    enqueue = await enqueue_vs_append(url, rounds, per_round)
    counts = [int(p) for p in args.processes.split(",")]
    sessions_n = 40 if args.quick else args.sessions
    found: list[Throughput] = []
    for n in counts:
        progress(f"throughput, {n} worker process(es), {sessions_n} sessions")
        found.append(await throughput(url, n, sessions_n, args.latency, args.per_user))
    for row in found:
        row.speedup = row.jobs_per_s / found[0].jobs_per_s
    return {"enqueue": asdict(enqueue), "throughput": [asdict(t) for t in found],
            "latency_s": args.latency, "concurrency": CONCURRENCY,
            "per_user": args.per_user}  # fmt: skip


def show(result: dict[str, Any]) -> None:
    e = result["enqueue"]
    print(f"Enqueue against append ({e['rounds']} interleaved rounds):")
    print(f"  {'call':<36}{'p50 us':>10}{'p99 us':>10}")
    calls = (
        ("append_event", "append"),
        ("add_session_to_memory, new job", "enqueue_new"),
        ("add_session_to_memory, coalesced", "enqueue_coalesced"),
    )
    for name, key in calls:
        print(f"  {name:<36}{e[key]['p50_us']:>10.0f}{e[key]['p99_us']:>10.0f}")
    verdict = "met" if e["new_over_append"] <= 1.5 else "NOT met"
    print(f"  new job p50 / append p50: {e['new_over_append']:.2f}x (target <= 1.5x: {verdict});"
          f" coalesced: {e['coalesced_over_append']:.2f}x")  # fmt: skip
    print(f"Throughput, scripted model of {result['latency_s'] * 1000:.0f} ms, "
          f"{result['concurrency']} jobs at once per process, "
          f"{result['per_user']} session(s) per user:")  # fmt: skip
    print(f"  {'processes':>9}{'sessions':>10}{'seconds':>9}{'jobs/s':>9}{'speedup':>9}")
    for t in result["throughput"]:
        print(f"  {t['processes']:>9}{t['sessions']:>10}{t['seconds']:>9.2f}"
              f"{t['jobs_per_s']:>9.1f}{t['speedup']:>8.2f}x")  # fmt: skip
    four = [t for t in result["throughput"] if t["processes"] == 4]
    if four:
        met = "met" if four[0]["speedup"] >= 3.4 else "NOT met"
        print(f"  4 processes over 1: {four[0]['speedup']:.2f}x (target >= 3.4x: {met})")


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        url, prefix, latency = sys.argv[2:5]
        asyncio.run(worker(url, prefix, float(latency)))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a Redis to use (default: one of its own)")
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--rounds", type=int, default=9, help="enqueue rounds (9)")
    parser.add_argument("--sessions", type=int, default=200, help="sessions of the throughput")
    parser.add_argument("--processes", default="1,2,4", help="worker processes (1,2,4)")
    parser.add_argument(
        "--per-user", type=int, default=1, help="sessions per user (1; a user's jobs run in turn)"
    )
    parser.add_argument("--latency", type=float, default=0.2, help="the model's seconds (0.2)")
    parser.add_argument("--json", metavar="PATH", help="write the result as JSON")
    args = parser.parse_args()
    with servers.redis_url(args.url) as (url, _owned):
        result = asyncio.run(run(args, url))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    show(result)


if __name__ == "__main__":
    main()
