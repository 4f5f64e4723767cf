"""Benchmark of the google-adk extra (not a test): what ADK types cost on top of the core.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.adk [--events 1000] [--rounds 30]
    .venv/bin/python -m benchmarks.adk --quick       # 5 rounds
    .venv/bin/python -m benchmarks.adk --json out.json

Starts a throwaway Redis 7, fills one session with 1,000 ADK events shaped like a
tool-using conversation, and measures, in interleaved rounds (the garbage collector run
before each call, what a call returns kept until it is timed, as a read keeps it):

* ``get_session`` through the extra, full (no cache);
* the parse floor: ``Event.model_validate`` of the same stored events (dicts already
  decoded), the validated events kept in a list, as a read must;
* the same loop dropping each event at once (reusing freed memory: cheaper; how the floor
  was measured before 2026-11-23), and ``Event.model_validate_json`` of the raw JSON;

then ``get_session`` with ``num_recent_events=20``, and ``append_event`` through the extra
next to the core service's, same client, same events, alternating.

and, beside them, the same read validating every event (``validate_reads=True``, how every
read worked before the trusted decode), and the core service reading the same events as
core models next to ``model_validate_json`` of those.

Targets: full read <= 1.2x the floor (events kept; issue 4); full read <= 0.5x
``Event.model_validate_json`` of the same events, kept, for ADK's models and for the core
models (issue 26); last 20 <= 2 ms; append <= 1.3x core. Ratios are taken within each
round, then the median of the rounds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import orjson
from google.adk.events import Event
from google.adk.sessions.base_session_service import GetSessionConfig
from redis.asyncio import Redis

from benchmarks.harness import internals, report, servers, timing
from benchmarks.harness.workloads import make_adk_event, unique_prefix
from redis_agent_sessions import Event as CoreEvent
from redis_agent_sessions import RedisSessionService as CoreService
from redis_agent_sessions import SessionServiceConfig
from redis_agent_sessions.adk import RedisSessionService, _adk_codec
from redis_agent_sessions.sessions import _Codec

APP, USER, SID = "bench", "u", "big"
TARGET_FULL_VS_PARSE = 1.2
TARGET_LAST20_MS = 2.0
TARGET_APPEND = 1.3
TARGET_READ_VS_JSON = 0.5
WARMUP = 3

progress = report.Progress("adk")


async def bench(url: str, n_events: int, rounds: int) -> dict[str, Any]:
    client = Redis.from_url(url)
    # Cold reads: the cache (on by default in the extra) off, so every read parses it all.
    config = SessionServiceConfig(key_prefix=unique_prefix("adk"), read_cache_bytes=0)
    adk = RedisSessionService(client, config=config)
    core = CoreService(client, config=config)
    validating = RedisSessionService(
        client, config=config.model_copy(update={"validate_reads": True})
    )
    default = RedisSessionService(client, config=SessionServiceConfig(key_prefix=config.key_prefix))
    try:
        env = await report.server_environment(client)
        progress(f"seeding {n_events:,} ADK events")
        session = await adk.create_session(app_name=APP, user_id=USER, session_id=SID)
        for i in range(n_events):
            await adk.append_event(session, make_adk_event(i))
        entries: Any = await client.xrange(internals.events_key(adk, APP, USER, SID))
        raws: list[bytes] = [fields[b"event"] for _, fields in entries]
        dicts = [orjson.loads(r) for r in raws]
        size = sum(map(len, raws)) / len(raws)
        ids = {"app_name": APP, "user_id": USER, "session_id": SID}
        progress(f"seeding the same {n_events:,} events as core models")
        core_ids = {**ids, "session_id": "core"}
        core_session = await core.create_session(**core_ids)
        for d in dicts:
            await core.append_event(core_session, CoreEvent.model_validate(d))
        core_raws: list[bytes] = [
            fields[b"event"]
            for _, fields in await client.xrange(internals.events_key(core, APP, USER, "core"))
        ]

        def dropped() -> None:
            for d in dicts:
                Event.model_validate(d)

        def dropped_json() -> None:
            for r in raws:
                Event.model_validate_json(r)

        # The plans the services decode with (the core one is built here: its service validates).
        adk_plan, core_plan = _adk_codec().plan, _Codec().plan
        progress(f"full reads and parse floors: {rounds} interleaved rounds")
        reads = await timing.interleave(
            {
                "read": lambda: adk.get_session(**ids),
                "validating": lambda: validating.get_session(**ids),
                "default": lambda: default.get_session(**ids),
                "parse": lambda: [Event.model_validate(d) for d in dicts],
                "dropped": dropped,
                "json": dropped_json,
                "json_kept": lambda: [Event.model_validate_json(r) for r in raws],
                "core_read": lambda: core.get_session(**core_ids),
                "core_json": lambda: [CoreEvent.model_validate_json(r) for r in core_raws],
                "plan": lambda: [adk_plan.decode(r) for r in raws],
                "core_plan": lambda: [core_plan.decode(r) for r in core_raws],
            },
            rounds,
            warmup_rounds=WARMUP,
            collect_each=True,
        )

        last20 = GetSessionConfig(num_recent_events=20)

        async def read_last20() -> Any:
            return await adk.get_session(**ids, config=last20)

        progress("last 20 events")
        last20_ns = await timing.time_calls(read_last20, rounds * 10, WARMUP)

        # Appends: both services on the same client, alternating, onto sessions of equal length.
        adk_s = await adk.create_session(app_name=APP, user_id=USER, session_id="a-adk")
        core_s = await core.create_session(app_name=APP, user_id=USER, session_id="a-core")
        n_append = rounds * 20
        adk_events = [make_adk_event(i) for i in range(n_append + WARMUP)]
        core_events = [
            CoreEvent.model_validate(e.model_dump(mode="json", exclude_none=True))
            for e in adk_events
        ]
        progress(f"{n_append} appends through each service, alternating")
        appends = timing.Rounds()
        clock = time.perf_counter_ns
        with timing.settled_gc():
            for i in range(n_append + WARMUP):
                start = clock()
                await adk.append_event(adk_s, adk_events[i])
                mid = clock()
                await core.append_event(core_s, core_events[i])
                end = clock()
                if i >= WARMUP:
                    appends.add("extra", i - WARMUP, [mid - start])
                    appends.add("core", i - WARMUP, [end - mid])
    finally:
        await client.aclose()
    return {
        "environment": env,
        "events": n_events,
        "rounds": rounds,
        "event_json_bytes": size,
        "read_ms": reads.p50_ms("read"),
        "parse_ms": reads.p50_ms("parse"),
        "parse_dropped_ms": reads.p50_ms("dropped"),
        "parse_json_ms": reads.p50_ms("json"),
        "read_vs_parse": reads.ratio("read", "parse"),
        "read_vs_dropped": reads.ratio("read", "dropped"),
        "read_vs_json": reads.ratio("read", "json"),
        "validating_ms": reads.p50_ms("validating"),
        "default_ms": reads.p50_ms("default"),
        "json_kept_ms": reads.p50_ms("json_kept"),
        "read_vs_json_kept": reads.ratio("read", "json_kept"),
        "validating_vs_json_kept": reads.ratio("validating", "json_kept"),
        "core_read_ms": reads.p50_ms("core_read"),
        "core_json_ms": reads.p50_ms("core_json"),
        "core_read_vs_json": reads.ratio("core_read", "core_json"),
        "plan_vs_json_kept": reads.ratio("plan", "json_kept"),
        "core_plan_vs_json": reads.ratio("core_plan", "core_json"),
        "last20_ms": timing.percentile(last20_ns, 50) / 1e6,
        "append_extra_ms": appends.p50_ms("extra"),
        "append_core_ms": appends.p50_ms("core"),
        "append_ratio": appends.ratio("extra", "core"),
    }


def render(r: dict[str, Any]) -> str:
    n = r["events"]

    def verdict(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    rows = [
        (f"parse floor: Event.model_validate x{n} (dicts), kept", f"{r['parse_ms']:8.2f} ms", ""),
        ("  the same, each event dropped at once", f"{r['parse_dropped_ms']:8.2f} ms", ""),
        (
            f"JSON floor: Event.model_validate_json x{n}, dropped",
            f"{r['parse_json_ms']:8.2f} ms",
            "",
        ),
        (
            "get_session full, cache off",
            f"{r['read_ms']:8.2f} ms",
            f"{r['read_vs_parse']:.2f}x parse floor (target <= {TARGET_FULL_VS_PARSE}x: "
            f"{verdict(r['read_vs_parse'] <= TARGET_FULL_VS_PARSE)}), "
            f"{r['read_vs_dropped']:.2f}x dropped, {r['read_vs_json']:.2f}x JSON floor",
        ),
        (f"JSON floor, kept: Event.model_validate_json x{n}", f"{r['json_kept_ms']:8.2f} ms", ""),
        (
            "get_session full, trusted decode (default)",
            f"{r['read_ms']:8.2f} ms",
            f"{r['read_vs_json_kept']:.2f}x JSON floor kept (target <= {TARGET_READ_VS_JSON}x: "
            f"{verdict(r['read_vs_json_kept'] <= TARGET_READ_VS_JSON)})",
        ),
        (
            "get_session full, validate_reads=True",
            f"{r['validating_ms']:8.2f} ms",
            f"{r['validating_vs_json_kept']:.2f}x JSON floor kept",
        ),
        (
            "get_session full, default config (read cache on, warm)",
            f"{r['default_ms']:8.2f} ms",
            "",
        ),
        (
            f"core models: model_validate_json x{n}, kept",
            f"{r['core_json_ms']:8.2f} ms",
            "",
        ),
        (
            "core models: get_session full",
            f"{r['core_read_ms']:8.2f} ms",
            f"{r['core_read_vs_json']:.2f}x their JSON floor (target <= {TARGET_READ_VS_JSON}x: "
            f"{verdict(r['core_read_vs_json'] <= TARGET_READ_VS_JSON)})",
        ),
        (
            "decoding alone: trusted-decode plan / model_validate_json, kept",
            "",
            f"ADK models {r['plan_vs_json_kept']:.2f}x, core models {r['core_plan_vs_json']:.2f}x",
        ),
        (
            "get_session num_recent_events=20",
            f"{r['last20_ms']:8.3f} ms",
            f"(target <= {TARGET_LAST20_MS:g} ms: {verdict(r['last20_ms'] <= TARGET_LAST20_MS)})",
        ),
        ("append_event via extra", f"{r['append_extra_ms']:8.3f} ms", ""),
        (
            "append_event via core",
            f"{r['append_core_ms']:8.3f} ms",
            f"extra/core {r['append_ratio']:.2f}x (target <= {TARGET_APPEND}x: "
            f"{verdict(r['append_ratio'] <= TARGET_APPEND)})",
        ),
    ]
    width = max(len(label) for label, _, _ in rows)
    return "\n".join(
        [
            *report.environment_lines("redis-agent-sessions ADK benchmark", r["environment"]),
            "",
            f"{n} ADK events, {r['event_json_bytes']:.0f} bytes of JSON each on average; "
            f"medians of {r['rounds']} interleaved rounds (ratios: median of per-round ratios)",
            *(f"  {label.ljust(width)} {value}  {note}".rstrip() for label, value, note in rows),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = report.parser(__doc__)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=None, help="default 30 (--quick: 5)")
    report.add_flags(parser, quick="5 rounds instead of 30")
    args = parser.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 30)
    with servers.redis7() as node:
        result = asyncio.run(bench(node.url, args.events, rounds))
    report.emit(result, render, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
