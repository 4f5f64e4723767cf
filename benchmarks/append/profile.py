"""The profile phase, run last: where an append's and a read's time goes (timers, INFO
commandstats, cProfile), and what append_event.lua costs by itself."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict
from typing import Any

from redis.asyncio import Redis

from benchmarks.append import APP, GET_SESSION_EVENTS, Plan
from benchmarks.append.phases import fetch
from benchmarks.harness import internals, report, servers, timing
from benchmarks.harness.timing import Stats, Timers, settled_gc, summarize
from benchmarks.harness.workloads import Workload, events_for


async def raw_append_script(
    work: Workload, client: Redis, plan: Plan, *, acl_checks: bool = True, stop: str = ""
) -> Stats:
    """append_event.lua itself, by raw EVALSHA with prebuilt arguments; without
    ``acl_checks``, with its ACL questions skipped (what they cost); ``stop``: cut short
    (``internals.append_lua_source``)."""
    source = internals.append_lua_source(acl_checks=acl_checks, stop=stop)
    sha = await client.script_load(source)
    session = await work.new_session()
    events = [e for _, e in events_for([session], plan.profile_appends + plan.warmup)]
    keys, calls = internals.append_lua_calls(work.service, APP, session, events)
    pending = iter(calls)

    async def call() -> Any:
        return await client.evalsha(sha, len(keys), *next(pending))

    return summarize(await timing.time_calls(call, plan.profile_appends, plan.warmup))


SCRIPT_PARTS: dict[str, dict[str, Any]] = {
    "with_checks": {},
    "without_checks": {"acl_checks": False},
    "checks_only": {"stop": "checks"},
    "call_only": {"stop": "call"},
}
"""The variants of append_event.lua whose server time ``script_cost`` compares: whole,
without its ACL questions, only up to their answers, and none of it (the same KEYS and
ARGV, returning at once)."""


async def script_cost(work: Workload, client: Redis, plan: Plan) -> dict[str, float]:
    """Server time per append_event.lua run (INFO commandstats) of each of SCRIPT_PARTS, in
    alternating rounds so that drift hits all alike."""
    usec = dict.fromkeys(SCRIPT_PARTS, 0)
    calls = dict.fromkeys(SCRIPT_PARTS, 0)
    for _ in range(3):
        for name, how in SCRIPT_PARTS.items():
            before = await servers.command_stats(client)
            await raw_append_script(work, client, plan, **how)
            after = await servers.command_stats(client)
            c, u = servers.stats_delta(before, after).get("evalsha", (0, 0))
            calls[name] += c
            usec[name] += u
    return {name: usec[name] / max(1, calls[name]) for name in SCRIPT_PARTS}


_ZADD_LUA = """\
local t = tonumber(ARGV[1])
for i = 1, tonumber(ARGV[3]) do
  t = t + 1000
  local score = ARGV[2] == 'int' and string.format('%d', t) or string.format('%.6f', t / 1e6)
  redis.call('ZADD', KEYS[1], score, 'session-' .. (i % tonumber(ARGV[4])))
end
return 1
"""


async def by_update_zadd(
    client: Redis, prefix: str, sizes: tuple[int, ...] = (20, 45, 80, 120)
) -> dict[str, dict[str, float]]:
    """Server time of one by-update ZADD (a session moved to the newest end of its user's
    index) by the index's size, with the layout's float scores (seconds) and with integer
    ones (microseconds): below 128 members the zset is a listpack, which keeps a float as
    text and parses it at each member an insert passes."""
    sha = await client.script_load(_ZADD_LUA)
    now_us = int(time.time() * 1e6)
    result: dict[str, dict[str, float]] = {}
    for size in sizes:
        result[str(size)] = {}
        for kind in ("float", "int"):
            key = f"{prefix}:zadd-{kind}-{size}"
            members = {f"session-{i}": now_us + i for i in range(size)}
            await client.zadd(
                key, members if kind == "int" else {m: t / 1e6 for m, t in members.items()}
            )
            before = await servers.command_stats(client)
            for call in range(1, 21):  # each call's moves go past every earlier one
                await client.evalsha(sha, 1, key, now_us + call * 10**6, kind, 100, size)
            after = await servers.command_stats(client)
            calls, usec = servers.stats_delta(before, after)["zadd"]
            result[str(size)][kind] = usec / calls
            await client.delete(key)
    return result


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
    return {
        "appends": n,
        "history": f"100..{100 + n // len(sessions)} ({len(sessions)} sessions)",
        "mean_us": total.mean_us,
        "p50_us": total.p50_us,
        "parts_us": parts,
        "timer_overhead_us_per_wrapper": timing.timer_overhead_us(),
        "server_inner_commands_per_append": servers.per_call(server, n, "evalsha", "info"),
        "raw_evalsha_append_lua": asdict(await raw_append_script(work, client, plan)),
        "append_without_script": asdict(await append_without_script(work, plan)),
        "append_without_script_idle": asdict(await append_without_script(work, plan, 0.0002)),
        "script_server_us": await script_cost(work, client, plan),
        "by_update_zadd_us": await by_update_zadd(client, work.service.config.key_prefix),
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
