"""``--registration``: what registering users for the sweep costs on the cluster."""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from contextlib import AbstractContextManager, ExitStack, nullcontext
from typing import Any

from redis.asyncio.cluster import RedisCluster

from benchmarks.cluster import (
    APP,
    LATENCY_USERS,
    Plan,
    Turns,
    new_sessions,
    node_addresses,
    progress,
)
from benchmarks.harness import report, servers
from benchmarks.harness.report import Table, us
from benchmarks.harness.timing import (
    Rounds,
    alternate,
    median_of,
    patched,
    percentile,
    settled_gc,
    timed_appends,
)
from redis_agent_sessions import RedisSessionService, SessionServiceConfig
from redis_agent_sessions.keys import escape
from redis_agent_sessions.sessions import _sweep

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
