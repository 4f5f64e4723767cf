"""Benchmark of the Redis Cluster layout (not a test): one node vs a 3-primary cluster.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.cluster            # full run, ~2 minutes
    .venv/bin/python -m benchmarks.cluster --quick    # smoke run, well under a minute
    .venv/bin/python -m benchmarks.cluster --single-url redis://127.0.0.1:6379/0 \\
        --cluster-url redis://127.0.0.1:7000
    .venv/bin/python -m benchmarks.cluster --registration   # only the sweep's registration cost

Without the URLs it starts its own throwaway servers on free loopback ports
(``benchmarks.harness.servers``: a Redis 7 node, and three cluster-enabled Redis 7 nodes
joined by ``redis-cli --cluster create``, 3 primaries, no replicas); it stops exactly those,
also on an error, Ctrl-C or SIGTERM. With a URL it uses that server instead, writes only
keys under a random prefix and deletes them at the end (the CPU figures then include
whatever else that server is doing).

Everything is measured in one run, alternating between the targets (appends in short
blocks, gets call by call) so that drift (CPU frequency, other load) hits them alike:

1. ``append_event`` latency, one client, sequential: the cluster (``RedisCluster`` client)
   against one node (``Redis`` client), for a session-only delta, one with ``user:`` keys and
   one with ``app:`` keys (which on a cluster takes a second script in the app's slot). For
   attribution: the cluster layout on the single node (``cluster=True``, ``Redis`` client);
   a raw ``EVALSHA 'return 1'`` on each client and on the key's ``ClusterNode`` directly; a
   raw HGETALL + HGET pipeline on each client; and the commands the scripts ran (``INFO
   commandstats`` around each block).
2. ``get_session`` of a 1,000-event session, full and last 20 events.
3. Server CPU per append: a fixed number of appends, spread over many users (so keys hash to
   every shard), from K client processes; ``INFO cpu`` on every node before and after.

``--registration`` runs only what registering users for the sweep costs on the cluster
(``sessions/_sweep.py``): ``append_event`` with ``app:`` keys and ``create_session`` of a new
user, each with the registration as shipped (a worker registers a user again once a minute),
switched off, switched off with a create's apps index written before its app step instead of
alongside it (the path before the registry), and on every write (``REGISTER_EVERY`` = 0: the
round trip it adds when it is paid), in interleaved rounds.

Latencies come from ``time.perf_counter_ns`` around each awaited call, with the garbage
collector run and its survivors frozen before each round (it stays enabled while timing).
Ratios are of p50s over all rounds; "per-round IQR" is the spread of the same ratio taken
round by round (percentiles 25 and 75, ``benchmarks.harness.timing.percentile``), a guide
to how much a verdict near its target can be trusted.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import queue
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from benchmarks.harness import report, servers
from benchmarks.harness.report import Table, sign, us
from benchmarks.harness.timing import (
    Rounds,
    Stats,
    alternate,
    median_of,
    patched,
    percentile,
    settled_gc,
    summarize,
    timed,
    timed_appends,
)
from benchmarks.harness.workloads import initial_state, make_kind_turn
from redis_agent_sessions import (
    Event,
    GetSessionConfig,
    RedisSessionService,
    Session,
    SessionServiceConfig,
)
from redis_agent_sessions.keys import KeySpace, escape
from redis_agent_sessions.sessions import _sweep

APP = "bench_app"
GET_SESSION_EVENTS = 1000
RECENT = 20
LATENCY_USERS = 48  # sessions (one per user) per target and delta kind
CPU_USERS = 384  # users per throughput run, split across the processes
CPU_TASKS = 4  # concurrent asyncio tasks per client process
TARGET_APPEND = {"session": 1.2, "user": 1.2, "app": 2.2}
TARGET_GET = 1.3

KINDS = ("session", "user", "app")
KIND_LABELS = {
    "session": "session keys only",
    "user": "session + user: keys",
    "app": "session + app: keys",
}
TARGETS = ("single", "layout", "cluster")
TARGET_LABELS = {
    "single": "1 node, Redis client",
    "layout": "1 node, Redis client, cluster layout (cluster=True)",
    "cluster": "3-primary cluster, RedisCluster client",
}
RAW_OPS = ("single", "cluster", "cluster-node", "pipe-single", "pipe-cluster")
RAW_LABELS = {
    "single": "raw EVALSHA 'return 1', 1 node, Redis client",
    "cluster": "raw EVALSHA 'return 1', cluster, RedisCluster client (routed)",
    "cluster-node": "raw EVALSHA 'return 1', cluster, the key's ClusterNode (no routing)",
    "pipe-single": "raw pipeline HGETALL + HGET, 1 node, Redis client",
    "pipe-cluster": "raw pipeline HGETALL + HGET, cluster, RedisCluster client",
}
RAW_LUA = "return 1"


@dataclass(frozen=True)
class Plan:
    """How many operations each phase runs."""

    name: str
    rounds: int  # interleaved rounds of the latency phases
    append_block: int  # appends per (target, delta kind) per round
    raw_block: int  # raw EVALSHAs per client per round
    get_full_block: int  # full get_session calls per target per round
    get_recent_block: int  # last-20 get_session calls per target per round
    warmup: int  # untimed calls per series before the first round
    cpu_appends: int  # appends per throughput run (N), split across the processes
    cpu_processes: tuple[int, ...]  # K values
    cpu_kinds: tuple[str, ...]
    cpu_rounds: int  # each (K, kind, target) runs this often, alternating
    idle_seconds: float  # how long the servers' idle CPU is measured (then subtracted)


FULL = Plan("full", 24, 120, 150, 5, 60, 300, 6000, (2, 4), ("user", "app"), 3, 2.0)
QUICK = Plan("quick", 3, 20, 40, 2, 10, 20, 400, (2,), ("user", "app"), 1, 0.3)

progress = report.Progress("cluster")


# -- servers ---------------------------------------------------------------------------------


def node_addresses(url: str, *, cluster: bool) -> list[tuple[str, int]]:
    """The node of ``url``, or the primaries of the cluster it belongs to."""
    if not cluster:
        with redis.Redis.from_url(url) as client:
            kwargs = client.get_connection_kwargs()
            return [(str(kwargs.get("host", "127.0.0.1")), int(kwargs.get("port", 6379)))]
    with redis.RedisCluster.from_url(url) as rc:
        return sorted((node.host, int(node.port)) for node in rc.get_primaries())


def slot_owner(url: str, key: str) -> tuple[str, int]:
    with redis.RedisCluster.from_url(url) as rc:
        node = rc.get_node_from_key(key)
        assert node is not None
        return node.host, int(node.port)


# -- workload --------------------------------------------------------------------------------


async def new_sessions(
    service: RedisSessionService, users: Sequence[str], limit: int = 16
) -> list[Session]:
    gate = asyncio.Semaphore(limit)

    async def one(user: str) -> Session:
        async with gate:
            return await service.create_session(app_name=APP, user_id=user, state=initial_state())

    return list(await asyncio.gather(*(one(u) for u in users)))


class Turns:
    """Prebuilt (session, event) pairs, round-robin over sessions."""

    def __init__(self, sessions: Sequence[Session], kind: str) -> None:
        self.sessions = sessions
        self.kind = kind
        self.turn = 0
        self.invocation = str(uuid.uuid4())

    def take(self, count: int) -> list[tuple[Session, Event]]:
        out = []
        for _ in range(count):
            session = self.sessions[self.turn % len(self.sessions)]
            out.append((session, make_kind_turn(self.turn, self.kind, self.invocation)))
            self.turn += 1
        return out


# -- phases 1 and 2: latency, one process ----------------------------------------------------


@dataclass
class Latency:
    appends: dict[tuple[str, str], Stats] = field(default_factory=dict)
    raw: dict[str, Stats] = field(default_factory=dict)
    gets: dict[tuple[str, str], Stats] = field(default_factory=dict)
    # server-side commands (calls, usec) per (target, kind), and the appends they served
    work: dict[tuple[str, str], dict[str, list[int]]] = field(default_factory=dict)
    work_appends: dict[tuple[str, str], int] = field(default_factory=dict)
    # per round: cluster p50 / 1-node p50 of that round's samples, per series
    round_ratios: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def add_round(self, series: str, samples: dict[str, list[int]]) -> None:
        ratio = median_of(samples["cluster"]) / median_of(samples["single"])
        self.round_ratios[series].append(ratio)


async def latency_phases(
    single_url: str, cluster_url: str, prefixes: dict[str, str], plan: Plan
) -> Latency:
    single = Redis.from_url(single_url)
    cluster = RedisCluster.from_url(cluster_url)
    try:
        # redis-py 8.1: concurrent first commands on a RedisCluster that has not loaded the
        # slot map yet fail (AttributeError in send_packed_command), so load it first.
        await cluster.initialize()
        shards = [Redis(host=n.host, port=int(n.port)) for n in cluster.get_primaries()]
        stat_nodes = {"single": [single], "layout": [single], "cluster": shards}
        services = {
            "single": RedisSessionService(
                single, config=SessionServiceConfig(key_prefix=prefixes["single"])
            ),
            "layout": RedisSessionService(
                single, config=SessionServiceConfig(key_prefix=prefixes["layout"], cluster=True)
            ),
            "cluster": RedisSessionService(
                cluster, config=SessionServiceConfig(key_prefix=prefixes["cluster"])
            ),
        }
        result = Latency()
        await append_phase(result, services, stat_nodes, single, cluster, prefixes, plan)
        await get_phase(result, services, plan)
        return result
    finally:
        await single.aclose()
        await cluster.aclose()
        for shard in shards:
            await shard.aclose()


async def append_phase(
    result: Latency,
    services: dict[str, RedisSessionService],
    stat_nodes: dict[str, list[Redis]],
    single: Redis,
    cluster: RedisCluster,
    prefixes: dict[str, str],
    plan: Plan,
) -> None:
    progress("creating sessions for the append phase")
    turns: dict[tuple[str, str], Turns] = {}
    for target, service in services.items():
        for kind in KINDS:
            users = [f"lat-{kind}-{i}" for i in range(LATENCY_USERS)]
            turns[target, kind] = Turns(await new_sessions(service, users), kind)

    # Raw EVALSHA of `return 1` with one key (so the cluster client routes it by slot).
    sha = await single.script_load(RAW_LUA)
    for node in cluster.get_primaries():
        await node.execute_command("SCRIPT", "LOAD", RAW_LUA)
    raw_key = f"{prefixes['cluster']}:{{raw}}:k"
    raw_node = cluster.get_node_from_key(raw_key)
    assert raw_node is not None
    raw_calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "single": lambda: single.evalsha(sha, 1, raw_key),
        "cluster": lambda: cluster.evalsha(sha, 1, raw_key),
        "cluster-node": lambda: raw_node.execute_command("EVALSHA", sha, 1, raw_key),
        # What get_session adds in the cluster layout: the app's slot, read alongside.
        "pipe-single": lambda: app_read(single, KeySpace(prefixes["layout"])),
        "pipe-cluster": lambda: app_read(cluster, KeySpace(prefixes["cluster"])),
    }

    progress("warming up")
    for (target, _), series in turns.items():
        await timed_appends(services[target], series.take(plan.warmup), [])
    for call in raw_calls.values():
        await timed(call, plan.warmup, [])

    progress(f"append_event and raw EVALSHA: {plan.rounds} interleaved rounds")
    samples: dict[tuple[str, str], list[int]] = defaultdict(list)
    raw_samples: dict[str, list[int]] = defaultdict(list)
    for round_no in range(plan.rounds):
        blocks = [
            (target, kind, turns[target, kind].take(plan.append_block))
            for target in alternate(TARGETS, round_no)
            for kind in alternate(KINDS, round_no // 2)
        ]
        with settled_gc():
            for op in alternate(RAW_OPS, round_no):
                await timed(raw_calls[op], plan.raw_block, raw_samples[op])
            this_round: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
            for target, kind, pairs in blocks:
                before = await servers.command_stats(*stat_nodes[target])
                await timed_appends(services[target], pairs, this_round[kind][target])
                after = await servers.command_stats(*stat_nodes[target])
                work = result.work.setdefault((target, kind), defaultdict(lambda: [0, 0]))
                for cmd, (calls, usec) in after.items():
                    calls0, usec0 = before.get(cmd, (0, 0))
                    if calls > calls0 and cmd != "info":
                        work[cmd][0] += calls - calls0
                        work[cmd][1] += usec - usec0
                appended = result.work_appends.get((target, kind), 0) + len(pairs)
                result.work_appends[target, kind] = appended
            for kind, by_target in this_round.items():
                result.add_round(f"append {kind}", by_target)
                for target, values in by_target.items():
                    samples[target, kind] += values
    result.appends = {key: summarize(s) for key, s in samples.items()}
    result.raw = {op: summarize(raw_samples[op]) for op in RAW_OPS}


async def app_read(client: Redis | RedisCluster, keys: KeySpace) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.app_state(APP))
    pipe.hget(keys.app_applied(APP), "lat-session-0")
    return await pipe.execute()


async def get_phase(result: Latency, services: dict[str, RedisSessionService], plan: Plan) -> None:
    recent = GetSessionConfig(num_recent_events=RECENT)
    targets: dict[str, tuple[RedisSessionService, Session]] = {}
    for target, service in services.items():
        progress(f"building a {GET_SESSION_EVENTS}-event session ({target})")
        [session] = await new_sessions(service, ["get-user"])
        invocation = str(uuid.uuid4())
        for turn in range(GET_SESSION_EVENTS):
            event = make_kind_turn(turn, KINDS[turn % len(KINDS)], invocation)
            await service.append_event(session, event)
        session.events.clear()  # the copy is not needed any more; keeps the heap small
        targets[target] = service, session

    def getter(target: str, config: GetSessionConfig | None) -> Callable[[], Awaitable[Any]]:
        service, session = targets[target]

        async def call() -> Session | None:
            return await service.get_session(
                app_name=APP, user_id=session.user_id, session_id=session.id, config=config
            )

        return call

    for target in TARGETS:
        full = await getter(target, None)()
        last = await getter(target, recent)()
        if full is None or len(full.events) != GET_SESSION_EVENTS:
            raise RuntimeError(f"{target}: get_session did not return the 1000-event session")
        if last is None or len(last.events) != RECENT:
            raise RuntimeError(f"{target}: get_session did not return the last {RECENT} events")
        if full.state.get("app:fare_currency") != "EUR" or "user:last_seen" not in full.state:
            raise RuntimeError(f"{target}: get_session lost user:/app: state")
        await timed(getter(target, None), max(3, plan.warmup // 30), [])
        await timed(getter(target, recent), plan.warmup, [])

    progress(f"get_session: {plan.rounds} rounds, targets alternating call by call")
    modes = {
        "full": (None, plan.get_full_block),
        "recent": (recent, plan.get_recent_block),
    }
    calls = {(t, mode): getter(t, config) for t in TARGETS for mode, (config, _) in modes.items()}
    samples: dict[tuple[str, str], list[int]] = defaultdict(list)
    for round_no in range(plan.rounds):
        with settled_gc():
            for mode in alternate(list(modes), round_no):
                this_round: dict[str, list[int]] = defaultdict(list)
                for i in range(modes[mode][1]):
                    for target in alternate(TARGETS, round_no + i):
                        await timed(calls[target, mode], 1, this_round[target])
                result.add_round(f"get {mode}", this_round)
                for target, values in this_round.items():
                    samples[target, mode] += values
    result.gets = {key: summarize(s) for key, s in samples.items()}


# -- phase 3: server CPU per append, K client processes ---------------------------------------


def cpu_worker(
    wid: int,
    urls: dict[str, str],
    prefixes: dict[str, str],
    commands: mp.Queue[tuple[Any, ...]],
    results: mp.Queue[tuple[Any, ...]],
) -> None:
    """A client process: prepares sessions and events when told, appends on "go"."""
    try:
        loop = asyncio.new_event_loop()
        clients: dict[str, Redis | RedisCluster] = {
            "single": Redis.from_url(urls["single"]),
            "cluster": RedisCluster.from_url(urls["cluster"]),
        }
        loop.run_until_complete(clients["cluster"].initialize())  # see latency_phases
        services = {
            target: RedisSessionService(client, config=SessionServiceConfig(key_prefix=p))
            for target, client, p in (
                ("single", clients["single"], prefixes["single"]),
                ("cluster", clients["cluster"], prefixes["cluster"]),
            )
        }
        try:
            while True:
                command = commands.get()
                if command[0] == "stop":
                    return
                _, run_id, target, kind, users, appends, tasks = command
                service = services[target]
                batches = loop.run_until_complete(
                    prepare_batches(service, wid, run_id, kind, users, appends, tasks)
                )
                results.put(("ready", wid))
                if commands.get()[0] != "go":
                    return
                cpu0, start = time.process_time(), time.perf_counter()
                loop.run_until_complete(append_batches(service, batches))
                end, cpu1 = time.perf_counter(), time.process_time()
                done = sum(len(b) for b in batches)
                results.put(("done", wid, start, end, cpu1 - cpu0, done))
        finally:
            for client in clients.values():
                loop.run_until_complete(client.aclose())
            loop.close()
    except KeyboardInterrupt:
        pass
    except BaseException as exc:
        results.put(("error", wid, f"{type(exc).__name__}: {exc}"))
        raise


async def prepare_batches(
    service: RedisSessionService,
    wid: int,
    run_id: int,
    kind: str,
    users: int,
    appends: int,
    tasks: int,
) -> list[list[tuple[Session, Event]]]:
    names = [f"cpu-r{run_id}-w{wid}-u{i}" for i in range(users)]
    sessions = await new_sessions(service, names, limit=tasks)
    groups = [sessions[t::tasks] for t in range(tasks)]
    # Untimed: one append per session, concurrently, so every connection is open.
    await asyncio.gather(*(append_batch(service, Turns(g, kind).take(len(g))) for g in groups))
    per_task = appends // tasks
    return [Turns(g, kind).take(per_task) for g in groups]


async def append_batches(
    service: RedisSessionService, batches: list[list[tuple[Session, Event]]]
) -> None:
    await asyncio.gather(*(append_batch(service, b) for b in batches))


async def append_batch(service: RedisSessionService, pairs: list[tuple[Session, Event]]) -> None:
    for session, event in pairs:
        await service.append_event(session, event)


@dataclass
class NodeSample:
    cpu_s: float
    evalsha_calls: int
    evalsha_us: int  # time spent executing EVALSHAs (the Lua scripts)


def sample_node(client: redis.Redis) -> NodeSample:
    cpu: dict[str, Any] = client.info("cpu")
    stats: dict[str, Any] = client.info("commandstats")
    evalsha = stats.get("cmdstat_evalsha", {})
    return NodeSample(
        float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
        int(evalsha.get("calls", 0)),
        int(evalsha.get("usec", 0)),
    )


@dataclass
class CpuRun:
    processes: int
    kind: str
    target: str
    appends: int
    seconds: float
    server_us: dict[tuple[str, int], float]  # per node: server CPU us per append
    evalsha_share: dict[tuple[str, int], float]  # per node: share of the EVALSHAs
    script_us: dict[tuple[str, int], float]  # per node: us per append inside EVALSHA
    client_us: float  # client processes' CPU us per append

    @property
    def per_second(self) -> float:
        return self.appends / self.seconds


class Workers:
    """K spawned client processes, started once and reused by every run."""

    def __init__(self, count: int, urls: dict[str, str], prefixes: dict[str, str]) -> None:
        ctx = mp.get_context("spawn")
        self.results: mp.Queue[tuple[Any, ...]] = ctx.Queue()
        self.commands: list[mp.Queue[tuple[Any, ...]]] = [ctx.Queue() for _ in range(count)]
        self.procs = [
            ctx.Process(
                target=cpu_worker,
                args=(wid, urls, prefixes, self.commands[wid], self.results),
                daemon=True,
            )
            for wid in range(count)
        ]
        for proc in self.procs:
            proc.start()

    def wait(self, what: str, count: int, timeout: float = 300.0) -> list[tuple[Any, ...]]:
        replies: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + timeout
        while len(replies) < count:
            try:
                reply = self.results.get(timeout=1.0)
            except queue.Empty:
                dead = [p.pid for p in self.procs if not p.is_alive()]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(f"client processes failed (dead: {dead})") from None
                continue
            if reply[0] == "error":
                raise RuntimeError(f"client process {reply[1]} failed: {reply[2]}")
            if reply[0] != what:
                raise RuntimeError(f"unexpected reply {reply!r}")
            replies.append(reply)
        return replies

    def close(self) -> None:
        for commands in self.commands:
            try:
                commands.put_nowait(("stop",))
            except (ValueError, OSError):
                pass
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()


def cpu_phase(
    urls: dict[str, str],
    prefixes: dict[str, str],
    nodes: dict[str, list[tuple[str, int]]],
    single_db_url: str,
    plan: Plan,
) -> tuple[list[CpuRun], dict[tuple[str, int], float]]:
    probes = {
        "single": {nodes["single"][0]: redis.Redis.from_url(single_db_url)},
        "cluster": {(h, p): redis.Redis(host=h, port=p) for h, p in nodes["cluster"]},
    }
    workers: Workers | None = None
    runs: list[CpuRun] = []
    idle: dict[tuple[str, int], float] = {}
    try:
        progress(f"idle CPU of the servers over {plan.idle_seconds} s")
        idle = idle_rates({n: p for group in probes.values() for n, p in group.items()}, plan)
        progress(f"starting {max(plan.cpu_processes)} client processes")
        workers = Workers(max(plan.cpu_processes), urls, prefixes)
        run_id = 0
        for round_no in range(plan.cpu_rounds):
            for k in plan.cpu_processes:
                for kind in plan.cpu_kinds:
                    order = ["single", "cluster"]
                    if (round_no + run_id // 2) % 2:
                        order.reverse()
                    for target in order:
                        run_id += 1
                        run = one_cpu_run(
                            workers, probes[target], idle, run_id, k, kind, target, plan
                        )
                        progress(
                            f"round {round_no + 1}, K={k}, {kind}, {target}: "
                            f"{run.per_second:,.0f} appends/s"
                        )
                        runs.append(run)
    finally:
        if workers is not None:
            workers.close()
        for group in probes.values():
            for probe in group.values():
                probe.close()
    return runs, idle


def idle_rates(
    probes: dict[tuple[str, int], redis.Redis], plan: Plan
) -> dict[tuple[str, int], float]:
    """Each server's CPU seconds per second while nobody talks to it (cron, cluster bus)."""
    before = {node: sample_node(probe) for node, probe in probes.items()}
    start = time.perf_counter()
    time.sleep(plan.idle_seconds)
    after = {node: sample_node(probe) for node, probe in probes.items()}
    seconds = time.perf_counter() - start
    return {n: (after[n].cpu_s - before[n].cpu_s) / seconds for n in probes}


def one_cpu_run(
    workers: Workers,
    probes: dict[tuple[str, int], redis.Redis],
    idle: dict[tuple[str, int], float],
    run_id: int,
    k: int,
    kind: str,
    target: str,
    plan: Plan,
) -> CpuRun:
    per_worker = plan.cpu_appends // k
    users = CPU_USERS // k
    for wid in range(k):
        workers.commands[wid].put(("run", run_id, target, kind, users, per_worker, CPU_TASKS))
    workers.wait("ready", k)
    before = {node: sample_node(probe) for node, probe in probes.items()}
    window = time.perf_counter()
    for wid in range(k):
        workers.commands[wid].put(("go",))
    done = workers.wait("done", k)
    window = time.perf_counter() - window
    after = {node: sample_node(probe) for node, probe in probes.items()}
    total = sum(int(d[5]) for d in done)
    seconds = max(float(d[3]) for d in done) - min(float(d[2]) for d in done)
    calls = {n: after[n].evalsha_calls - before[n].evalsha_calls for n in probes}
    all_calls = max(1, sum(calls.values()))
    return CpuRun(
        processes=k,
        kind=kind,
        target=target,
        appends=total,
        seconds=seconds,
        server_us={
            n: (after[n].cpu_s - before[n].cpu_s - idle[n] * window) * 1e6 / total for n in probes
        },
        evalsha_share={n: calls[n] / all_calls for n in probes},
        script_us={n: (after[n].evalsha_us - before[n].evalsha_us) / total for n in probes},
        client_us=sum(float(d[4]) for d in done) * 1e6 / total,
    )


# -- report ----------------------------------------------------------------------------------


def latency_report(lat: Latency) -> list[str]:
    out: list[str] = []
    table = Table(("latency, one client, sequential", "n", "p50 us", "p99 us", "mean us"))
    for op in RAW_OPS:
        s = lat.raw[op]
        table.add(RAW_LABELS[op], *cells(s))
    for kind in KINDS:
        for target in TARGETS:
            s = lat.appends[target, kind]
            table.add(f"append_event, {KIND_LABELS[kind]}: {TARGET_LABELS[target]}", *cells(s))
    for mode, label in (("full", "full"), ("recent", f"last {RECENT}")):
        for target in TARGETS:
            s = lat.gets[target, mode]
            name = f"get_session {GET_SESSION_EVENTS} events, {label}: {TARGET_LABELS[target]}"
            table.add(name, *cells(s))
    out += [table.render(), ""]

    work = Table(("server work per append (INFO commandstats)", "EVALSHAs", "script us"))
    inside = ["commands the scripts ran, per append"]
    for kind in KINDS:
        for target in TARGETS:
            n = lat.work_appends[target, kind]
            stats = lat.work[target, kind]
            evalsha = stats.get("evalsha", [0, 0])
            inner = sorted(
                ((c, v) for c, v in stats.items() if c != "evalsha"), key=lambda cv: -cv[1][0]
            )
            work.add(
                f"{KIND_LABELS[kind]}: {TARGET_LABELS[target]}",
                f"{evalsha[0] / n:.1f}",
                us(evalsha[1] / n),
            )
            inside.append(", ".join(f"{c} {v[0] / n:.1f}" for c, v in inner))
    rendered = [
        f"{line}   {more}" for line, more in zip(work.render().splitlines(), inside, strict=True)
    ]
    out += [*rendered, ""]

    header = ("p50 ratios, cluster / 1 node (same run)", "1 node us", "cluster us", "ratio")
    ratios = Table((*header, "per-round IQR", "target", "verdict"))

    def spread(series: str) -> str:
        values = lat.round_ratios[series]
        if len(values) < 2:
            return "-"
        q1, q3 = percentile(values, 25), percentile(values, 75)
        return f"{q1:.2f}-{q3:.2f}"

    for kind in KINDS:
        one, many = lat.appends["single", kind].p50_us, lat.appends["cluster", kind].p50_us
        goal = TARGET_APPEND[kind]
        ratio = many / one
        ratios.add(
            f"append_event, {KIND_LABELS[kind]}",
            us(one),
            us(many),
            f"{ratio:.2f}x",
            spread(f"append {kind}"),
            f"<= {goal}x",
            report.verdict(ratio, goal),
        )
    for mode, label in (("full", "full"), ("recent", f"last {RECENT}")):
        one, many = lat.gets["single", mode].p50_us, lat.gets["cluster", mode].p50_us
        ratio = many / one
        ratios.add(
            f"get_session {GET_SESSION_EVENTS} events, {label}",
            us(one),
            us(many),
            f"{ratio:.2f}x",
            spread(f"get {mode}"),
            f"<= {TARGET_GET}x",
            report.verdict(ratio, TARGET_GET),
        )
    out += [ratios.render(), ""]

    raw = {op: lat.raw[op].p50_us for op in RAW_OPS}
    series = {
        **{f"append {kind}": {t: lat.appends[t, kind].p50_us for t in TARGETS} for kind in KINDS},
        "get full": {t: lat.gets[t, "full"].p50_us for t in TARGETS},
        f"get last {RECENT}": {t: lat.gets[t, "recent"].p50_us for t in TARGETS},
    }
    split = Table(("where the cluster's extra time goes (p50 us)", *series))
    for name, first, second in (
        ("1 node, Redis client", "single", None),
        ("+ cluster layout (same node, same Redis client)", "layout", "single"),
        ("+ RedisCluster client, 3 nodes (vs layout on 1 node)", "cluster", "layout"),
        ("= cluster, RedisCluster client", "cluster", None),
    ):
        split.add(
            name,
            *(
                us(v[first]) if second is None else sign(v[first] - v[second])
                for v in series.values()
            ),
        )
    split.add(
        "append minus its client's raw EVALSHA: 1 node",
        *(us(series[f"append {k}"]["single"] - raw["single"]) for k in KINDS),
        "",
        "",
    )
    split.add(
        "append minus its client's raw EVALSHA: cluster",
        *(us(series[f"append {k}"]["cluster"] - raw["cluster"]) for k in KINDS),
        "",
        "",
    )
    out += [
        split.render(),
        f"Per call, raw p50: EVALSHA on 1 node {us(raw['single'])} us; on the cluster "
        f"{us(raw['cluster'])} us routed = {us(raw['cluster-node'])} us on the key's ClusterNode "
        f"+ {us(raw['cluster'] - raw['cluster-node'])} us RedisCluster.execute_command "
        "(slot from the keys, command policy lookup, metrics hooks, retry wrapper); node vs "
        f"1 node {sign(raw['cluster-node'] - raw['single'])} us. Pipeline HGETALL+HGET (what "
        f"the cluster layout's get_session adds, run alongside its script): 1 node "
        f"{us(raw['pipe-single'])} us, RedisCluster {us(raw['pipe-cluster'])} us. "
        "An app: append on the cluster makes two EVALSHAs (user slot, then app slot).",
        "",
    ]
    return out


def cells(s: Stats) -> tuple[str, ...]:
    return (str(s.n), us(s.p50_us), us(s.p99_us), us(s.mean_us))


def cpu_report(
    runs: list[CpuRun],
    idle: dict[tuple[str, int], float],
    nodes: dict[str, list[tuple[str, int]]],
    app_node: tuple[str, int],
    plan: Plan,
) -> list[str]:
    groups: dict[tuple[int, str, str], list[CpuRun]] = defaultdict(list)
    for run in runs:
        groups[run.processes, run.kind, run.target].append(run)

    def med(values: Sequence[float]) -> float:
        return median_of(values)

    shards = nodes["cluster"]
    names = {n: f"shard {i + 1}{'*' if n == app_node else ''}" for i, n in enumerate(shards)}
    header = ("throughput and CPU (median of runs)", "appends/s", "x 1 node", "server us")
    table = Table((*header, "in scripts", "other", "client us", "EVALSHAs"))

    def cpu_cells(group: list[CpuRun], node_list: Sequence[tuple[str, int]]) -> list[str]:
        server = sum(med([r.server_us[n] for r in group]) for n in node_list)
        script = sum(med([r.script_us[n] for r in group]) for n in node_list)
        return [us(server), us(script), us(server - script)]

    for k in plan.cpu_processes:
        for kind in plan.cpu_kinds:
            one = groups[k, kind, "single"]
            many = groups[k, kind, "cluster"]
            one_rate = med([r.per_second for r in one])
            many_rate = med([r.per_second for r in many])
            table.add(
                f"K={k}, {KIND_LABELS[kind]}: 1 node",
                f"{one_rate:,.0f}",
                "",
                *cpu_cells(one, nodes["single"]),
                us(med([r.client_us for r in one])),
                "",
            )
            table.add(
                f"K={k}, {KIND_LABELS[kind]}: cluster, all shards",
                f"{many_rate:,.0f}",
                f"{many_rate / one_rate:.2f}",
                *cpu_cells(many, shards),
                us(med([r.client_us for r in many])),
                "",
            )
            for n in shards:
                share = med([r.evalsha_share[n] for r in many])
                table.add(
                    f"    {names[n]} ({n[0]}:{n[1]})",
                    "",
                    "",
                    *cpu_cells(many, [n]),
                    "",
                    f"{share:.0%}",
                )
    runs_per = plan.cpu_rounds
    out = [
        table.render(),
        f"N={plan.cpu_appends:,} appends per run over {CPU_USERS} users, K client processes x "
        f"{CPU_TASKS} asyncio tasks, each case run {runs_per}x alternating 1 node / cluster. "
        "All CPU figures are us per append. server: INFO cpu (used_cpu_sys + used_cpu_user) "
        "delta / N, less the node's idle CPU over the run (idle: 1 node "
        f"{idle_text(idle, nodes['single'])}, shards {idle_text(idle, shards)} us/s); in "
        "scripts: INFO commandstats EVALSHA usec / N (wall time inside the scripts: it grows "
        "when the server is preempted, so on a busy machine it can overstate); other: the rest "
        "(reading, parsing and answering commands, event loop, cluster bus). client: the K "
        "processes' CPU time / N. EVALSHAs: the shard's share of them. * = the shard holding "
        f"the app's slot ({{{APP}}}: app state, app_apply.lua).",
        "",
        implication(groups, shards, app_node, plan),
    ]
    return out


def idle_text(idle: dict[tuple[str, int], float], nodes: Sequence[tuple[str, int]]) -> str:
    return "/".join(f"{idle.get(n, 0.0) * 1e6:,.0f}" for n in nodes)


def implication(
    groups: dict[tuple[int, str, str], list[CpuRun]],
    shards: list[tuple[str, int]],
    app_node: tuple[str, int],
    plan: Plan,
) -> str:
    k = max(plan.cpu_processes)
    lines = [f"What this implies for a real 3-machine cluster (K={k} figures):"]
    for kind in plan.cpu_kinds:
        one_runs, many_runs = groups[k, kind, "single"], groups[k, kind, "cluster"]
        one = median_of([sum(r.server_us.values()) for r in one_runs])
        one_script = median_of([sum(r.script_us.values()) for r in one_runs])
        shard = {n: median_of([r.server_us[n] for r in many_runs]) for n in shards}
        script = sum(median_of([r.script_us[n] for r in many_runs]) for n in shards)
        busiest = max(shard, key=lambda n: shard[n])
        total = sum(shard.values())
        client = median_of([r.client_us for r in many_runs])
        owner = " (the app's shard)" if kind == "app" and busiest == app_node else ""
        lines.append(
            f"- {KIND_LABELS[kind]}: 1 node uses {us(one)} us of server CPU per append, a "
            f"ceiling of ~{1e6 / one:,.0f} appends/s for its one main thread. The busiest shard"
            f"{owner} uses "
            f"{us(shard[busiest])} us, so with a machine per shard the servers top out at "
            f"~{1e6 / shard[busiest]:,.0f} appends/s ({one / shard[busiest]:.1f}x 1 node). "
            f"All shards together use {us(total)} us ({total / one:.2f}x 1 node): script time "
            f"{us(script)} vs {us(one_script)} us, the rest is per-command network and event-"
            "loop work, which a shard amortizes less when it gets a third of the commands from "
            f"the same clients. Clients use ~{us(client)} us of CPU per append (RedisCluster): "
            f"~{client / shard[busiest]:.0f} client cores per shard-sized ceiling."
        )
    lines.append(
        f"This machine has {os.cpu_count()} core(s) for all {len(shards)} shards, the single node "
        "and the client processes (and whatever else runs here), so appends/s measures this "
        "machine, not cluster scaling; CPU per append per shard is what carries over. Every "
        "app: write also runs app_apply.lua on the app's shard, so a workload heavy in app: "
        "writes is bounded by that one shard, however many shards there are."
    )
    return "\n".join(lines)


# -- registering users for the sweep (--registration) -----------------------------------------

REGISTRATION = ("before", "off", "shipped", "every write")


def registering(mode: str, service: RedisSessionService) -> AbstractContextManager[None]:
    """``service``'s engine registers users as ``mode`` says, while inside."""
    if mode == "every write":
        return patched(_sweep, "REGISTER_EVERY", 0.0)
    if mode == "shipped":
        return nullcontext()
    layout: Any = service._engine.layout
    stack = ExitStack()
    stack.enter_context(patched(layout.registry, "recording", lambda keys: nullcontext()))
    if mode == "before":

        async def created(keys: Any, app_name: str, now: float, reply: Any, short: Any) -> Any:
            # ClusterLayout.created before the registry: the apps index, then the app step.
            await layout.client.zadd(layout.keys.apps(), {escape(app_name): now}, nx=True)
            if reply[0] == 0:
                return None
            return await layout._apply(keys, reply[2], want_state=True, shortfalls=short)

        stack.enter_context(patched(layout, "created", created))
    return stack


async def registration_phase(cluster_url: str, prefix: str, plan: Plan) -> Rounds:
    """p50s per round of app: appends and new users' creates, per registration mode."""
    cluster = RedisCluster.from_url(cluster_url)
    try:
        await cluster.initialize()  # see latency_phases
        config = SessionServiceConfig(key_prefix=prefix)
        services = {mode: RedisSessionService(cluster, config=config) for mode in REGISTRATION}
        turns: dict[str, Turns] = {}
        for mode, service in services.items():
            users = [f"reg-{mode}-{i}" for i in range(LATENCY_USERS)]
            turns[mode] = Turns(await new_sessions(service, users), "app")
        made = 0

        async def creates(mode: str, count: int, samples: list[int]) -> None:
            nonlocal made
            for _ in range(count):
                made += 1
                user = f"new-{made}"
                start = time.perf_counter_ns()
                await services[mode].create_session(app_name=APP, user_id=user)
                samples.append(time.perf_counter_ns() - start)

        progress("warming up")
        for mode in REGISTRATION:
            with registering(mode, services[mode]):
                await timed_appends(services[mode], turns[mode].take(plan.warmup), [])
                await creates(mode, plan.warmup // 4, [])
        progress(f"registration: {plan.rounds} interleaved rounds")
        result = Rounds()
        for round_no in range(plan.rounds):
            with settled_gc():
                for mode in alternate(REGISTRATION, round_no):
                    with registering(mode, services[mode]):
                        appends: list[int] = []
                        news: list[int] = []
                        await timed_appends(
                            services[mode], turns[mode].take(plan.append_block), appends
                        )
                        await creates(mode, plan.append_block // 2, news)
                    result.add(f"append {mode}", round_no, appends)
                    result.add(f"create {mode}", round_no, news)
        return result
    finally:
        await cluster.aclose()


def registration_report(rounds: Rounds) -> list[str]:
    header = ("cluster, one client, sequential", "n", "p50 us", "p99 us", "x before", "IQR")
    table = Table(header)
    for op, label in (("append", "append_event with app: keys"), ("create", "create_session")):
        for mode in REGISTRATION:
            s = rounds.stats(f"{op} {mode}")
            ratios = rounds.ratios(f"{op} {mode}", f"{op} before")
            q1, q3 = percentile(ratios, 25), percentile(ratios, 75)
            table.add(
                f"{label}, registration {mode}",
                str(s.n),
                us(s.p50_us),
                us(s.p99_us),
                f"{median_of(ratios):.2f}x",
                f"{q1:.2f}-{q3:.2f}",
            )
    return [
        table.render(),
        "x before: median over rounds of the round's p50 / the same round's p50 before the "
        "registry (registration off, a create's apps index written before its app step); "
        "IQR: of those per-round ratios. Appends "
        f"cycle over {LATENCY_USERS} users, so as shipped each registers once a minute; "
        "creates are of users the worker never saw (each registers), the worst case.",
    ]


def registration_main(args: argparse.Namespace, plan: Plan) -> int:
    prefix = f"ras-benchr-{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        if args.cluster_url:
            cluster_url = args.cluster_url
            nodes = node_addresses(cluster_url, cluster=True)
            stack.callback(servers.delete_prefix_on_nodes, nodes, None, prefix)
        else:
            progress("starting a 3-primary cluster")
            cluster_url = stack.enter_context(servers.cluster()).url
        env = report.environment(plan=plan.name, cluster_url=cluster_url)
        rounds = asyncio.run(registration_phase(cluster_url, prefix, plan))
    result = {"environment": env, "registration": dict(rounds.samples)}
    title = f"redis-agent-sessions: the sweep's registration cost ({plan.name} run)"
    text = "\n".join([*report.environment_lines(title, env), "", *registration_report(rounds)])
    report.emit(result, lambda _result: text, args.json)
    return 0


# -- main ------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = report.parser(__doc__)
    parser.add_argument("--single-url", help="use this Redis node instead of starting one")
    parser.add_argument("--cluster-url", help="use this Redis Cluster (any node's URL)")
    parser.add_argument(
        "--registration", action="store_true", help="only the sweep's registration cost"
    )
    report.add_flags(parser, quick="small smoke run")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.registration:
        return registration_main(args, plan)
    started = time.perf_counter()
    base = f"ras-benchc-{uuid.uuid4().hex[:8]}"
    prefixes = {t: f"{base}-{t}" for t in TARGETS}
    with ExitStack() as stack:
        if args.single_url:
            single_url = args.single_url
        else:
            progress("starting a redis-server")
            single_url = stack.enter_context(servers.redis7(name="single")).url
        if args.cluster_url:
            cluster_url = args.cluster_url
        else:
            progress("starting a 3-primary cluster")
            cluster_url = stack.enter_context(servers.cluster()).url
        nodes = {
            "single": node_addresses(single_url, cluster=False),
            "cluster": node_addresses(cluster_url, cluster=True),
        }
        if args.single_url or args.cluster_url:
            stack.callback(cleanup, args, nodes, single_url, base)
        app_node = slot_owner(cluster_url, KeySpace(prefixes["cluster"]).app_state(APP))
        with redis.Redis.from_url(single_url) as probe:
            server_info: dict[str, Any] = probe.info("server")
        env = report.environment(
            {"redis": str(server_info.get("redis_version"))},
            plan=plan.name,
            single_url=single_url,
            cluster_url=cluster_url,
            own_servers=not (args.single_url or args.cluster_url),
        )
        latency = asyncio.run(latency_phases(single_url, cluster_url, prefixes, plan))
        urls = {"single": single_url, "cluster": cluster_url}
        runs, idle = cpu_phase(urls, prefixes, nodes, single_url, plan)

    env["wall_seconds"] = round(time.perf_counter() - started, 1)
    env["loadavg_1m_end"] = round(os.getloadavg()[0], 2)
    where = "own throwaway servers" if env["own_servers"] else "given URLs"
    text = "\n".join(
        [
            *report.environment_lines(
                f"redis-agent-sessions cluster benchmark ({plan.name} run)", env
            ),
            f"single {single_url}, cluster {cluster_url} ({len(nodes['cluster'])} primaries); "
            f"{where}; 1-min load average {env['loadavg_1m_end']:.2f} at end",
            f"latency: {plan.rounds} rounds; per round and series {plan.append_block} appends / "
            f"{plan.raw_block} raw calls in blocks (target order rotating), {plan.get_full_block} "
            f"full + {plan.get_recent_block} recent gets alternating target call by call; gc "
            "collected + frozen before each round",
            "",
            *latency_report(latency),
            *cpu_report(runs, idle, nodes, app_node, plan),
            "",
            f"wall time {env['wall_seconds']} s",
        ]
    )
    result = {
        "environment": env,
        "latency": latency_json(latency),
        "cpu_runs": [cpu_run_json(r) for r in runs],
        "idle_cpu_s_per_s": {f"{h}:{p}": v for (h, p), v in idle.items()},
    }
    report.emit(result, lambda _result: text, args.json)
    return 0


def latency_json(lat: Latency) -> dict[str, Any]:
    def flat(d: dict[Any, Any]) -> dict[str, Any]:
        return {(k if isinstance(k, str) else " ".join(k)): v for k, v in d.items()}

    return {
        "appends": flat({k: vars(v) for k, v in lat.appends.items()}),
        "raw": {k: vars(v) for k, v in lat.raw.items()},
        "gets": flat({k: vars(v) for k, v in lat.gets.items()}),
        "work": flat({k: dict(v) for k, v in lat.work.items()}),
        "work_appends": flat(lat.work_appends),
        "round_ratios": dict(lat.round_ratios),
    }


def cpu_run_json(run: CpuRun) -> dict[str, Any]:
    def by_node(d: dict[tuple[str, int], float]) -> dict[str, float]:
        return {f"{h}:{p}": v for (h, p), v in d.items()}

    return {
        "processes": run.processes,
        "kind": run.kind,
        "target": run.target,
        "appends": run.appends,
        "seconds": run.seconds,
        "per_second": run.per_second,
        "server_us": by_node(run.server_us),
        "evalsha_share": by_node(run.evalsha_share),
        "script_us": by_node(run.script_us),
        "client_us": run.client_us,
    }


def cleanup(
    args: argparse.Namespace,
    nodes: dict[str, list[tuple[str, int]]],
    single_url: str,
    base: str,
) -> None:
    """Delete our keys from servers we were given (our own servers simply go away)."""
    if args.single_url:
        servers.delete_prefix_on_nodes(nodes["single"], single_url, base)
    if args.cluster_url:
        servers.delete_prefix_on_nodes(nodes["cluster"], None, base)


if __name__ == "__main__":
    raise SystemExit(main())
