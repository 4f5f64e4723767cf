"""Plots for the documentation (not a test): append and read latency against session length.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.plots                # 10 to 10,000 events, ~2 minutes
    .venv/bin/python -m benchmarks.plots --quick        # 10 to 1,000 events, < 1 minute
    .venv/bin/python -m benchmarks.plots --out docs/img --json plots.json
    .venv/bin/python -m benchmarks.plots --sqlite-max 1000 --sqlite-dir /tmp  # on disk

Writes ``append-latency.svg`` (``append_event`` p50 against the events already in the session:
the core service, the ADK drop-in, ADK's ``DatabaseSessionService`` on sqlite) and
``read-latency.svg`` (``get_session`` p50: cold, warm through the read cache, with
``CompactedReads``, and ADK's store) to ``--out`` (default ``docs/img``), each captioned with
the command, the day it ran and the environment, this package's version the one imported
(the one measured). Every store gets the same events (``make_adk_event``), in
interleaved, rotated turns; each session grows by at most 10 % while measured. The SQLite
file goes on tmpfs (``/dev/shm``) by default, as the throwaway Redis keeps no files either.
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import sqlite3
import tempfile
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from google.adk.apps.app import EventsCompactionConfig
from google.adk.events import Event, EventActions
from google.adk.events.event_actions import EventCompaction
from google.adk.sessions import DatabaseSessionService
from google.genai import types
from redis.asyncio import Redis

from benchmarks.harness import report, servers, svg, timing
from benchmarks.harness.workloads import in_chunks, make_adk_event, seed_session, unique_prefix
from redis_agent_sessions import Event as CoreEvent
from redis_agent_sessions import RedisSessionService as CoreService
from redis_agent_sessions import SessionServiceConfig
from redis_agent_sessions.adk import CompactedReads
from redis_agent_sessions.adk import RedisSessionService as AdkService

warnings.filterwarnings("ignore", message=r"\[EXPERIMENTAL\]")

APP, USER = "bench_plots", "plotter"
CACHE = 256 << 20
SUMMARY_EVERY = 48  # raw events (12 turns) between two rolling summaries
COMPACTION = EventsCompactionConfig(token_threshold=4000, event_retention_size=4)

APPENDERS = {
    "core": "redis-agent-sessions: core RedisSessionService",
    "adk": "redis-agent-sessions: ADK drop-in (redis_agent_sessions.adk)",
    "sqlite": "ADK DatabaseSessionService (sqlite+aiosqlite)",
}
READERS = {
    "cold": "redis-agent-sessions ADK drop-in, cold (read cache off)",
    "warm": "redis-agent-sessions ADK drop-in, warm (read cache, 1 new event)",
    "compacted": "redis-agent-sessions ADK drop-in, CompactedReads (summaries)",
    "sqlite": "ADK DatabaseSessionService (sqlite+aiosqlite)",
}

LOOKS = {  # colour and marker of each series, alike in both figures
    "core": (svg.PALETTE[0], "circle"),
    "adk": (svg.PALETTE[1], "square"),
    "cold": (svg.PALETTE[1], "square"),
    "warm": (svg.PALETTE[2], "triangle"),
    "compacted": (svg.PALETTE[0], "circle"),
    "sqlite": (svg.PALETTE[3], "diamond"),
}

progress = report.Progress("plots")


@dataclass(frozen=True)
class Plan:
    name: str
    lengths: tuple[int, ...]
    appends: int  # timed appends per store and length
    warmup: int  # untimed appends per store before each length's
    rounds: tuple[int, int]  # read rounds per length: at least, at most

    def read_rounds(self, length: int) -> int:
        low, high = self.rounds
        return max(low, min(high, 20_000 // length))


FULL = Plan("full", (10, 100, 1_000, 10_000), 200, 20, (7, 31))
QUICK = Plan("quick", (10, 100, 1_000), 60, 10, (5, 15))


def core_event(i: int) -> CoreEvent:
    """:func:`make_adk_event` as core models."""
    return CoreEvent.model_validate(make_adk_event(i).model_dump(mode="json", exclude_none=True))


def summary_event(start: float, end: float, text: str) -> Event:
    """A compaction summary as ADK's summarizer writes one, of the events from start to end."""
    content = types.Content(role="model", parts=[types.Part(text=text)])
    compaction = EventCompaction(
        start_timestamp=start, end_timestamp=end, compacted_content=content
    )
    return Event(
        author="user", invocation_id=Event.new_id(), actions=EventActions(compaction=compaction)
    )


@dataclass
class Stores:
    core: CoreService  # core models, cache off
    adk: AdkService  # ADK models, cache off: cold reads, and the other worker for warm reads
    warm: AdkService  # ADK models, read cache on
    sqlite: DatabaseSessionService

    def appenders(self, sqlite: bool = True) -> dict[str, tuple[Any, Callable[[int], Any]]]:
        ours: dict[str, tuple[Any, Callable[[int], Any]]] = {
            "core": (self.core, core_event),
            "adk": (self.adk, make_adk_event),
        }
        return {**ours, "sqlite": (self.sqlite, make_adk_event)} if sqlite else ours


def ids(session: Any) -> dict[str, Any]:
    return {"app_name": APP, "user_id": USER, "session_id": session.id}


async def seed_compacted(service: AdkService, sid: str, length: int) -> Any:
    """``length`` events: a conversation, and after every 48 of its events a summary of all
    but the newest turn (ADK's token-threshold compaction, which rolls the summaries up)."""
    session = await service.create_session(app_name=APP, user_id=USER, session_id=sid)
    raw: list[Event] = []
    while len(session.events) < length:
        raw.append(await service.append_event(session, make_adk_event(len(raw))))
        if len(raw) % SUMMARY_EVERY == 0 and len(session.events) < length:
            text = f"summary of events 0-{len(raw) - 5}"
            await service.append_event(
                session, summary_event(raw[0].timestamp, raw[-5].timestamp, text)
            )
    return session


def stats(samples_ns: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(samples_ns),
        "p50_ms": timing.percentile(samples_ns, 50) / 1e6,
        "p90_ms": timing.percentile(samples_ns, 90) / 1e6,
    }


async def timed_read(read: Callable[[], Awaitable[Any]]) -> tuple[int, int]:
    """Nanoseconds of one read, the collector run first (over what is not frozen: see
    :func:`at_length`); and how many events it returned."""
    gc.collect()
    start = time.perf_counter_ns()
    got = await read()
    taken = time.perf_counter_ns() - start
    return taken, len(got.events)


async def at_length(
    stores: Stores, scratch: dict[str, Any], length: int, plan: Plan, with_sqlite: bool
) -> dict[str, Any]:
    """Seed every store's sessions of ``length`` events, time reads, then appends."""
    count = math.ceil(plan.appends / max(1, length // 10))  # each grows by <= 10 %
    sessions: dict[str, list[Any]] = {}
    appenders = stores.appenders(with_sqlite)
    for name, (service, make) in appenders.items():
        progress(f"{length:,} events: seeding {count} {name} session(s)")

        def seeder(i: int, s: Any = service, m: Any = make, n: str = name) -> Any:
            return lambda: seed_session(s, APP, USER, length, m, session_id=f"{n}-{length}-{i}")

        calls = [seeder(i) for i in range(count)]
        chunk = 1 if name == "sqlite" else 16  # SQLite takes one writer at a time
        sessions[name] = await in_chunks(calls, f"{name} sessions", chunk, lambda _: None)
    compacted = await seed_compacted(stores.adk, f"compacted-{length}", length)

    rounds = plan.read_rounds(length)
    adk_sessions, cfg = sessions["adk"], CompactedReads(compaction=COMPACTION)
    # Warm read n (0: the warm-up) is of session n + 1 (the cold reads' is 0), as far as
    # there are sessions, so that each grows by as few events as can be.
    warm_sessions = [adk_sessions[(n + 1) % count] for n in range(rounds + 1)]
    for session in {id(s): s for s in warm_sessions}.values():
        await stores.warm.get_session(**ids(session))  # fills the cache

    async def warm(call_no: int) -> tuple[int, int]:
        session = warm_sessions[call_no]
        await stores.adk.append_event(session, make_adk_event(len(session.events)))
        return await timed_read(lambda: stores.warm.get_session(**ids(session)))

    reads: dict[str, Callable[[int], Awaitable[tuple[int, int]]]] = {
        "cold": lambda _: timed_read(lambda: stores.adk.get_session(**ids(adk_sessions[0]))),
        "warm": warm,
        "compacted": lambda _: timed_read(
            lambda: stores.adk.get_session(**ids(compacted), config=cfg)
        ),
    }
    if with_sqlite:
        reads["sqlite"] = lambda _: timed_read(
            lambda: stores.sqlite.get_session(**ids(sessions["sqlite"][0]))
        )
    progress(f"{length:,} events: {rounds} rounds of reads")
    read_ns: dict[str, list[int]] = {name: [] for name in reads}
    read_sizes: dict[str, list[int]] = {name: [] for name in reads}
    with timing.settled_gc():  # the seeded sessions frozen: each read's collection is short
        for round_no in range(-1, rounds):  # round -1: warm-up
            for name in timing.rotate(list(reads), max(0, round_no)):
                taken, size = await reads[name](round_no + 1)
                if round_no >= 0:
                    read_ns[name].append(taken)
                    read_sizes[name].append(size)

    progress(f"{length:,} events: {plan.appends} appends per store, interleaved")
    for name, (service, make) in appenders.items():
        for i in range(plan.warmup):
            await service.append_event(scratch[name], make(i))
    append_ns: dict[str, list[int]] = {name: [] for name in appenders}
    with timing.settled_gc():
        for i in range(plan.appends):
            for name in timing.rotate(list(appenders), i):
                service, make = appenders[name]
                session = sessions[name][i % count]
                event = make(len(session.events))
                start = time.perf_counter_ns()
                await service.append_event(session, event)
                append_ns[name].append(time.perf_counter_ns() - start)
    return {
        "events": length,
        "rounds": rounds,
        "append": {name: {**stats(ns), "sessions": count} for name, ns in append_ns.items()},
        "read": {
            name: {**stats(ns), "events_read": [min(read_sizes[name]), max(read_sizes[name])]}
            for name, ns in read_ns.items()
        },
    }


def sqlite_dir(given: str | None) -> str | None:
    if given:
        return given
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


async def run(url: str, plan: Plan, where: str | None, sqlite_max: int) -> dict[str, Any]:
    client = Redis.from_url(url)
    prefix = unique_prefix("plots")
    off = SessionServiceConfig(key_prefix=prefix, read_cache_bytes=0)
    with tempfile.TemporaryDirectory(dir=where, prefix="ras-plots-") as tmp:
        sqlite = DatabaseSessionService(f"sqlite+aiosqlite:///{os.path.join(tmp, 'adk.db')}")
        stores = Stores(
            CoreService(client, config=off),
            AdkService(client, config=off),
            AdkService(client, config=off.model_copy(update={"read_cache_bytes": CACHE})),
            sqlite,
        )
        try:
            env = await report.server_environment(
                client,
                plan=plan.name,
                # The day the numbers were taken: a chart outlives the version it measured.
                drawn=time.strftime("%Y-%m-%d", time.gmtime()),
                google_adk=version("google-adk"),
                sqlalchemy=version("sqlalchemy"),
                aiosqlite=version("aiosqlite"),
                sqlite=sqlite3.sqlite_version,
                sqlite_on=where or tempfile.gettempdir(),
                sqlite_fs=report.file_system(where or tempfile.gettempdir()),
            )
            scratch = {
                name: await service.create_session(
                    app_name=APP, user_id=USER, session_id=f"scratch-{uuid.uuid4().hex[:6]}"
                )
                for name, (service, _) in stores.appenders().items()
            }
            rows = []
            for length in plan.lengths:
                row = await at_length(stores, scratch, length, plan, length <= sqlite_max)
                rows.append(row)
                line = ", ".join(f"{k} {v['p50_ms']:.3f}" for k, v in row["append"].items())
                progress(f"{length:,} events: append p50 ms: {line}")
                line = ", ".join(f"{k} {v['p50_ms']:.3f}" for k, v in row["read"].items())
                progress(f"{length:,} events: get_session p50 ms: {line}")
        finally:
            await sqlite.close()
            await client.aclose()
    return {
        "environment": env,
        "plan": {**plan.__dict__, "sqlite_max": sqlite_max},
        "rows": rows,
    }


# -- the figures -----------------------------------------------------------------------------


def command(args: Any) -> str:
    """The command that makes these figures again (what changes the numbers)."""
    flags = [
        *(["--quick"] if args.quick else []),
        *(["--sqlite-max", str(args.sqlite_max)] if args.sqlite_max else []),
        *(["--sqlite-dir", args.sqlite_dir] if args.sqlite_dir else []),
    ]
    return " ".join([".venv/bin/python -m benchmarks.plots", *flags])


def series(result: dict[str, Any], kind: str, names: dict[str, str]) -> list[svg.Series]:
    out = []
    for name, label in names.items():
        points = [
            (float(row["events"]), row[kind][name]["p50_ms"])
            for row in result["rows"]
            if name in row[kind]
        ]
        color, marker = LOOKS[name]
        out.append(svg.Series(label, points, name == "sqlite", color, marker))
    return out


def caption(result: dict[str, Any], kind: str, names: dict[str, str], how: str) -> str:
    env = result["environment"]
    numbers = "; ".join(
        f"{name}: "
        + ", ".join(
            f"{row['events']:,} events {row[kind][name]['p50_ms']:.3f} ms"
            for row in result["rows"]
            if name in row[kind]
        )
        for name in names
    )
    return (
        f"Made by: {result['command']} ({how}){_on(env)}. "
        f"{report.environment_lines('', env)[1]}; google-adk {env['google_adk']}, "
        f"SQLAlchemy {env['sqlalchemy']}, aiosqlite {env['aiosqlite']}, SQLite {env['sqlite']} "
        f"(file on {env['sqlite_on']}). p50 in ms per series: {numbers}."
    )


def _on(env: dict[str, Any]) -> str:
    """`` on <day>`` the numbers were taken (results from before it was recorded: none)."""
    return f" on {env['drawn']}" if env.get("drawn") else ""


def capped_note(result: dict[str, Any]) -> list[str]:
    cap = result["plan"]["sqlite_max"]
    lengths = result["plan"]["lengths"]
    if all(length <= cap for length in lengths):
        return []
    return [f"DatabaseSessionService stops at {cap:,} events (--sqlite-max): seeding it is slow."]


def figures(result: dict[str, Any]) -> dict[str, svg.Chart]:
    env = result["environment"]
    plan = result["plan"]
    where = f"Redis {env['redis_servers']['redis']} on loopback (no persistence)"
    sqlite_note = (
        f"SQLite file on {env['sqlite_on']} ({env['sqlite_fs']}); Redis keeps no files here"
        + (": neither store waits for a disk." if env["sqlite_fs"] == "tmpfs" else ".")
    )
    foot = (
        f"Made by {result['command']}{_on(env)}. {report.environment_lines('', env)[1]}; "
        f"google-adk {env['google_adk']}, SQLAlchemy {env['sqlalchemy']}, aiosqlite "
        f"{env['aiosqlite']}, SQLite {env['sqlite']}."
    )
    append = svg.Chart(
        title="append_event latency against session length",
        subtitle=f"p50 of {plan['appends']} appends per point, stores in turn; {where}",
        x_label="events already in the session (log scale)",
        y_label="append_event p50 (ms)",
        series=series(result, "append", APPENDERS),
        notes=[
            "Every store appends the same events (a tool-using ADK conversation; the core "
            "service gets them as core models), one at a time, in one process; each session "
            "grows by at most 10 % while measured.",
            sqlite_note,
            *capped_note(result),
            foot,
        ],
        desc=caption(result, "append", APPENDERS, "append-latency.svg"),
    )
    counts = sorted({r["rounds"] for r in result["rows"]})
    rounds = "-".join(map(str, dict.fromkeys([counts[0], counts[-1]])))
    read = svg.Chart(
        title="get_session latency against session length",
        subtitle=f"p50 of {rounds} interleaved rounds per point; {where}",
        x_label="events in the session (log scale)",
        y_label="get_session p50 (ms, log scale)",
        series=series(result, "read", READERS),
        log_y=True,
        notes=[
            "Every session holds the same events (a tool-using ADK conversation). Warm: a "
            "second service with read_cache_bytes=256 MiB reads after the first appended one "
            "event (it fetches and parses only that one). CompactedReads: a rolling compaction "
            f"summary every {SUMMARY_EVERY} events, as ADK's token-threshold compaction "
            "writes; the read returns the newest summary and the events after it (below "
            f"{SUMMARY_EVERY + 1} events there is none yet: a full read).",
            sqlite_note,
            *capped_note(result),
            foot,
        ],
        desc=caption(result, "read", READERS, "read-latency.svg"),
    )
    return {"append-latency.svg": append, "read-latency.svg": read}


def render(result: dict[str, Any]) -> str:
    env = result["environment"]
    lines = [
        *report.environment_lines(f"redis-agent-sessions plots ({env['plan']} run)", env),
        f"google-adk {env['google_adk']}, SQLAlchemy {env['sqlalchemy']}, aiosqlite "
        f"{env['aiosqlite']}, SQLite {env['sqlite']} (file on {env['sqlite_on']})",
        "",
    ]
    for kind, names, what in (
        ("append", APPENDERS, "append_event"),
        ("read", READERS, "get_session"),
    ):
        table = report.Table((f"{what} p50 (p90), ms", *(f"{n:,} ev" for n in _lengths(result))))
        for name, label in names.items():
            cells = [
                f"{r[kind][name]['p50_ms']:.3f} ({r[kind][name]['p90_ms']:.3f})"
                if name in r[kind]
                else "-"
                for r in result["rows"]
            ]
            table.add(f"{name}: {label}", *cells)
        lines += [table.render(), ""]
    sizes = ", ".join(
        f"{r['events']:,}: {'-'.join(map(str, r['read']['compacted']['events_read']))}"
        for r in result["rows"]
    )
    lines.append(f"events a compacted read returned, by length: {sizes}")
    lines += [f"wrote {path}" for path in result["files"]]
    lines.append(f"run time {result['seconds']:.0f} s")
    return "\n".join(lines)


def _lengths(result: dict[str, Any]) -> list[int]:
    return [r["events"] for r in result["rows"]]


def main(argv: Sequence[str] | None = None) -> int:
    started = time.perf_counter()
    parser = report.parser(__doc__)
    parser.add_argument("--out", default="docs/img", help="where the SVGs go (default docs/img)")
    parser.add_argument(
        "--sqlite-max",
        type=int,
        default=0,
        metavar="N",
        help="DatabaseSessionService only up to N events (default: every length)",
    )
    parser.add_argument(
        "--sqlite-dir", help="where the SQLite file goes (default /dev/shm: tmpfs, like Redis)"
    )
    report.add_flags(parser, quick="10 to 1,000 events, fewer samples")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    cap = args.sqlite_max or max(plan.lengths)
    with servers.redis7(name="plots") as node:
        result = asyncio.run(run(node.url, plan, sqlite_dir(args.sqlite_dir), cap))
    result["command"] = command(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result["files"] = []
    for name, chart in figures(result).items():
        path = out / name
        path.write_text(svg.render(chart), encoding="utf-8")
        result["files"].append(str(path))
    result["seconds"] = time.perf_counter() - started
    report.emit(result, render, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
