"""Benchmark of ADK Runner turns on long sessions (not a test): compacted reads vs full reads.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.adk_turns            # 100 and 10,000 events, ~3 min
    .venv/bin/python -m benchmarks.adk_turns --quick    # 100 and 1,000 events, < 1 min
    .venv/bin/python -m benchmarks.adk_turns --json -   # only the JSON result on stdout

It starts a throwaway Redis 7 and uses the scripted app of tests/adk_compaction_app.py: the
app whose LLM requests tests/test_adk_compacted_reads.py proves identical with and without
compacted reads.

Seeding: one conversation is played through a real Runner on our store, with compacted
reads (so seeding stays fast), until it holds at least N events; its events are then
copied, by each store's own ``append_event``, into one fresh session per contender:

* ``redis, compacted``: our drop-in with ``RunConfig(get_session_config=CompactedReads(..))``;
* ``redis, full``: our drop-in, every event read (the default);
* ``sqlite``: ADK's ``DatabaseSessionService`` on ``sqlite+aiosqlite`` in a temp directory.

Timed: whole Runner turns (``run_async`` to its last event: the session read, the
scripted model, every append, the compaction check and any summary it writes), one at a
time, contenders interleaved turn by turn so that drift on a shared machine hits them
alike, after warm-up turns. Every turn grows each session by the same events. Reported:
median and p90 (``benchmarks.harness.timing.percentile``) per contender and size, and the
ratios the issue asks for.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from google.adk.sessions import BaseSessionService, DatabaseSessionService
from redis.asyncio import Redis

from benchmarks.harness import internals, report, servers, timing
from benchmarks.harness.workloads import adk_compaction_app
from redis_agent_sessions.adk import RedisSessionService

app: Any = adk_compaction_app()
CONTENDERS = ("redis, compacted", "redis, full", "sqlite")

progress = report.Progress("adk_turns")


async def seed(service: RedisSessionService, mode: str, size: int, sid: str) -> int:
    """Play turns until the session holds ``size`` events; the next turn number."""
    conversation = app.Conversation(service, mode, compacted=True)
    await service.create_session(app_name=app.APP_NAME, user_id=app.USER_ID, session_id=sid)
    stream = internals.events_key(service, app.APP_NAME, app.USER_ID, sid)
    client = internals.raw_client(service)
    n = 1
    while await client.xlen(stream) < size:
        await conversation.turn(sid, n)
        n += 1
        if n % 500 == 0:
            progress(f"seeding {mode}: turn {n:,}")
    await conversation.close()
    return n


async def copy(source: Any, target: BaseSessionService, sid: str) -> None:
    session = await target.create_session(
        app_name=app.APP_NAME, user_id=app.USER_ID, session_id=sid
    )
    for event in source.events:
        await target.append_event(session, event.model_copy(deep=True))


async def bench_size(
    redis_service: RedisSessionService,
    sqlite: DatabaseSessionService,
    mode: str,
    size: int,
    turns: int,
    warmup: int,
) -> dict[str, Any]:
    tag = f"{mode}-{size}"
    next_turn = await seed(redis_service, mode, size, f"seed-{tag}")
    source = await redis_service.get_session(
        app_name=app.APP_NAME, user_id=app.USER_ID, session_id=f"seed-{tag}"
    )
    assert source is not None
    stores: dict[str, tuple[BaseSessionService, bool]] = {
        "redis, compacted": (redis_service, True),
        "redis, full": (redis_service, False),
        "sqlite": (sqlite, False),
    }
    sids = {name: f"{name}-{tag}".replace(", ", "-") for name in stores}
    conversations = {}
    for name, (service, compacted) in stores.items():
        progress(f"{tag}: copying {len(source.events):,} events into {name}")
        await copy(source, service, sids[name])
        conversations[name] = app.Conversation(service, mode, compacted=compacted)
    samples: dict[str, list[float]] = {name: [] for name in stores}
    read_sizes: dict[str, int] = {}
    for i in range(warmup + turns):
        for name, conversation in conversations.items():
            started = time.perf_counter()
            await conversation.turn(sids[name], next_turn + i)
            elapsed = (time.perf_counter() - started) * 1000
            if i >= warmup:
                samples[name].append(elapsed)
    for name, conversation in conversations.items():
        await conversation.close()
        service, _compacted = stores[name]
        read = await service.get_session(
            app_name=app.APP_NAME,
            user_id=app.USER_ID,
            session_id=sids[name],
            config=conversation.run_config.get_session_config,
        )
        assert read is not None
        read_sizes[name] = len(read.events)
    return {
        "mode": mode,
        "events": len(source.events),
        "turns": turns,
        "results": {
            name: {
                "p50_ms": timing.percentile(s, 50),
                "p90_ms": timing.percentile(s, 90),
                "events_read": read_sizes[name],
            }
            for name, s in samples.items()
        },
    }


async def run(
    url: str, sizes: list[int], modes: list[str], turns: int, warmup: int
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        client = Redis.from_url(url)
        redis_service = RedisSessionService(client)
        sqlite = DatabaseSessionService(f"sqlite+aiosqlite:///{os.path.join(tmp, 'adk.db')}")
        rows = []
        try:
            env = await report.server_environment(client)
            for mode in modes:
                for size in sizes:
                    rows.append(await bench_size(redis_service, sqlite, mode, size, turns, warmup))
        finally:
            await sqlite.close()
            await client.aclose()
    return {"environment": env, "turns_per_case": turns, "warmup": warmup, "rows": rows}


def render(result: dict[str, Any]) -> str:
    lines = [
        *report.environment_lines("redis-agent-sessions ADK Runner turns", result["environment"]),
        "",
        "Runner turn time, median (p90) in ms; events read by the turn's get_session",
        "",
    ]
    lines.append(f"| mode | events | {' | '.join(CONTENDERS)} |")
    lines.append("|---|---|" + "---|" * len(CONTENDERS))
    for row in result["rows"]:
        cells = [
            f"{r['p50_ms']:.1f} ({r['p90_ms']:.1f}); {r['events_read']:,} read"
            for r in (row["results"][name] for name in CONTENDERS)
        ]
        lines.append(f"| {row['mode']} | {row['events']:,} | {' | '.join(cells)} |")
    lines.append("")
    for mode in dict.fromkeys(row["mode"] for row in result["rows"]):
        rows = [row for row in result["rows"] if row["mode"] == mode]
        small, large = rows[0]["results"], rows[-1]["results"]
        ours = large["redis, compacted"]["p50_ms"]
        big, little = f"{rows[-1]['events']:,}", f"{rows[0]['events']:,}"
        lines.append(
            f"{mode}: compacted turn at {big} / at {little} events:"
            f" {ours / small['redis, compacted']['p50_ms']:.2f}x;"
            f" at {big}, full / compacted: {large['redis, full']['p50_ms'] / ours:.1f}x,"
            f" sqlite / compacted: {large['sqlite']['p50_ms'] / ours:.1f}x"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = report.parser(__doc__)
    report.add_flags(parser, quick="100 and 1,000 events")
    parser.add_argument("--turns", type=int, default=15, help="timed turns per case")
    parser.add_argument("--modes", default="tokens,window", help="compaction modes to run")
    args = parser.parse_args(argv)
    sizes = [100, 1_000] if args.quick else [100, 10_000]
    modes = [m for m in args.modes.split(",") if m in app.MODES]
    with servers.redis7() as node:
        result = asyncio.run(run(node.url, sizes, modes, args.turns, warmup=3))
    report.emit(result, render, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
