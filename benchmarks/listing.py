"""Benchmark of session listing (not a test): pages from the indexes vs loading every session.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.listing            # 100,000 sessions, ~2-3 minutes
    .venv/bin/python -m benchmarks.listing --quick    # 10,000 sessions, well under 30 s
    .venv/bin/python -m benchmarks.listing --json -   # only the JSON result on stdout
    .venv/bin/python -m benchmarks.listing --url redis://127.0.0.1:6379/0

It starts a throwaway Redis 7 and always stops it. With ``--url`` it writes only keys under a
random prefix and deletes them at the end.

Seeding: 100,000 sessions of one app spread over 1,000 users (``--quick``: 10,000 over
100), user ``i % users`` owning the i-th, each created by the real ``create_session`` with a
small state, then given one event by the real ``append_event`` (a small state delta,
including a ``user:`` key) in a shuffled order, so that the by-update index orders the
sessions differently from the by-creation one. Both run as concurrent calls
(``asyncio.gather`` in chunks) on one ``redis.asyncio.Redis`` client (bytes replies, hiredis
parser when installed).

Timed (sequential, one call at a time, ``time.perf_counter_ns`` around each awaited call):

* ``list_sessions_page(app_name, page_size=100)``: the first page, newest first by update
  (the headline, target p50 <= 5 ms at 100,000 sessions), and by creation;
* a page deep in the walk: the page after the token that 50 pages by update lead to;
* one user's first page (``user_id=``, that user's ~100 sessions);
* for contrast ``list_sessions(app_name, user_id=<one user>)`` (loads that user's ~100
  sessions) and ``list_sessions(app_name)``, which loads all sessions of the app: the call
  the pages replace, timed only up to 3 times (it takes seconds).

The page cases run in interleaved rounds (each case's share of calls per round, after
untimed warm-up calls; the order rotated from round to round), so drift on a shared machine
hits them alike; p50/p99 are over all of a case's samples. GC as in
``benchmarks.harness.timing``. Nothing writes while timing, so the deep token stays valid
and every page is the same.

A last, separate phase splits the first page's time: the index read (one round trip), the
sessions' read (one round trip), decoding and merging state, building the ``Session``
models, and the rest; plus the server's own time for those commands (``INFO
commandstats``), a short cProfile, and for reference the same hashes read raw on the same
client: as a pipeline of HGETALLs and as one EVALSHA returning them all. The latency table
also shows the commands of each round trip of a call (counted once, untimed).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from redis.asyncio import Redis

from benchmarks.harness import internals, report, servers, timing
from benchmarks.harness.timing import Stats, Timers, settled_gc, summarize
from benchmarks.harness.workloads import in_chunks, make_page_event, user_name
from redis_agent_sessions import RedisSessionService, Session, SessionServiceConfig

APP = "bench_listing"
PAGE_SIZE = 100
TARGET_PAGE_MS = 5.0
CHUNK = 64  # concurrent calls per asyncio.gather while seeding (the pool allows 100)
SEED = 20240611
HGETALL_ALL_LUA = """\
local out = {}
for i, key in ipairs(KEYS) do out[i] = redis.call('HGETALL', key) end
return out
"""

progress = report.Progress("listing")


@dataclass(frozen=True)
class Plan:
    """How big the data set is and how many calls each timed case gets."""

    name: str
    sessions: int
    users: int
    calls: int  # timed calls per page case (and per user's list_sessions)
    rounds: int  # the calls are split over this many interleaved rounds
    warmup: int  # untimed calls per case before each round
    deep_pages: int  # pages followed before the deep page
    full_list_max: int  # list_sessions(app) timings at most (stops early past 20 s)
    profile_calls: int


FULL = Plan("full", 100_000, 1_000, 200, 4, 5, 50, 3, 200)
QUICK = Plan("quick", 10_000, 100, 100, 2, 5, 50, 3, 100)


# -- seeding ---------------------------------------------------------------------------------


async def seed(service: RedisSessionService, plan: Plan) -> dict[str, float]:
    def create(i: int) -> Callable[[], Awaitable[Session]]:
        return lambda: service.create_session(
            app_name=APP,
            user_id=user_name(i, plan.users),
            state={"topic": "flights", "step": "start", "n": i},
        )

    started = time.perf_counter()
    sessions: list[Session] = await in_chunks(
        [create(i) for i in range(plan.sessions)], "create_session", CHUNK, progress
    )
    created = time.perf_counter()
    order = list(range(plan.sessions))
    random.Random(SEED).shuffle(order)

    def append(i: int) -> Callable[[], Awaitable[Any]]:
        return lambda: service.append_event(sessions[i], make_page_event(i))

    await in_chunks([append(i) for i in order], "append_event", CHUNK, progress)
    appended = time.perf_counter()
    sessions.clear()  # let the seeded copies go before timing
    return {
        "create_s": created - started,
        "append_s": appended - created,
        "total_s": appended - started,
        "calls_per_s": 2 * plan.sessions / (appended - started),
    }


async def check_seeded(service: RedisSessionService, client: Redis, plan: Plan) -> None:
    keys = internals.key_space(service)
    for index in (keys.app_sessions(APP), keys.app_updated(APP)):
        count = await client.zcard(index)
        if count != plan.sessions:
            raise RuntimeError(f"{index} holds {count} sessions, not {plan.sessions}")


# -- timed cases -----------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    call: Callable[[], Awaitable[Any]]


async def deep_token(service: RedisSessionService, pages: int) -> tuple[str, set[str]]:
    """The token after ``pages`` pages by update, and the ids those pages held."""
    token: str | None = None
    seen: set[str] = set()
    for _ in range(pages):
        page = await service.list_sessions_page(app_name=APP, page_size=PAGE_SIZE, page_token=token)
        seen.update(s.id for s in page.sessions)
        if page.next_page_token is None:
            raise RuntimeError(f"the walk ended before {pages} pages")
        token = page.next_page_token
    assert token is not None
    return token, seen


async def check_pages(
    service: RedisSessionService, client: Redis, plan: Plan, token: str, seen: set[str], user: str
) -> None:
    """The pages the benchmark times hold what they should (checked once, untimed)."""
    first = await service.list_sessions_page(app_name=APP, page_size=PAGE_SIZE)
    times = [s.last_update_time for s in first.sessions]
    if len(times) != PAGE_SIZE or times != sorted(times, reverse=True):
        raise RuntimeError("the first page is not 100 sessions newest first by update")
    top: list[Any] = await client.zrange(
        internals.key_space(service).app_updated(APP), 0, 0, desc=True, withscores=True
    )
    newest = float(top[0][1])
    if abs(times[0] - newest) > 1e-3:
        raise RuntimeError("the first page does not start at the last updated session")
    deep = await service.list_sessions_page(app_name=APP, page_size=PAGE_SIZE, page_token=token)
    if len(deep.sessions) != PAGE_SIZE or seen & {s.id for s in deep.sessions}:
        raise RuntimeError("the deep page repeats sessions of the pages before it")
    if deep.sessions[0].last_update_time > first.sessions[-1].last_update_time:
        raise RuntimeError("the deep page is not further down the walk")
    mine = await service.list_sessions_page(app_name=APP, user_id=user, page_size=PAGE_SIZE)
    expected = plan.sessions // plan.users
    if len(mine.sessions) != min(PAGE_SIZE, expected) or any(
        s.user_id != user for s in mine.sessions
    ):
        raise RuntimeError(f"{user}'s page is not {expected} sessions of {user}")
    listed = await service.list_sessions(app_name=APP, user_id=user)
    if len(listed.sessions) != expected:
        raise RuntimeError(f"list_sessions({user}) found {len(listed.sessions)}, not {expected}")


async def bench_cases(
    service: RedisSessionService, client: Redis, plan: Plan
) -> tuple[dict[str, Stats], dict[str, list[int]], int]:
    user = user_name(plan.users // 2, plan.users)
    progress(f"following {plan.deep_pages} pages by update for the deep token")
    token, seen = await deep_token(service, plan.deep_pages)
    await check_pages(service, client, plan, token, seen, user)
    deep_at = plan.deep_pages * PAGE_SIZE

    async def first_updated() -> Any:
        return await service.list_sessions_page(app_name=APP, page_size=PAGE_SIZE)

    async def first_created() -> Any:
        return await service.list_sessions_page(
            app_name=APP, page_size=PAGE_SIZE, order_by="created"
        )

    async def deep_updated() -> Any:
        return await service.list_sessions_page(app_name=APP, page_size=PAGE_SIZE, page_token=token)

    async def user_page() -> Any:
        return await service.list_sessions_page(app_name=APP, user_id=user, page_size=PAGE_SIZE)

    async def user_list() -> Any:
        return await service.list_sessions(app_name=APP, user_id=user)

    per_user = plan.sessions // plan.users
    cases = [
        Case("list_sessions_page, first page, by update (newest first)", first_updated),
        Case("list_sessions_page, first page, by creation (newest first)", first_created),
        Case(
            f"list_sessions_page, by update, page after {deep_at:,} sessions "
            f"({plan.deep_pages} pages in)",
            deep_updated,
        ),
        Case(f"list_sessions_page, one user's first page ({per_user} sessions)", user_page),
        Case(f"list_sessions(user_id=one user) (all {per_user} of them)", user_list),
    ]
    trips = {c.name: await internals.pipelines_per_call(c.call) for c in cases}
    per_round = max(1, plan.calls // plan.rounds)
    samples = timing.Rounds()
    for round_no in range(plan.rounds):
        progress(f"timing round {round_no + 1}/{plan.rounds}")
        for case in timing.rotate(cases, round_no):  # the order rotates from round to round
            samples.add(
                case.name, round_no, await timing.time_calls(case.call, per_round, plan.warmup)
            )
    return {c.name: samples.stats(c.name) for c in cases}, trips, deep_at


async def bench_full_list(service: RedisSessionService, plan: Plan) -> dict[str, Any]:
    """``list_sessions(app_name)``: every session of the app, a few times at most."""
    samples: list[int] = []
    count = 0
    for _ in range(plan.full_list_max):
        progress(f"list_sessions(app_name) over {plan.sessions:,} sessions")
        with settled_gc():
            start = time.perf_counter_ns()
            listed = await service.list_sessions(app_name=APP)
            samples.append(time.perf_counter_ns() - start)
        count = len(listed.sessions)
        del listed
        progress(f"... {samples[-1] / 1e9:.2f} s")
        if sum(samples) > 20e9:
            break
    if count != plan.sessions:
        raise RuntimeError(f"list_sessions(app_name) found {count}, not {plan.sessions}")
    return {
        "sessions": count,
        "runs": len(samples),
        "seconds": [round(s / 1e9, 3) for s in samples],
        "median_s": timing.median_of(samples) / 1e9,
        "min_s": min(samples) / 1e9,
    }


# -- where a page's time goes ----------------------------------------------------------------


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
    server_parts = {
        cmd: {"calls": calls / n, "usec": usec / n}
        for cmd, (calls, usec) in sorted(server.items(), key=lambda kv: -kv[1][1])
        if cmd != "info"
    }
    return {
        "calls": n,
        "mean_us": total.mean_us,
        "p50_us": total.p50_us,
        "parts_us": parts,
        "decoded_hashes_per_page": hgetall,
        "timer_overhead_us_per_wrapper": timing.timer_overhead_us(),
        "wrapped_calls_per_page": sum(timers.calls.values()) / n,
        "server_commands_per_page": server_parts,
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


# -- run & report ----------------------------------------------------------------------------


async def run(url: str, owned: bool, plan: Plan) -> dict[str, Any]:
    client = Redis.from_url(url, decode_responses=False)
    prefix = f"ras-bench-listing-{uuid.uuid4().hex[:8]}"
    try:
        env = await report.server_environment(
            client,
            url=url,
            own_server=owned,
            plan=asdict(plan),
        )
        service = RedisSessionService(client, config=SessionServiceConfig(key_prefix=prefix))
        progress(f"seeding {plan.sessions:,} sessions over {plan.users:,} users")
        seeding = await seed(service, plan)
        await check_seeded(service, client, plan)
        progress(
            f"seeded in {seeding['total_s']:.1f} s "
            f"({seeding['calls_per_s']:,.0f} create/append calls/s)"
        )
        memory = await client.info("memory")
        env["redis_used_memory"] = memory.get("used_memory_human")
        pages, trips, deep_at = await bench_cases(service, client, plan)
        full = await bench_full_list(service, plan)
        progress("breakdown phase")
        breakdown = await page_breakdown(service, client, plan)
    finally:
        if not owned:
            await servers.delete_prefix(client, prefix)
        await client.aclose()
    headline = pages[next(iter(pages))]
    p50_ms = headline.p50_us / 1e3
    return {
        "environment": env,
        "seeding": seeding,
        "page_size": PAGE_SIZE,
        "deep_page_after": deep_at,
        "latency": {name: asdict(s) for name, s in pages.items()},
        "pipelines_per_call": trips,
        "list_sessions_app": full,
        "target": {
            "name": f"list one page of {PAGE_SIZE} at {plan.sessions:,} sessions: p50 ms",
            "value": p50_ms,
            "target": TARGET_PAGE_MS,
            "met": p50_ms <= TARGET_PAGE_MS,
            "applies": plan.sessions >= 100_000,
        },
        "breakdown": breakdown,
    }


def render(result: dict[str, Any]) -> str:
    ms = report.ms
    env = result["environment"]
    plan = env["plan"]
    seeding = result["seeding"]
    where = "own throwaway server" if env["own_server"] else "given --url"
    out = [
        *report.environment_lines(
            f"redis-agent-sessions listing benchmark ({plan['name']} run)", env
        ),
        f"server {env['url']} ({where})",
        f"{plan['sessions']:,} sessions of one app over {plan['users']:,} users "
        f"(1 event each; redis used_memory {env['redis_used_memory']}); seeded in "
        f"{seeding['total_s']:.1f} s (create_session {seeding['create_s']:.1f} s, "
        f"append_event {seeding['append_s']:.1f} s; {seeding['calls_per_s']:,.0f} calls/s, "
        f"{CHUNK} concurrent)",
        "gc: collected + frozen before each timed batch, enabled while timing",
        "",
    ]
    header = ("latency (one client, sequential)", "n", "p50 ms", "p99 ms", "mean ms", "min ms")
    latency = report.Table((*header, "commands per round trip"))
    for name, s in result["latency"].items():
        stats = (ms(s["p50_us"]), ms(s["p99_us"]), ms(s["mean_us"]), ms(s["min_us"]))
        trips = " + ".join(str(n) for n in result["pipelines_per_call"][name])
        latency.add(name, str(s["n"]), *stats, trips)
    full = result["list_sessions_app"]
    runs = ", ".join(f"{s:.2f}" for s in full["seconds"])
    latency.add(
        f"list_sessions(app_name) (all {full['sessions']:,} sessions; s: {runs})",
        str(full["runs"]),
        ms(full["median_s"] * 1e6),
        "-",
        "-",
        ms(full["min_s"] * 1e6),
        "-",
    )
    out += [latency.render(), ""]

    t = result["target"]
    verdict = "met" if t["met"] else "NOT met"
    if not t["applies"]:
        verdict += f"; the target is stated for 100,000 sessions, this run has {plan['sessions']:,}"
    head = result["latency"][next(iter(result["latency"]))]
    out.append(
        f"list one page of {result['page_size']} at {plan['sessions']:,} sessions: "
        f"p50 {ms(head['p50_us'])} ms, p99 {ms(head['p99_us'])} ms "
        f"(target p50 <= {TARGET_PAGE_MS:g} ms: {verdict})"
    )
    speedup = full["median_s"] * 1e6 / head["p50_us"]
    out += [
        f"list_sessions(app_name) over all {full['sessions']:,} sessions: "
        f"{full['median_s']:.2f} s (median of {full['runs']}), "
        f"{speedup:,.0f}x one page",
        "",
    ]

    b = result["breakdown"]
    title = f"where a first page (by update) goes (mean of {b['calls']} calls)"
    parts = report.Table((title, "us", "share"))
    for name, value in b["parts_us"].items():
        parts.add(name, f"{value:,.1f}", f"{value / b['mean_us']:.0%}")
    parts.add("total list_sessions_page (timed, with wrappers)", f"{b['mean_us']:,.1f}", "")
    server = report.Table(("server time per page (INFO commandstats)", "calls", "us"))
    for cmd, v in b["server_commands_per_page"].items():
        server.add(cmd, f"{v['calls']:.1f}", f"{v['usec']:.1f}")
    out += [
        parts.render(),
        f"(each timed wrapper adds ~{b['timer_overhead_us_per_wrapper']:.2f} us; "
        f"{b['wrapped_calls_per_page']:.0f} wrapped calls per page)",
        "",
        server.render(),
        "",
        reference_text(b["reference_reads"]),
        "",
        b["cprofile"],
        "",
        f"wall time {env['wall_seconds']} s",
        "",
    ]
    compact = {k: v for k, v in result.items() if k != "breakdown"}
    compact["breakdown"] = {k: v for k, v in result["breakdown"].items() if k != "cprofile"}
    out.append(json.dumps(compact, indent=2))
    return "\n".join(out)


def reference_text(ref: dict[str, Any]) -> str:
    ms = report.ms
    title = f"reference: the first page's {ref['keys']} hashes read raw, same client"
    table = report.Table((title, "p50 ms", "p99 ms", "min ms"))
    for name, label in (
        ("pipeline", f"pipeline of {ref['keys']} HGETALL"),
        ("evalsha", f"one EVALSHA returning the {ref['keys']} hashes (what load_sessions sends)"),
    ):
        s = ref[name]
        table.add(label, ms(s["p50_us"]), ms(s["p99_us"]), ms(s["min_us"]))
    return table.render()


def main(argv: Sequence[str] | None = None) -> int:
    parser = report.parser(__doc__)
    report.add_flags(parser, url=True, quick="10,000 sessions over 100 users (< 30 s)")
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
