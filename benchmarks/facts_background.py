"""Background generation (issue 54): what recording a job costs an agent's turn, against an
append, how jobs' throughput grows with worker processes, and that workers killed with
``kill -9`` lose nothing and apply nothing twice.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.facts_background             # ~10 minutes
    .venv/bin/python -m benchmarks.facts_background --quick     # smoke run
    .venv/bin/python -m benchmarks.facts_background --chaos     # ~1 minute
    .venv/bin/python -m benchmarks.facts_background --json out.json
    .venv/bin/python -m benchmarks.facts_background --url redis://127.0.0.1:6379/0
    .venv/bin/python -m benchmarks.facts_background --chaos --cluster --url redis://127.0.0.1:7000

It starts a Redis 7 of its own (or uses ``--url``, removing its keys after).

**Enqueue against append.** On one client, in interleaved rounds (``timing.interleave``,
calls in turn, the order rotated each round): ``append_event`` of a text event to a session
of 20 events; ``add_session_to_memory`` in background mode of a session of 20 events not
queued yet (a new job: the script adds a stream entry); and of a session whose job is
already queued (coalesced: the script finds it and writes nothing). Target: the new job's
p50 at most 1.5x the append's (the ratio is the median of the rounds' ratios).

**Throughput.** ``--sessions`` sessions (``--per-user`` each, default 1: many users) of 20
events are recorded as jobs, then 1, 2, 4 and 8 worker processes (``--processes``), each a
``FactWorker`` of concurrency 4, are told to go at once; a scripted model answers each job
after ``--latency`` (200 ms) by counting the events it is given into the user's counter fact
("The user said K things."). Jobs/s = sessions / the time until the queue is empty (polled
every 50 ms), the median of ``--repeat`` runs (process counts in turn, so a load that drifts
reaches each alike). Target: >= 3.4x at 4 processes over 1. Each run then checks that every
session was consolidated exactly once (below).

**Chaos** (``--chaos``). The same sessions and 4 worker processes, one of them, picked at
random, killed with SIGKILL every ``--kill-every`` seconds (3) and another started in its
place, until the queue is empty. The workers' visibility timeout is ``--visibility`` (5 s):
a killed worker's jobs are claimed by another that long after. Then: every session's
watermark counts its 20 events and names its last; every user's counter says exactly the
user's events and its revision is its number of updates (one per session: a step applied
twice would count its events twice and add a revision); no dead letter, and nothing queued,
deferred, running or pending.

``--cluster``: ``--url`` is a Redis Cluster's (any node).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from benchmarks.harness import report, servers, timing
from redis_agent_sessions import (
    Content,
    Event,
    FactJobs,
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


COUNTER = re.compile(r"^The user said (\d+) things\.$")


class Counting:
    """A model answering after ``latency`` seconds: the user's counter fact, K + the events
    it is given (added at K = 0)."""

    def __init__(self, latency: float) -> None:
        self.latency = latency

    async def generate(self, request: GenerationRequest) -> list[MemoryOperation]:
        await asyncio.sleep(self.latency)
        n = len(request.events)
        for fact in request.facts:
            if found := COUNTER.match(fact.text):
                said = f"The user said {int(found.group(1)) + n} things."
                return [MemoryOperation(action="update", fact_id=fact.id, fact=said)]
        return [MemoryOperation(action="add", fact=f"The user said {n} things.")]


def connect(url: str, cluster: bool) -> Any:
    return RedisCluster.from_url(url) if cluster else Redis.from_url(url)


def services(client: Any, prefix: str, latency: float) -> tuple[Any, RedisMemoryService]:
    config = SessionServiceConfig(key_prefix=prefix)
    facts = FactSettings(mode="background", max_backlog=10_000_000)
    memory = RedisMemoryService(
        client, config=config, backend="plain", generator=Counting(latency), facts=facts
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


async def enqueue_vs_append(url: str, cluster: bool, rounds: int, per_round: int) -> EnqueueResult:
    prefix = f"bgb-{uuid.uuid4().hex[:8]}"
    client = connect(url, cluster)
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


# -- throughput and chaos -------------------------------------------------------------------


@dataclass
class Throughput:
    processes: int
    sessions: int
    seconds: float
    """The median of the runs'."""
    jobs_per_s: float
    speedup: float = 1.0
    runs: list[float] = field(default_factory=list)
    exactly_once: bool = True


Seeded = list[tuple[str, str, str]]
"""Each session's (user, id, last event's id)."""


async def seed(client: Any, prefix: str, sessions_n: int, per_user: int) -> Seeded:
    """The sessions, each recorded as a job (32 at a time: seeding is not measured)."""
    sessions, memory = services(client, prefix, 0.0)
    gate = asyncio.Semaphore(32)

    async def one(n: int) -> tuple[str, str, str]:
        async with gate:
            session = await sessions.create_session(app_name=APP, user_id=f"u{n // per_user}")
            for i in range(EVENTS):
                await sessions.append_event(session, said(i))
            await memory.add_session_to_memory(session)
            return session.user_id, session.id, session.events[-1].id

    return list(await asyncio.gather(*(one(n) for n in range(sessions_n))))


async def verify(client: Any, prefix: str, seeded: Seeded, per_user: int) -> dict[str, int]:
    """What is wrong after the run, counted (all zeros: every session consolidated once)."""
    _, memory = services(client, prefix, 0.0)
    keys = KeySpace(prefix)
    pipe = client.pipeline(transaction=False)
    for user, sid, _ in seeded:
        pipe.get(keys.memory_watermark(APP, user, sid))
    marks = await pipe.execute()
    wrong = {"watermarks": 0, "counters": 0, "revisions": 0}
    for (_, _, last), mark in zip(seeded, marks, strict=True):
        wrong["watermarks"] += (mark or b"").decode() != f"{EVENTS}\t{last}"
    for user in sorted({user for user, _, _ in seeded}):
        facts = await memory.list_facts(app_name=APP, user_id=user)
        found = [COUNTER.match(f.text) for f in facts]
        counted = [int(m.group(1)) for m in found if m]
        wrong["counters"] += counted != [EVENTS * per_user]
        wrong["revisions"] += [f.revision for f in facts] != [per_user]
    backlog = await FactJobs(memory).backlog(APP)
    wrong["dead_letters"] = sum(b.dead_letters for b in backlog)
    wrong["left"] = sum(b.queued + b.active + b.deferred + b.pending for b in backlog)
    return wrong


async def spawn(url: str, prefix: str, args: argparse.Namespace) -> asyncio.subprocess.Process:
    """A worker process, ready (told to go by :func:`go`)."""
    command = [sys.executable, "-m", "benchmarks.facts_background", "--worker", url, prefix,
               str(args.latency), str(args.visibility)]  # fmt: skip
    command += ["--cluster"] if args.cluster else []
    pipes = {"stdin": asyncio.subprocess.PIPE, "stdout": asyncio.subprocess.PIPE}
    proc = await asyncio.create_subprocess_exec(*command, **pipes)
    assert proc.stdout is not None
    assert (await proc.stdout.readline()).strip() == b"ready"
    return proc


async def go(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdin is not None
    proc.stdin.write(b"go\n")
    await proc.stdin.drain()


async def stopped(procs: list[asyncio.subprocess.Process]) -> dict[str, int]:
    """Stop the workers (stdin closed: they finish what they hold); their counts summed."""
    counts: dict[str, int] = {}
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.close()
        out, _ = await proc.communicate()
        for name, n in json.loads(out.decode().splitlines()[-1]).items():
            counts[name] = counts.get(name, 0) + n
    return counts


async def throughput(url: str, processes: int, args: argparse.Namespace) -> tuple[float, bool]:
    """Seconds until the queue is empty; whether every session was consolidated once."""
    prefix = f"bgb-{uuid.uuid4().hex[:8]}"
    client = connect(url, args.cluster)
    try:
        seeded = await seed(client, prefix, args.sessions, args.per_user)
        procs = [await spawn(url, prefix, args) for _ in range(processes)]
        started = time.perf_counter()
        for proc in procs:
            await go(proc)
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
        await stopped(procs)
        wrong = await verify(client, prefix, seeded, args.per_user)
    finally:
        await servers.delete_prefix(client, prefix)
        await client.aclose()
    return seconds, not any(wrong.values())


async def chaos(url: str, args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"bgc-{uuid.uuid4().hex[:8]}"
    client = connect(url, args.cluster)
    _, memory = services(client, prefix, 0.0)
    pick = random.Random(54)
    try:
        seeded = await seed(client, prefix, args.sessions, args.per_user)
        procs = [await spawn(url, prefix, args) for _ in range(4)]
        started = time.perf_counter()
        for proc in procs:
            await go(proc)
        kills, next_kill = 0, started + args.kill_every
        while True:
            backlog = await FactJobs(memory).backlog(APP)
            if not any(b.queued + b.active + b.deferred + b.pending for b in backlog):
                break
            if time.perf_counter() >= next_kill:
                victim = procs.pop(pick.randrange(len(procs)))
                victim.kill()  # kill -9, most likely mid-generation (the model's wait)
                await victim.wait()
                procs.append(await spawn(url, prefix, args))
                await go(procs[-1])
                kills, next_kill = kills + 1, time.perf_counter() + args.kill_every
            await asyncio.sleep(0.1)
        seconds = time.perf_counter() - started
        counts = await stopped(procs)
        wrong = await verify(client, prefix, seeded, args.per_user)
    finally:
        await servers.delete_prefix(client, prefix)
        await client.aclose()
    return {"sessions": args.sessions, "seconds": seconds, "kills": kills,
            "claimed": counts.get("claimed", 0), "retried": counts.get("retry", 0),
            "wrong": wrong, "exactly_once": not any(wrong.values())}  # fmt: skip


async def worker(url: str, prefix: str, latency: float, visibility: float, cluster: bool) -> None:
    """One worker process: waits for ``go``, runs jobs until stdin closes, prints its counts."""
    client = connect(url, cluster)
    _, memory = services(client, prefix, latency)
    runner = FactWorker(
        memory, concurrency=CONCURRENCY, apps=[APP], poll_interval=0.01,
        visibility_timeout=visibility,
    )  # fmt: skip
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
    print(json.dumps(dict(runner.counts)), flush=True)


# -- the run ----------------------------------------------------------------------------------


async def run(args: argparse.Namespace, url: str) -> dict[str, Any]:
    progress = report.Progress("facts_background")
    if args.quick:
        args.sessions, args.repeat, args.rounds = 40, 1, 3
    about = {"latency_s": args.latency, "concurrency": CONCURRENCY, "per_user": args.per_user}
    if args.chaos:
        progress(f"chaos, 4 worker processes, one killed every {args.kill_every:g} s")
        return {"chaos": await chaos(url, args), **about}
    progress("enqueue against append")
    enqueue = await enqueue_vs_append(url, args.cluster, args.rounds, 50 if args.quick else 200)
    counts = [int(p) for p in args.processes.split(",")]
    runs: dict[int, list[tuple[float, bool]]] = {n: [] for n in counts}
    for r in range(args.repeat):
        for n in counts:
            progress(f"throughput {r + 1}/{args.repeat}: {n} worker process(es), "
                     f"{args.sessions} sessions")  # fmt: skip
            runs[n].append(await throughput(url, n, args))
    found = []
    for n, got in runs.items():
        seconds = statistics.median(s for s, _ in got)
        found.append(Throughput(n, args.sessions, seconds, args.sessions / seconds, runs=[
            s for s, _ in got], exactly_once=all(ok for _, ok in got)))  # fmt: skip
    for row in found:
        row.speedup = row.jobs_per_s / found[0].jobs_per_s
    return {"enqueue": asdict(enqueue), "throughput": [asdict(t) for t in found],
            "repeat": args.repeat, **about}  # fmt: skip


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
    once = all(t["exactly_once"] for t in result["throughput"])
    print(f"  every session consolidated exactly once, in every run: {'yes' if once else 'NO'}")


def show_chaos(result: dict[str, Any]) -> None:
    c = result["chaos"]
    print(f"Chaos: {c['sessions']} sessions of {EVENTS} events, {result['per_user']} per user, "
          f"4 worker processes of {result['concurrency']} jobs, a model of "
          f"{result['latency_s'] * 1000:.0f} ms; one worker killed with SIGKILL every "
          f"{result['kill_every']:g} s, visibility timeout {result['visibility']:g} s:"
          )  # fmt: skip
    print(f"  {c['seconds']:.1f} s, {c['kills']} kills; the workers alive at the end claimed "
          f"{c['claimed']} jobs of killed ones and retried {c['retried']}")  # fmt: skip
    wrong = ", ".join(f"{k} {v}" for k, v in c["wrong"].items())
    print(f"  exactly once: {'yes' if c['exactly_once'] else 'NO'} (wrong: {wrong})")


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        url, prefix, latency, visibility = sys.argv[2:6]
        cluster = "--cluster" in sys.argv[6:]
        asyncio.run(worker(url, prefix, float(latency), float(visibility), cluster))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a Redis to use (default: one of its own)")
    parser.add_argument("--cluster", action="store_true", help="--url is a cluster's")
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--rounds", type=int, default=9, help="enqueue rounds (9)")
    parser.add_argument("--sessions", type=int, default=1000, help="sessions (1000)")
    parser.add_argument("--processes", default="1,2,4,8", help="worker processes (1,2,4,8)")
    parser.add_argument("--repeat", type=int, default=3, help="throughput runs of each (3)")
    parser.add_argument(
        "--per-user", type=int, default=1, help="sessions per user (1; a user's jobs run in turn)"
    )
    parser.add_argument("--latency", type=float, default=0.2, help="the model's seconds (0.2)")
    parser.add_argument("--chaos", action="store_true", help="the chaos run instead")
    parser.add_argument("--kill-every", type=float, default=3.0, help="chaos: seconds (3)")
    parser.add_argument("--visibility", type=float, default=5.0, help="workers' timeout (5)")
    parser.add_argument("--json", metavar="PATH", help="write the result as JSON")
    args = parser.parse_args()
    if args.cluster and not args.url:
        parser.error("--cluster needs --url")
    with servers.redis_url(args.url) as (url, _owned):
        result = asyncio.run(run(args, url))
    result |= {"kill_every": args.kill_every, "visibility": args.visibility}
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    (show_chaos if args.chaos else show)(result)


if __name__ == "__main__":
    main()
