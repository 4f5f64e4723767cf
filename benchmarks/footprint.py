"""What the store takes of Redis' memory (not a test): a session, an event and a memory entry,
as ``used_memory`` grows (what ``maxmemory`` counts), for sizing a deployment.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.footprint            # ~20 seconds
    .venv/bin/python -m benchmarks.footprint --quick    # smoke run, a few seconds
    .venv/bin/python -m benchmarks.footprint --url redis://127.0.0.1:6379/0 --json out.json

Without ``--url`` it starts a throwaway Redis 7 (sessions, the plain memory backend) and a
Redis 8.2 with RediSearch (the search backend) on free loopback ports and always stops them;
with ``--url`` (flushed first: give it an empty server) it measures what that server has.

Each figure is the growth of ``INFO memory``'s ``used_memory`` over many objects, divided by
their number, so it includes the index entries and the server's per-key overhead:

- a session: ``--sessions`` sessions of 100 users, each created with 3 session-state keys and
  the service's TTL, no events;
- an event: then 20 turns appended to each (a user or agent turn of about 200 characters of
  text and a one-key state delta, about 450 bytes of event JSON);
- a memory entry: those sessions added to memory (one entry per event), per backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from benchmarks.harness import report, servers
from redis_agent_sessions import (
    Content,
    Event,
    EventActions,
    Part,
    RedisMemoryService,
    RedisSessionService,
    SessionServiceConfig,
)

APP = "bench_footprint"
TURNS = 20
progress = report.Progress("footprint")
_WORDS = [
    "the",
    "flight",
    "to",
    "Lisbon",
    "leaves",
    "at",
    "nine",
    "and",
    "the",
    "window",
    "seat",
    "is",
    "booked",
    "for",
    "Ravi",
]


def turn(i: int) -> Event:
    text = " ".join(_WORDS[(i + k) % len(_WORDS)] for k in range(40))[:200]
    return Event(
        author="user" if i % 2 else "agent",
        content=Content(parts=[Part(text=f"{i}: {text}")]),
        actions=EventActions(state_delta={"booking_step": f"step-{i}"}),
    )


async def used(client: Redis) -> int:
    return int((await client.info("memory"))["used_memory"])


async def measure(url: str, search_url: str | None, sessions: int) -> dict[str, Any]:
    client = Redis.from_url(url)
    service = RedisSessionService(client, config=SessionServiceConfig(ttl_seconds=86400))
    try:
        await client.flushall()
        # The 100 connections the batches use, open first: each takes server memory too.
        await asyncio.gather(*(client.ping() for _ in range(100)))
        start = await used(client)
        made = []
        for at in range(0, sessions, 100):
            made += await asyncio.gather(
                *(
                    service.create_session(
                        app_name=APP,
                        user_id=f"user{n % 100}",
                        state={"booking_step": "start", "origin": "LIS", "seats": 1},
                    )
                    for n in range(at, min(at + 100, sessions))
                )
            )
        created = await used(client)
        progress(f"{sessions:,} sessions created")
        raw = 0
        for i in range(TURNS):
            for at in range(0, sessions, 100):
                batch = made[at : at + 100]
                appended = await asyncio.gather(*(service.append_event(s, turn(i)) for s in batch))
                raw += sum(len(e.model_dump_json(exclude_none=True)) for e in appended)
        appended_at = await used(client)
        progress(f"{TURNS * sessions:,} events appended")
        entries = {"plain": await _memory_entry(client, made)}
        env = await report.server_environment(client)
    finally:
        await client.aclose()
    if search_url:
        search = Redis.from_url(search_url)
        try:
            await search.flushall()
            # Memory entries come from the session objects: the sessions need not be there.
            entries["search"] = await _memory_entry(search, made)
        finally:
            await search.aclose()
    events = TURNS * sessions
    return {
        "environment": env,
        "sessions": sessions,
        "events": events,
        "bytes": {
            "session": (created - start) / sessions,
            "event": (appended_at - created) / events,
            "event_json": raw / events,
            "memory_entry": entries,
        },
    }


async def _memory_entry(client: Redis, made: list[Any]) -> float:
    memory = RedisMemoryService(client)
    before = await used(client)
    for s in made:
        await memory.add_session_to_memory(s)
    backend = await memory.backend()
    count = sum(len(s.events) for s in made)
    progress(f"{count:,} memory entries ({backend} backend)")
    return (await used(client) - before) / count


def text(result: dict[str, Any]) -> str:
    lines = report.environment_lines(
        "footprint: used_memory per object (what maxmemory counts)", result["environment"]
    )
    b = result["bytes"]
    table = report.Table(("object", "bytes", "how measured"))
    table.add("session", f"{b['session']:,.0f}", f"{result['sessions']:,} sessions, 3 state keys")
    table.add(
        "event",
        f"{b['event']:,.0f}",
        f"{result['events']:,} turns, {b['event_json']:,.0f} B of event JSON each",
    )
    for backend, size in b["memory_entry"].items():
        table.add(f"memory entry ({backend})", f"{size:,.0f}", "one per event with text")
    lines.append(table.render())
    lines.append(
        "a session of N events: session + N x event; a user's memory: entries x entry size"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = report.add_flags(report.parser(__doc__), url=True, quick="a few seconds")
    parser.add_argument("--sessions", type=int, default=None, help="sessions (2,000)")
    args = parser.parse_args(argv)
    sessions = args.sessions or (200 if args.quick else 2000)
    if args.url:
        result = asyncio.run(measure(args.url, None, sessions))
    else:
        with servers.redis7() as r7, servers.redis8(search=True) as r8:
            result = asyncio.run(measure(r7.url, r8.url, sessions))
    report.emit(result, text, args.json)


if __name__ == "__main__":
    main()
