"""Phase 3: server CPU per append, from K client processes (``INFO cpu`` on every node)."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue
import time
from dataclasses import dataclass
from typing import Any

import redis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from benchmarks.cluster import CPU_TASKS, CPU_USERS, Plan, Turns, new_sessions, progress
from redis_agent_sessions import Event, RedisSessionService, Session, SessionServiceConfig


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
