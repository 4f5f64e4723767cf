"""Benchmark of appends and full reads (not a test): latency, throughput, and where time goes.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.append            # full run, ~1 minute
    .venv/bin/python -m benchmarks.append --quick    # smoke run, well under 30 s
    .venv/bin/python -m benchmarks.append --json out.json
    .venv/bin/python -m benchmarks.append --url redis://127.0.0.1:6379/0

Without ``--url`` it starts a throwaway Redis 7 (``benchmarks.harness.servers``) and always
stops it. With ``--url`` it writes only keys under a random prefix and deletes them at the end.

Everything runs in one process, on one ``redis.asyncio.Redis`` client (bytes replies,
hiredis parser when installed), so the raw EVALSHA round trips and the library calls are
measured on the same connection pool in the same run. Latencies come from
``time.perf_counter_ns`` around each awaited call; GC and percentiles as in
``benchmarks.harness.timing``. The Python profile (manual timers and cProfile) runs last, in
its own phase, so it does not touch the main numbers. Reads through the read cache and
ADK reads: ``benchmarks.reads`` and ``benchmarks.adk``; contended appends:
``benchmarks.contention``; pure CPU parts (encoding, decoding): ``benchmarks.cpu``.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from redis.asyncio import Redis

from benchmarks.harness import internals, report, servers, timing
from benchmarks.harness.timing import Stats, Timers, settled_gc, summarize
from benchmarks.harness.workloads import Workload, events_for, make_event
from redis_agent_sessions import (
    GetSessionConfig,
    RedisSessionService,
    Session,
    SessionServiceConfig,
)

APP = "bench_app"
USERS = 50
HISTORY_SIZES = (1, 100, 1000, 10_000)
GET_SESSION_EVENTS = 1000
RECENT = 20
TARGET_APPEND_VS_RAW = 1.5
TARGET_10K_VS_1 = 1.2
TARGET_GET_MS = 8.0

TRIVIAL_LUA = "return 1"
HSET_XADD_LUA = """\
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XADD', KEYS[2], '*', 'event', ARGV[3])
"""

progress = report.Progress("append")


@dataclass(frozen=True)
class Plan:
    """How many operations each phase runs."""

    name: str
    appends: int  # measured appends per history size
    warmup: int  # untimed calls before each timed phase
    raw_calls: int
    get_full_calls: int
    get_recent_calls: int
    throughput_appends: int  # per concurrency case, split across the tasks
    profile_appends: int


FULL = Plan("full", 2000, 200, 5000, 300, 2000, 8000, 3000)
QUICK = Plan("quick", 200, 30, 500, 30, 200, 800, 300)


# -- timed phases ----------------------------------------------------------------------------


async def time_appends(service: RedisSessionService, pairs: list[tuple[Session, Any]]) -> list[int]:
    samples: list[int] = []
    with settled_gc():
        await timing.timed_appends(service, pairs, samples)
    return samples


@dataclass
class AppendCase:
    history: int
    sessions: int
    history_range: str
    stats: Stats


async def bench_raw(client: Redis, prefix: str, plan: Plan) -> dict[str, Stats]:
    trivial = await client.script_load(TRIVIAL_LUA)
    hset_xadd = await client.script_load(HSET_XADD_LUA)
    sample = make_event(1, "raw")
    payload = sample.__pydantic_serializer__.to_json(sample, exclude_none=True)
    keys = (f"{prefix}:raw:hash", f"{prefix}:raw:stream")
    counter = iter(range(10**9))

    async def call_trivial() -> Any:
        return await client.evalsha(trivial, 0)

    async def call_hset_xadd() -> Any:
        return await client.evalsha(hset_xadd, 2, *keys, f"f{next(counter) % 64}", b'"v"', payload)

    return {
        "return 1": summarize(await timing.time_calls(call_trivial, plan.raw_calls, plan.warmup)),
        "HSET + XADD": summarize(
            await timing.time_calls(call_hset_xadd, plan.raw_calls, plan.warmup)
        ),
    }


async def bench_floor(work: Workload, client: Redis, prefix: str, plan: Plan) -> dict[str, Stats]:
    """The append floor, interleaved so that drift hits all alike: per round one raw
    EVALSHA of ``return 1``, one of a script doing HSET+XADD (both packed by redis-py, as
    any caller's), one append_event to a session holding 1 event, and one more with the
    script call packed by redis-py instead of hiredis (what hiredis packing saves)."""
    trivial = await client.script_load(TRIVIAL_LUA)
    hset_xadd = await client.script_load(HSET_XADD_LUA)
    sample = make_event(1, "raw")
    payload = sample.__pydantic_serializer__.to_json(sample, exclude_none=True)
    keys = (f"{prefix}:floor:hash", f"{prefix}:floor:stream")
    sessions = await work.sessions_with(2 * plan.appends, 1)
    pairs = events_for(sessions, 2 * plan.appends)
    await work.fill(await work.new_session(), plan.warmup)
    clock = time.perf_counter_ns
    names = ("return 1", "HSET + XADD", "append_event", "append_event, redis-py packing")
    samples: dict[str, list[int]] = {name: [] for name in names}
    with settled_gc():
        for i in range(plan.appends):
            stamps = [clock()]
            await client.evalsha(trivial, 0)
            stamps.append(clock())
            await client.evalsha(hset_xadd, 2, *keys, f"f{i % 64}", b'"v"', payload)
            stamps.append(clock())
            await work.service.append_event(*pairs[2 * i])
            stamps.append(clock())
            with internals.redis_py_packing():
                await work.service.append_event(*pairs[2 * i + 1])
            stamps.append(clock())
            for name, start, end in zip(names, stamps, stamps[1:], strict=False):
                samples[name].append(end - start)
    return {name: summarize(taken) for name, taken in samples.items()}


async def bench_appends(work: Workload, plan: Plan) -> list[AppendCase]:
    cases = []
    scratch = await work.new_session()
    for history in HISTORY_SIZES:
        # Enough sessions that each grows by at most 10 % while measured (history 1: one
        # append per session, so every measured append really meets exactly 1 event).
        count = max(1, math.ceil(plan.appends / max(1, history // 10)))
        progress(f"building {count} session(s) with {history} events each")
        sessions = await work.sessions_with(count, history)
        pairs = events_for(sessions, plan.appends)
        await work.fill(scratch, plan.warmup)  # warm-up, untimed
        stats = summarize(await time_appends(work.service, pairs))
        top = max(len(s.events) for s in sessions) - 1
        span = f"{history}" if top == history else f"{history}..{top}"
        cases.append(AppendCase(history, count, span, stats))
        progress(f"append at {history}: p50 {stats.p50_us:.1f} us")
    return cases


async def fetch(
    service: RedisSessionService, session: Session, config: GetSessionConfig | None = None
) -> Session | None:
    return await service.get_session(
        app_name=APP, user_id=session.user_id, session_id=session.id, config=config
    )


async def bench_get_session(work: Workload, plan: Plan) -> dict[str, Stats]:
    progress(f"building a session with {GET_SESSION_EVENTS} events for get_session")
    session = await work.new_session()
    await work.fill(session, GET_SESSION_EVENTS)
    recent = GetSessionConfig(num_recent_events=RECENT)
    full_copy = await fetch(work.service, session)
    recent_copy = await fetch(work.service, session, recent)
    if full_copy is None or len(full_copy.events) != GET_SESSION_EVENTS:
        raise RuntimeError("get_session did not return the 1000-event session")
    if recent_copy is None or len(recent_copy.events) != RECENT:
        raise RuntimeError(f"get_session did not return the last {RECENT} events")

    async def full() -> Any:
        return await fetch(work.service, session)

    async def last() -> Any:
        return await fetch(work.service, session, recent)

    warm = max(5, plan.warmup // 10)
    return {
        "full": summarize(await timing.time_calls(full, plan.get_full_calls, warm)),
        f"last {RECENT}": summarize(
            await timing.time_calls(last, plan.get_recent_calls, plan.warmup)
        ),
    }


@dataclass
class ThroughputCase:
    mode: str
    tasks: int
    appends: int
    per_second: float
    p50_us: float
    p99_us: float


async def bench_throughput(
    work: Workload, merge: RedisSessionService, plan: Plan
) -> list[ThroughputCase]:
    cases = []
    for mode, service, task_counts in (
        ("own session per task (reject)", work.service, (1, 4, 16)),
        ("one shared session (merge)", merge, (4, 16)),
    ):
        for tasks in task_counts:
            per_task = plan.throughput_appends // tasks
            if service is merge:
                copies = await shared_copies(work, merge, tasks)
            else:
                copies = [await work.new_session() for _ in range(tasks)]
            batches = [events_for([c], per_task) for c in copies]
            await work.fill(await work.new_session(), plan.warmup)
            samples: list[int] = []
            with settled_gc():
                start = time.perf_counter_ns()
                await asyncio.gather(*(timing.timed_appends(service, b, samples) for b in batches))
                elapsed = (time.perf_counter_ns() - start) / 1e9
            total = per_task * tasks
            stats = summarize(samples)
            rate = total / elapsed
            cases.append(ThroughputCase(mode, tasks, total, rate, stats.p50_us, stats.p99_us))
            progress(f"{mode}, {tasks} task(s): {rate:,.0f} appends/s")
    return cases


async def shared_copies(work: Workload, merge: RedisSessionService, count: int) -> list[Session]:
    """``count`` copies of one new session, one per task, like separate workers hold.

    Under the merge policy every append applies, each state key taking the last writer.
    """
    first = await work.new_session(merge)
    copies = []
    for _ in range(count):
        copy = await merge.get_session(app_name=APP, user_id=first.user_id, session_id=first.id)
        if copy is None:
            raise RuntimeError("the shared session vanished")
        copies.append(copy)
    return copies


# -- profile (separate phase) ----------------------------------------------------------------


async def raw_append_script(
    work: Workload, client: Redis, plan: Plan, *, acl_checks: bool = True
) -> Stats:
    """append_event.lua itself, by raw EVALSHA with prebuilt arguments; without
    ``acl_checks``, with its ACL questions skipped (what they cost)."""
    sha = await client.script_load(internals.append_lua_source(acl_checks=acl_checks))
    session = await work.new_session()
    events = [e for _, e in events_for([session], plan.profile_appends + plan.warmup)]
    keys, calls = internals.append_lua_calls(work.service, APP, session, events)
    pending = iter(calls)

    async def call() -> Any:
        return await client.evalsha(sha, len(keys), *next(pending))

    return summarize(await timing.time_calls(call, plan.profile_appends, plan.warmup))


async def acl_check_cost(work: Workload, client: Redis, plan: Plan) -> dict[str, float]:
    """Server time per append_event.lua run (INFO commandstats), with and without its ACL
    questions, in alternating rounds so that drift hits both alike."""
    usec = {True: 0, False: 0}
    calls = {True: 0, False: 0}
    for _ in range(3):
        for checks in (True, False):
            before = await servers.command_stats(client)
            await raw_append_script(work, client, plan, acl_checks=checks)
            after = await servers.command_stats(client)
            c, u = servers.stats_delta(before, after).get("evalsha", (0, 0))
            calls[checks] += c
            usec[checks] += u
    return {
        "with_checks": usec[True] / calls[True],
        "without_checks": usec[False] / calls[False],
    }


async def append_without_script(work: Workload, plan: Plan, idle_s: float = 0.0) -> Stats:
    """append_event with the script call answered at once: the library's own Python cost.
    With ``idle_s``, each append follows that long an idle wait, as a real one follows its
    round trip (the same code then runs on cold caches)."""
    sessions = [await work.new_session() for _ in range(10)]
    pairs = events_for(sessions, plan.profile_appends)
    samples: list[int] = []
    clock = time.perf_counter_ns
    with internals.script_calls_answered(internals.APPEND_OK_REPLY), settled_gc():
        for session, event in pairs:
            if idle_s:
                await asyncio.sleep(idle_s)
            start = clock()
            await work.service.append_event(session, event)
            samples.append(clock() - start)
    return summarize(samples)


async def profile_append(work: Workload, client: Redis, plan: Plan) -> dict[str, Any]:
    service = work.service
    sessions = await work.sessions_with(10, 100)
    pairs = events_for(sessions, plan.profile_appends)
    await work.fill(await work.new_session(), plan.warmup)
    timers = Timers()
    after_label = internals.AFTER_REPLY_LABEL
    with internals.instrumented(timers, internals.instrument_points(service, "append")):
        before = await servers.command_stats(client)
        samples: list[int] = []
        after_reply = 0  # from the script runner's return to append_event returning
        with settled_gc():
            for session, event in pairs:
                start = time.perf_counter_ns()
                await service.append_event(session, event)
                end = time.perf_counter_ns()
                samples.append(end - start)
                after_reply += end - timers.last_end[after_label]
        after = await servers.command_stats(client)
    n = len(samples)
    total = summarize(samples)
    server = servers.stats_delta(before, after)
    evalsha_calls, evalsha_usec = server.get("evalsha", (n, 0))
    script_us = timers.mean_us("script", n)
    server_us = evalsha_usec / max(1, evalsha_calls)
    parts = {
        "pydantic encode_event (Event -> JSON)": timers.mean_us("encode", n),
        "encode_fields (state values: check + orjson)": timers.mean_us("fields", n),
        "split_state_delta": timers.mean_us("split", n),
        "KeySpace.session (building the key names)": timers.mean_us("keys", n),
        "script runner: argument flattening, reply check": timers.mean_us(after_label, n)
        - script_us,
        "script call: packing, redis-py, event loop, socket": script_us - server_us,
        "script call: server-side Lua (INFO commandstats)": server_us,
        "after the reply: status check, session/state/events update": after_reply / n / 1e3,
    }
    rest = total.mean_us - sum(parts.values())
    parts["rest before the call: checks, temp filter, argument list"] = rest
    inner = {
        cmd: (calls / n, usec / n)
        for cmd, (calls, usec) in sorted(server.items(), key=lambda kv: -kv[1][1])
        if cmd not in ("evalsha", "info")
    }
    return {
        "appends": n,
        "history": f"100..{100 + n // len(sessions)} ({len(sessions)} sessions)",
        "mean_us": total.mean_us,
        "p50_us": total.p50_us,
        "parts_us": parts,
        "timer_overhead_us_per_wrapper": timing.timer_overhead_us(),
        "server_inner_commands_per_append": {
            cmd: {"calls": c, "usec": u} for cmd, (c, u) in inner.items()
        },
        "raw_evalsha_append_lua": asdict(await raw_append_script(work, client, plan)),
        "append_without_script": asdict(await append_without_script(work, plan)),
        "append_without_script_idle": asdict(await append_without_script(work, plan, 0.0002)),
        "acl_checks_server_us": await acl_check_cost(work, client, plan),
    }


async def profile_get_session(work: Workload, plan: Plan) -> dict[str, Any]:
    session = await work.new_session()
    await work.fill(session, GET_SESSION_EVENTS)
    rounds = max(20, plan.get_full_calls // 2)
    timers = Timers()
    with internals.instrumented(timers, internals.instrument_points(work.service, "get_session")):
        samples = await timing.time_calls(lambda: fetch(work.service, session), rounds, 3)
    total = summarize(samples)
    parts = {
        "decode_events (pydantic validate_json, 1000 events)": timers.mean_us("decode", rounds),
        "build_session (Session model)": timers.mean_us("build", rounds),
    }
    parts["MULTI/EXEC round trip + redis-py reply parsing + rest"] = total.mean_us - sum(
        parts.values()
    )
    return {"rounds": rounds, "mean_us": total.mean_us, "parts_us": parts}


async def cprofile_append(work: Workload, plan: Plan, top: int = 18) -> str:
    sessions = await work.sessions_with(10, 10)
    pairs = events_for(sessions, plan.profile_appends)

    async def appends() -> None:
        for session, event in pairs:
            await work.service.append_event(session, event)

    header = (
        f"cProfile of {len(pairs)} append_event calls, top {top} by own time "
        "(ncalls of coroutines count resumptions):"
    )
    return await report.profiled(appends, header, top)


# -- run & report ----------------------------------------------------------------------------


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
    acl = prof["acl_checks_server_us"]
    out += [
        breakdown.render(),
        f"(each timed wrapper adds ~{overhead:.2f} us; 6 wrappers per append)",
        f"server time per append_event.lua run: {acl['with_checks']:.1f} us with its ACL "
        f"checks, {acl['without_checks']:.1f} us without (ratio "
        f"{acl['with_checks'] / acl['without_checks']:.2f}; raw EVALSHA, alternating rounds)",
        "",
    ]

    inner = report.Table(("server: commands inside append_event.lua", "calls/append", "us/append"))
    for cmd, v in prof["server_inner_commands_per_append"].items():
        inner.add(cmd, f"{v['calls']:.1f}", f"{v['usec']:.2f}")

    gp = prof["get_session"]
    title = f"where get_session({GET_SESSION_EVENTS}) time goes (mean of {gp['rounds']})"
    gets = report.share_table(title, gp["parts_us"], gp["mean_us"])
    gets.add("total get_session", report.us(gp["mean_us"]), "")
    out += [inner.render(), "", gets.render(), "", prof["cprofile"], ""]
    out.append(f"wall time {env['wall_seconds']} s")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = report.parser(__doc__)
    report.add_flags(parser, url=True, quick="small smoke run (< 30 s)")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    started = time.perf_counter()
    with servers.redis_url(args.url) as (url, owned):
        result = asyncio.run(run(url, owned, plan))
    result["environment"]["wall_seconds"] = round(time.perf_counter() - started, 1)
    report.emit(result, render, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
