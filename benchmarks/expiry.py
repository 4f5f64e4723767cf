"""Benchmark of the expiry cleanup's cost (not a test): append_event p50 with writes checking
the app's expiry index, against the same appends with that check off, in one run.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.expiry            # ~1 minute
    .venv/bin/python -m benchmarks.expiry --quick    # smoke run, a few seconds
    .venv/bin/python -m benchmarks.expiry --url redis://127.0.0.1:6379/0 --json out.json

Without ``--url`` it starts a throwaway Redis 7 on a free loopback port and always stops it.

Per layout (one node; the cluster code path on that same node, as ``cluster=True`` with a
single-node client runs it), four services on one client and one app: with the cleanup
(``Layout.expired_per_write`` as shipped) and without it (0: no write takes due members of
the expiry index), each for a session with a TTL (``ttl_seconds=3600``: every append moves
its entry in the expiry index) and one without. The app first gets ``--sessions`` other
sessions with a TTL, so the expiry index has the size of a live app's. The timed appends
(small events, a session-state change) run in interleaved rounds, the order alternating, and
the ratio is the median over rounds of (with / without) p50 within a round. Nothing expires
during the run: this is the steady-state cost every append pays (the due check finds nothing
due). Draining a backlog costs one more round trip (a prune script) on the appends that find
due members, at most ``expired_per_write`` sessions each: see the README's "Costs". Target:
<= 1.05.

Then what a store converges to, per layout (the issue's scenario): ``--expired`` sessions of 30
users, one event each, with ``ttl_seconds=1`` (their own writes not cleaning up), expire; then
as many ordinary writes of other users (a create with a day's TTL, then an append, per turn;
no listing) go to that store and to one that never had the expired sessions. Printed: the
index members naming expired sessions before and after those writes, and ``MEMORY USAGE ...
SAMPLES 0`` summed over every key of each store (what the keys hold, without the server's own
overhead), as a ratio to the store that never had them.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any, cast

from redis.asyncio import Redis

from benchmarks.harness import report, servers, timing
from redis_agent_sessions import Event, EventActions, RedisSessionService, SessionServiceConfig
from redis_agent_sessions.keys import KeySpace, split_app_member

APP = "bench_expiry"
TARGET = 1.05
progress = report.Progress("expiry")


async def seed(client: Redis, prefix: str, sessions: int, cluster: bool) -> None:
    """``sessions`` sessions with a TTL in the app, so its expiry index is a live app's."""
    config = SessionServiceConfig(key_prefix=prefix, ttl_seconds=3600, cluster=cluster or None)
    service = RedisSessionService(client, config=config)
    for start in range(0, sessions, 50):
        await asyncio.gather(
            *(
                service.create_session(app_name=APP, user_id=f"seed{i % 500}")
                for i in range(start, min(start + 50, sessions))
            )
        )


async def measure_layout(
    client: Redis, cluster: bool, rounds: int, per_round: int, sessions: int
) -> dict[str, Any]:
    prefix = f"bench-expiry-{uuid.uuid4().hex[:8]}"
    await seed(client, prefix, sessions, cluster)
    services: dict[str, RedisSessionService] = {}
    targets: dict[str, Any] = {}
    for ttl in ("ttl", "no ttl"):
        for cleanup in ("on", "off"):
            name = f"{ttl}, cleanup {cleanup}"
            config = SessionServiceConfig(
                key_prefix=prefix,
                ttl_seconds=3600 if ttl == "ttl" else None,
                cluster=cluster or None,
            )
            service = RedisSessionService(client, config=config)
            if cleanup == "off":
                service._engine.layout.expired_per_write = 0
            services[name] = service
            targets[name] = await service.create_session(
                app_name=APP, user_id=f"u-{ttl}-{cleanup}".replace(" ", "")
            )
    counter = iter(range(10**9))

    def append(name: str) -> Any:
        i = next(counter)
        event = Event(author="a", actions=EventActions(state_delta={"k": i}))
        return services[name].append_event(targets[name], event)

    layout = "cluster layout" if cluster else "single node"
    progress(f"{layout}: {rounds} rounds of {per_round} appends per service")
    result = await timing.interleave(
        {name: (lambda n=name: append(n)) for name in services},
        rounds,
        per_round=per_round,
        warmup_rounds=2,
        order=timing.alternate,
    )
    await servers.delete_prefix(client, prefix)
    rows = {}
    for ttl in ("ttl", "no ttl"):
        on, off = f"{ttl}, cleanup on", f"{ttl}, cleanup off"
        ratios = result.ratios(on, off)
        rows[ttl] = {
            "p50_us": {"on": result.p50_ms(on) * 1000, "off": result.p50_ms(off) * 1000},
            "ratio_per_round": ratios,
            "ratio": timing.median_of(ratios),
        }
    return {"layout": layout, "sessions_in_app": sessions, "sessions": rows}


async def footprint(client: Redis, prefix: str) -> int:
    """MEMORY USAGE of every key under ``prefix`` (a benchmark may SCAN; the library never)."""
    total = 0
    async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        total += await client.memory_usage(key, samples=0) or 0
    return total


async def stale_members(client: Redis, prefix: str, users: int) -> int:
    """Members of the app's and the expired users' listing indexes naming a gone session."""
    keys = KeySpace(prefix)

    async def members(index: str) -> list[str]:
        return [m.decode() for m in cast("list[bytes]", await client.zrange(index, 0, -1))]

    named: list[tuple[str, str]] = []
    for index in (keys.app_sessions(APP), keys.app_updated(APP)):
        named += [split_app_member(m) for m in await members(index)]
    for user in (f"gone{u}" for u in range(users)):
        for index in (keys.user_sessions(APP, user), keys.user_updated(APP, user)):
            named += [(user, m) for m in await members(index)]
    return sum([not await client.exists(keys.session(APP, user, sid).meta) for user, sid in named])


async def ordinary_writes(client: Redis, prefix: str, cluster: bool, writes: int) -> None:
    config = SessionServiceConfig(key_prefix=prefix, ttl_seconds=86_400, cluster=cluster or None)
    service = RedisSessionService(client, config=config)
    for i in range(0, writes, 2):
        s = await service.create_session(app_name=APP, user_id=f"other{i % 17}", session_id=f"o{i}")
        event = Event(author="a", actions=EventActions(state_delta={"n": i, "note": "x" * 800}))
        await service.append_event(s, event)


async def converge_layout(client: Redis, cluster: bool, expired: int) -> dict[str, Any]:
    layout = "cluster layout" if cluster else "single node"
    progress(f"{layout}: {expired} sessions expire, then {expired} ordinary writes")
    prefix = f"bench-expiry-{uuid.uuid4().hex[:8]}"
    had, never = f"{prefix}:had", f"{prefix}:never"
    config = SessionServiceConfig(key_prefix=had, ttl_seconds=1, cluster=cluster or None)
    service = RedisSessionService(client, config=config)
    service._engine.layout.expired_per_write = 0  # as if written before the cleanup existed
    users = 30
    for i in range(expired):
        s = await service.create_session(
            app_name=APP, user_id=f"gone{i % users}", session_id=f"s{i}"
        )
        await service.append_event(s, Event(author="a", actions=EventActions(state_delta={"n": i})))
    await asyncio.sleep(1.5)
    left = await stale_members(client, had, users)
    left_bytes = await footprint(client, had)
    await ordinary_writes(client, had, cluster, expired)
    await ordinary_writes(client, never, cluster, expired)
    result: dict[str, Any] = {
        "layout": layout,
        "expired_sessions": expired,
        "stale_members": {"before": left, "after": await stale_members(client, had, users)},
        "bytes": {
            "expired_left": left_bytes,
            "had": await footprint(client, had),
            "never": await footprint(client, never),
        },
    }
    result["ratio"] = result["bytes"]["had"] / result["bytes"]["never"]
    await servers.delete_prefix(client, prefix)
    return result


async def measure(
    url: str, rounds: int, per_round: int, sessions: int, expired: int
) -> dict[str, Any]:
    client = Redis.from_url(url)
    try:
        layouts = [
            await measure_layout(client, cluster, rounds, per_round, sessions)
            for cluster in (False, True)
        ]
        converged = [await converge_layout(client, cluster, expired) for cluster in (False, True)]
        env = await report.server_environment(client)
    finally:
        await client.aclose()
    return {
        "environment": env,
        "rounds": rounds,
        "appends_per_round": per_round,
        "layouts": layouts,
        "target": TARGET,
        "converged": converged,
    }


def text(result: dict[str, Any]) -> str:
    title = "expiry cleanup: append_event p50, with against without"
    lines = report.environment_lines(title, result["environment"])
    table = report.Table(("layout", "session", "with (µs)", "without (µs)", "with / without"))
    for layout in result["layouts"]:
        for ttl, row in layout["sessions"].items():
            table.add(
                layout["layout"],
                ttl,
                report.us(row["p50_us"]["on"]),
                report.us(row["p50_us"]["off"]),
                f"{row['ratio']:.3f}",
            )
    lines.append(table.render())
    worst = max(row["ratio"] for layout in result["layouts"] for row in layout["sessions"].values())
    verdict = report.verdict(worst, result["target"])
    lines.append(
        f"median over {result['rounds']} rounds of {result['appends_per_round']} appends each; "
        f"app with {result['layouts'][0]['sessions_in_app']:,} other sessions; worst "
        f"{worst:.3f}, target <= {result['target']}: {verdict}"
    )
    lines.append("")
    lines.append("what the store converges to: expired sessions, then as many ordinary writes")
    table = report.Table(
        (
            "layout",
            "expired",
            "stale before",
            "stale after",
            "left (B)",
            "had (B)",
            "never (B)",
            "had / never",
        )
    )
    for row in result["converged"]:
        table.add(
            row["layout"],
            f"{row['expired_sessions']:,}",
            f"{row['stale_members']['before']:,}",
            f"{row['stale_members']['after']:,}",
            f"{row['bytes']['expired_left']:,}",
            f"{row['bytes']['had']:,}",
            f"{row['bytes']['never']:,}",
            f"{row['ratio']:.3f}",
        )
    lines.append(table.render())
    lines.append(
        "stale: index members naming expired sessions; left: the store once they expired; "
        "had / never: MEMORY USAGE of every key, after the writes, against a store that never "
        "had them"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = report.add_flags(report.parser(__doc__), url=True, quick="a few seconds")
    parser.add_argument(
        "--sessions", type=int, default=None, help="other sessions in the app (10,000)"
    )
    parser.add_argument(
        "--expired", type=int, default=None, help="sessions that expire, then writes (3,000)"
    )
    args = parser.parse_args(argv)
    rounds, per_round = (3, 200) if args.quick else (10, 1000)
    sessions = args.sessions or (1000 if args.quick else 10_000)
    expired = args.expired or (300 if args.quick else 3000)
    with servers.redis_url(args.url) as (url, _):
        result = asyncio.run(measure(url, rounds, per_round, sessions, expired))
    report.emit(result, text, args.json)


if __name__ == "__main__":
    main()
