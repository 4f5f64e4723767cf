"""The last phase: where a first page's time goes, and the same hashes read raw for reference."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from redis.asyncio import Redis

from benchmarks.harness import internals, report, servers, timing
from benchmarks.harness.timing import Timers, summarize
from benchmarks.listing import APP, PAGE_SIZE, Plan
from redis_agent_sessions import RedisSessionService

HGETALL_ALL_LUA = """\
local out = {}
for i, key in ipairs(KEYS) do out[i] = redis.call('HGETALL', key) end
return out
"""


async def page_breakdown(service: RedisSessionService, client: Redis, plan: Plan) -> dict[str, Any]:
    n = plan.profile_calls

    async def first_updated() -> Any:
        return await service.list_sessions_page(app_name=APP, page_size=PAGE_SIZE)

    timers = Timers()
    with (
        internals.page_round_trips(timers, service),
        internals.instrumented(timers, internals.instrument_points(service, "page")),
    ):
        for _ in range(plan.warmup):
            await first_updated()
        timers.ns.clear()
        timers.calls.clear()
        before = await servers.command_stats(client)
        samples = await timing.time_calls(first_updated, n, 0)
        server = servers.stats_delta(before, await servers.command_stats(client))
    total = summarize(samples)
    index_rt = timers.mean_us("index rt", n)
    sessions_rt = timers.mean_us("sessions rt", n)
    in_load = timers.mean_us("load", n) - sessions_rt
    decode = timers.mean_us("decode", n)
    merge = timers.mean_us("merge", n)
    stored = timers.mean_us("stored", n)
    parts = {
        "index read: ZRANGE 101 + HGETALL app state (1 round trip, incl. parsing)": index_rt,
        "sessions read: 2x101 HGETALL + 1 per user (1 round trip: a script, or a pipeline "
        "on a cluster; incl. parsing)": sessions_rt,
        "decode_hash (orjson per state field; session, user and app hashes)": decode,
        "merge_state (session + user: + app: keys)": merge,
        "stored_session (meta hash -> StoredSession)": stored,
        "load_sessions other: key names, queueing the reads, loop": in_load
        - decode
        - merge
        - stored,
        "build_session: 100 pydantic Session models": timers.mean_us("build", n),
    }
    parts["rest: checks, pipeline setup, cursor filter, token"] = total.mean_us - sum(
        parts.values()
    )
    hgetall = timers.calls["decode"] / n
    return {
        "calls": n,
        "mean_us": total.mean_us,
        "p50_us": total.p50_us,
        "parts_us": parts,
        "decoded_hashes_per_page": hgetall,
        "timer_overhead_us_per_wrapper": timing.timer_overhead_us(),
        "wrapped_calls_per_page": sum(timers.calls.values()) / n,
        "server_commands_per_page": servers.per_call(server, n, "info"),
        "reference_reads": await reference_reads(service, client, plan),
        "cprofile": await cprofile_pages(first_updated, max(20, n // 4)),
    }


async def reference_reads(
    service: RedisSessionService, client: Redis, plan: Plan
) -> dict[str, Any]:
    """The first page's hashes (what load_sessions reads) read outside the library, on the
    same client: as a pipeline of HGETALLs, and as one EVALSHA returning them all."""
    members = await client.zrange(
        internals.key_space(service).app_updated(APP), 0, PAGE_SIZE, desc=True
    )
    keys = internals.page_hash_keys(service, APP, members)
    sha = await client.script_load(HGETALL_ALL_LUA)

    async def pipelined() -> Any:
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
        return await pipe.execute()

    async def scripted() -> Any:
        return await client.evalsha(sha, len(keys), *keys)

    out: dict[str, Any] = {"keys": len(keys)}
    samples: dict[str, list[int]] = {"pipeline": [], "evalsha": []}
    for _ in range(2):  # alternating, so that drift hits both alike
        samples["pipeline"] += await timing.time_calls(
            pipelined, plan.profile_calls // 2, plan.warmup
        )
        samples["evalsha"] += await timing.time_calls(
            scripted, plan.profile_calls // 2, plan.warmup
        )
    out.update({name: asdict(summarize(v)) for name, v in samples.items()})
    return out


async def cprofile_pages(call: Callable[[], Awaitable[Any]], count: int, top: int = 15) -> str:

    async def pages() -> None:
        for _ in range(count):
            await call()

    header = f"cProfile of {count} first pages (by update), top {top} by own time:"
    return await report.profiled(pages, header, top)
