"""Phases 1 and 2: append and get_session latency, one process, the targets in turn."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from benchmarks.cluster import (
    APP,
    GET_SESSION_EVENTS,
    KINDS,
    LATENCY_USERS,
    RAW_LUA,
    RAW_OPS,
    RECENT,
    TARGETS,
    Plan,
    Turns,
    new_sessions,
    progress,
)
from benchmarks.harness import servers
from benchmarks.harness.timing import (
    Stats,
    alternate,
    median_of,
    settled_gc,
    summarize,
    timed,
    timed_appends,
)
from benchmarks.harness.workloads import make_kind_turn
from redis_agent_sessions import (
    GetSessionConfig,
    RedisSessionService,
    Session,
    SessionServiceConfig,
)
from redis_agent_sessions.keys import KeySpace


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
                for cmd, (calls, usec) in servers.stats_delta(before, after).items():
                    if cmd != "info":
                        work[cmd][0] += calls
                        work[cmd][1] += usec
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
