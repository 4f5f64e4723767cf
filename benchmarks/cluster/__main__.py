"""``python -m benchmarks.cluster``: the arguments, the servers, the run and its report."""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

import redis

import benchmarks.cluster
from benchmarks.cluster import APP, FULL, QUICK, TARGETS, node_addresses, progress, slot_owner
from benchmarks.cluster.cpu import cpu_phase
from benchmarks.cluster.latency import latency_phases
from benchmarks.cluster.registration import registration_main
from benchmarks.cluster.report import cpu_report, cpu_run_json, latency_json, latency_report
from benchmarks.harness import report, servers
from redis_agent_sessions.keys import KeySpace


def main(argv: Sequence[str] | None = None) -> int:
    # The package's docstring says what it measures; the usage line names it as before.
    parser = report.parser(benchmarks.cluster.__doc__, prog="cluster.py")
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
