"""``python -m benchmarks.listing``: the run, its report, the arguments."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from redis.asyncio import Redis

import benchmarks.listing
from benchmarks.harness import report, servers
from benchmarks.listing import CHUNK, FULL, PAGE_SIZE, QUICK, TARGET_PAGE_MS, Plan, progress
from benchmarks.listing.breakdown import page_breakdown
from benchmarks.listing.cases import bench_cases, bench_full_list, check_seeded, seed
from redis_agent_sessions import RedisSessionService, SessionServiceConfig


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
    parts = report.share_table(title, b["parts_us"], b["mean_us"])
    parts.add("total list_sessions_page (timed, with wrappers)", report.us(b["mean_us"]), "")
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
    # The package's docstring says what it measures; the usage line names it as before.
    parser = report.parser(benchmarks.listing.__doc__, prog="listing.py")
    report.add_flags(parser, url=True, quick="10,000 sessions over 100 users (< 30 s)")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    result = servers.run_on(args.url, lambda served, owned: run(served, owned, plan))
    report.emit(result, render, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
