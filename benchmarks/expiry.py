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
index members naming expired sessions before the writes, after a tenth of them (how fast a
burst drains: a write takes every due member up to ``expired_per_write``) and after all, and
``MEMORY USAGE ... SAMPLES 0`` summed over every key of each store (what the keys hold,
without the server's own overhead), as a ratio to the store that never had them.

What a write that finds a backlog pays, per layout: ``--expired`` sessions of a 1 s TTL
expire; then appends (with ``app:`` keys on the cluster layout) by services taking 0 (the
cleanup off), 4 and ``expired_per_write`` due entries each, interleaved over 20 rounds while
the backlog lasts; printed, each one's p50 as a ratio to the one taking none.

Last, sessions expiring during traffic, per layout: 6 tasks create ``--expired`` sessions
with ``ttl_seconds=1`` (cleanup on, as shipped) while 6 others append to sessions of their own
(with ``app:`` keys on the cluster layout, so that they reach the app's slot) until 4 s after
the last create; printed, how many expired sessions are still named by the app's index then.
A write that checks an entry in the instant between its due time and Redis expiring the
session finds it alive; that used to put it off for a minute.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Any, cast

from redis.asyncio import Redis

from benchmarks.harness import report, servers, timing
from redis_agent_sessions import Event, EventActions, RedisSessionService, SessionServiceConfig
from redis_agent_sessions.keys import KeySpace, split_app_member
from redis_agent_sessions.sessions._layout import Layout

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


async def ordinary_writes(
    client: Redis, prefix: str, cluster: bool, writes: int, first: int = 0
) -> None:
    config = SessionServiceConfig(key_prefix=prefix, ttl_seconds=86_400, cluster=cluster or None)
    service = RedisSessionService(client, config=config)
    for i in range(first, first + writes, 2):
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
    tenth = expired // 10
    await ordinary_writes(client, had, cluster, tenth)
    after_tenth = await stale_members(client, had, users)
    await ordinary_writes(client, had, cluster, expired - tenth, first=tenth)
    await ordinary_writes(client, never, cluster, expired)
    result: dict[str, Any] = {
        "layout": layout,
        "expired_sessions": expired,
        "stale_members": {
            "before": left,
            "after_tenth": after_tenth,
            "after": await stale_members(client, had, users),
        },
        "bytes": {
            "expired_left": left_bytes,
            "had": await footprint(client, had),
            "never": await footprint(client, never),
        },
    }
    result["ratio"] = result["bytes"]["had"] / result["bytes"]["never"]
    await servers.delete_prefix(client, prefix)
    return result


async def draining(client: Redis, cluster: bool, expired: int) -> dict[str, Any]:
    """Append p50 of services taking 0, 4 and ``expired_per_write`` due entries a write,
    interleaved while a backlog of ``expired`` sessions drains (20 rounds: 20 * (4 + 16)
    of them at most), as ratios to the one taking none."""
    layout = "cluster layout" if cluster else "single node"
    progress(f"{layout}: appends while {expired} expired sessions drain")
    prefix = f"bench-expiry-{uuid.uuid4().hex[:8]}"

    def service(ttl: int, take: int) -> RedisSessionService:
        config = SessionServiceConfig(key_prefix=prefix, ttl_seconds=ttl, cluster=cluster or None)
        made = RedisSessionService(client, config=config)
        made._engine.layout.expired_per_write = take
        return made

    gone = service(1, 0)
    for start in range(0, expired, 20):
        await asyncio.gather(
            *(
                gone.create_session(app_name=APP, user_id=f"gone{i % 30}")
                for i in range(start, min(start + 20, expired))
            )
        )
    await asyncio.sleep(1.5)
    shipped = Layout.expired_per_write
    takes = (0, 4, shipped)
    services = {take: service(86_400, 0) for take in takes}
    targets = {
        take: await svc.create_session(app_name=APP, user_id=f"w{take}")
        for take, svc in services.items()
    }
    for take, svc in services.items():
        svc._engine.layout.expired_per_write = take
    times: dict[int, list[float]] = {take: [] for take in takes}
    for r in range(20):
        for take in takes if r % 2 == 0 else takes[::-1]:
            delta = {"k": r, "app:x": r} if cluster else {"k": r}
            event = Event(author="a", actions=EventActions(state_delta=delta))
            started = time.perf_counter()
            await services[take].append_event(targets[take], event)
            times[take].append(time.perf_counter() - started)
    await servers.delete_prefix(client, prefix)
    p50 = {take: timing.median_of(t) * 1e6 for take, t in times.items()}
    return {"layout": layout, "p50_us": p50, "ratio": {t: v / p50[0] for t, v in p50.items()}}


async def during_traffic(client: Redis, cluster: bool, expiring: int) -> dict[str, Any]:
    """``expiring`` sessions of a 1 s TTL made by 6 tasks while 6 others append, until 4 s
    after the last was made; then how many gone sessions the app's index still names."""
    layout = "cluster layout" if cluster else "single node"
    progress(f"{layout}: {expiring} sessions expire during traffic")
    prefix = f"bench-expiry-{uuid.uuid4().hex[:8]}"

    def service(ttl: int) -> RedisSessionService:
        config = SessionServiceConfig(key_prefix=prefix, ttl_seconds=ttl, cluster=cluster or None)
        return RedisSessionService(client, config=config)

    short, long = service(1), service(86_400)
    made = 0
    done = asyncio.Event()

    async def expire(task: int) -> None:
        nonlocal made
        while made < expiring:
            made += 1
            await short.create_session(app_name=APP, user_id=f"gone{task}-{made % 10}")
        done.set()

    async def traffic(task: int) -> None:
        session = await long.create_session(app_name=APP, user_id=f"other{task}")
        stop = None
        i = 0
        while stop is None or asyncio.get_running_loop().time() < stop:
            if stop is None and done.is_set():
                stop = asyncio.get_running_loop().time() + 4.0
            delta = {"n": i, "app:last": i} if cluster else {"n": i}
            await long.append_event(
                session, Event(author="a", actions=EventActions(state_delta=delta))
            )
            i += 1

    await asyncio.gather(*(expire(t) for t in range(6)), *(traffic(t) for t in range(6)))
    keys = KeySpace(prefix)
    members = [
        m.decode() for m in cast("list[bytes]", await client.zrange(keys.app_sessions(APP), 0, -1))
    ]
    gone = [
        m for m in members if not await client.exists(keys.session(APP, *split_app_member(m)).meta)
    ]
    await servers.delete_prefix(client, prefix)
    return {"layout": layout, "expiring": expiring, "still_named": len(gone)}


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
        drains = [await draining(client, cluster, expired) for cluster in (False, True)]
        traffic = [await during_traffic(client, cluster, expired) for cluster in (False, True)]
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
        "draining": drains,
        "during_traffic": traffic,
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
            "after 1/10",
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
            f"{row['stale_members']['after_tenth']:,}",
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
    lines.append("")
    table = report.Table(
        ("layout", "taking 0 (µs)", "taking 4", f"taking {Layout.expired_per_write}")
    )
    for row in result["draining"]:
        p50, ratio = row["p50_us"], row["ratio"]
        takes = sorted(p50, key=int)
        table.add(
            row["layout"],
            report.us(p50[takes[0]]),
            *(f"{report.us(p50[t])} ({ratio[t]:.2f}x)" for t in takes[1:]),
        )
    lines.append(table.render())
    lines.append("appends while a backlog drains: p50 by how many due entries a write takes")
    lines.append("")
    table = report.Table(("layout", "expiring during traffic", "gone, still in the index after"))
    for row in result["during_traffic"]:
        table.add(row["layout"], f"{row['expiring']:,}", f"{row['still_named']:,}")
    lines.append(table.render())
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
