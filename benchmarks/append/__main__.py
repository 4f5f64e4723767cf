"""``python -m benchmarks.append``: the run, its report, the arguments."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from redis.asyncio import Redis

import benchmarks.append
from benchmarks.append import (
    APP,
    FULL,
    GET_SESSION_EVENTS,
    QUICK,
    TARGET_10K_VS_1,
    TARGET_APPEND_VS_RAW,
    TARGET_GET_MS,
    USERS,
    Plan,
    progress,
)
from benchmarks.append.phases import (
    bench_appends,
    bench_floor,
    bench_get_session,
    bench_raw,
    bench_throughput,
)
from benchmarks.append.profile import cprofile_append, profile_append, profile_get_session
from benchmarks.harness import report, servers
from benchmarks.harness.workloads import Workload
from redis_agent_sessions import RedisSessionService, SessionServiceConfig


async def run(url: str, owned: bool, plan: Plan) -> dict[str, Any]:
    client = Redis.from_url(url, decode_responses=False)
    prefix = f"ras-bench-{uuid.uuid4().hex[:8]}"
    try:
        env = await report.server_environment(
            client,
            url=url,
            own_server=owned,
            plan=asdict(plan),
        )
        service = RedisSessionService(client, config=SessionServiceConfig(key_prefix=prefix))
        merge = RedisSessionService(
            client, config=SessionServiceConfig(key_prefix=prefix, stale_policy="merge")
        )
        work = Workload(service, APP, USERS)
        progress("warming up")
        await work.fill(await work.new_session(), plan.warmup)
        progress("raw EVALSHA round trips")
        raw = await bench_raw(client, prefix, plan)
        progress("append floor, interleaved with raw EVALSHA")
        floor = await bench_floor(work, client, prefix, plan)
        appends = await bench_appends(work, plan)
        gets = await bench_get_session(work, plan)
        throughput = await bench_throughput(work, merge, plan)
        progress("profile phase")
        profile = await profile_append(work, client, plan)
        profile["get_session"] = await profile_get_session(work, plan)
        profile["cprofile"] = await cprofile_append(work, plan)
    finally:
        if not owned:
            await servers.delete_prefix(client, prefix)
        await client.aclose()
    by_history = {c.history: c.stats for c in appends}
    ratios = [
        report.ratio_row(
            "append p50 (history 1) / raw EVALSHA HSET+XADD p50, interleaved",
            floor["append_event"].p50_us / floor["HSET + XADD"].p50_us,
            TARGET_APPEND_VS_RAW,
        ),
        report.ratio_row(
            "append p50 (history 1) / raw EVALSHA `return 1` p50, interleaved",
            floor["append_event"].p50_us / floor["return 1"].p50_us,
            None,
        ),
        report.ratio_row(
            "the same append with redis-py packing the script call / raw HSET+XADD p50",
            floor["append_event, redis-py packing"].p50_us / floor["HSET + XADD"].p50_us,
            None,
        ),
        report.ratio_row(
            "append p50 at 10,000 events / p50 at 1 event",
            by_history[10_000].p50_us / by_history[1].p50_us,
            TARGET_10K_VS_1,
        ),
        report.ratio_row(
            f"get_session({GET_SESSION_EVENTS} events, full) p50, ms",
            gets["full"].p50_us / 1e3,
            TARGET_GET_MS,
        ),
    ]
    return {
        "environment": env,
        "raw_evalsha": {k: asdict(v) for k, v in raw.items()},
        "append_floor": {k: asdict(v) for k, v in floor.items()},
        "append_event": [asdict(c) for c in appends],
        "get_session_1000": {k: asdict(v) for k, v in gets.items()},
        "throughput": [asdict(c) for c in throughput],
        "ratios": ratios,
        "profile": profile,
    }


def render(result: dict[str, Any]) -> str:
    env = result["environment"]
    where = "own throwaway server" if env["own_server"] else "given --url"
    out = [
        *report.environment_lines(
            f"redis-agent-sessions append benchmark ({env['plan']['name']} run)", env
        ),
        f"server {env['url']} ({where}), {env['event_loop']}",
        "gc: collected + frozen before each timed phase, enabled while timing",
        "",
    ]

    latency = report.Table(("latency (one client, sequential)", "n", "p50 us", "p99 us", "mean us"))
    for name, s in result["raw_evalsha"].items():
        latency.add(*report.latency_cells(f"raw EVALSHA {name}", s))
    for name, s in result["append_floor"].items():
        what = name.replace("append_event", "append_event, history 1")
        what = what if what.startswith("append") else f"raw EVALSHA {name}"
        latency.add(*report.latency_cells(f"{what} (interleaved)", s))
    for c in result["append_event"]:
        plural = "s" if c["sessions"] > 1 else ""
        label = f"append_event, history {c['history_range']} ({c['sessions']} session{plural})"
        latency.add(*report.latency_cells(label, c["stats"]))
    for name, s in result["get_session_1000"].items():
        latency.add(*report.latency_cells(f"get_session {GET_SESSION_EVENTS} events, {name}", s))

    header = ("throughput (concurrent asyncio tasks)", "tasks", "appends", "appends/s")
    throughput = report.Table((*header, "p50 us", "p99 us"))
    for c in result["throughput"]:
        counts = (c["mode"], str(c["tasks"]), str(c["appends"]), f"{c['per_second']:,.0f}")
        throughput.add(*counts, report.us(c["p50_us"]), report.us(c["p99_us"]))

    out += [
        latency.render(),
        "",
        throughput.render(),
        "",
        report.ratio_table(result["ratios"]),
        "",
    ]

    prof = result["profile"]
    title = f"where append_event time goes (mean of {prof['appends']}, history {prof['history']})"
    breakdown = report.share_table(title, prof["parts_us"], prof["mean_us"])
    breakdown.add("total append_event (timed, with wrappers)", report.us(prof["mean_us"]), "")
    for label, key in (
        ("reference: raw EVALSHA of append_event.lua, same client", "raw_evalsha_append_lua"),
        ("reference: append_event, script call stubbed (Python only)", "append_without_script"),
        ("  the same, each append after a 200 us idle wait", "append_without_script_idle"),
    ):
        ref = prof[key]
        breakdown.add(label, report.us(ref["mean_us"]), f"p50 {report.us(ref['p50_us'])}")
    overhead = prof["timer_overhead_us_per_wrapper"]
    acl = prof["script_server_us"]
    out += [
        breakdown.render(),
        f"(each timed wrapper adds ~{overhead:.2f} us; 6 wrappers per append)",
        f"server time per append_event.lua run: {acl['with_checks']:.1f} us with its ACL "
        f"checks, {acl['without_checks']:.1f} us without (ratio "
        f"{acl['with_checks'] / acl['without_checks']:.2f}); up to the checks' answers "
        f"{acl['checks_only']:.1f} us; the call returning at once {acl['call_only']:.1f} us "
        "(raw EVALSHA, the same KEYS and ARGV, alternating rounds)",
        "",
    ]

    inner = report.Table(("server: commands inside append_event.lua", "calls/append", "us/append"))
    for cmd, v in prof["server_inner_commands_per_append"].items():
        inner.add(cmd, f"{v['calls']:.1f}", f"{v['usec']:.2f}")

    gp = prof["get_session"]
    title = f"where get_session({GET_SESSION_EVENTS}) time goes (mean of {gp['rounds']})"
    gets = report.share_table(title, gp["parts_us"], gp["mean_us"])
    gets.add("total get_session", report.us(gp["mean_us"]), "")
    zadd = report.Table(("by-update ZADD (newest end) by index size", "float us", "int us"))
    for size, cost in prof["by_update_zadd_us"].items():
        zadd.add(f"{size} sessions (listpack)", f"{cost['float']:.2f}", f"{cost['int']:.2f}")
    out += [inner.render(), "", zadd.render(), "", gets.render(), "", prof["cprofile"], ""]
    out.append(f"wall time {env['wall_seconds']} s")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    # The package's docstring says what it measures; the usage line names it as before.
    parser = report.parser(benchmarks.append.__doc__, prog="append.py")
    report.add_flags(parser, url=True, quick="small smoke run (< 30 s)")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    result = servers.run_on(args.url, lambda served, owned: run(served, owned, plan))
    report.emit(result, render, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
