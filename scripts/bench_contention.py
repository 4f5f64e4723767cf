"""Benchmark (not a test): several writers appending to ONE session under the reject policy.

Usage::

    .venv/bin/python scripts/bench_contention.py            # ~1 minute
    .venv/bin/python scripts/bench_contention.py --quick    # smoke run
    .venv/bin/python scripts/bench_contention.py --json
    .venv/bin/python scripts/bench_contention.py --url redis://127.0.0.1:6379/0

For 2, 4 and 8 concurrent writers (asyncio tasks of one process, one client, as in a worker
serving several requests), each writer holds a session copy and appends realistic events
(text content, a state delta) for a fixed time. When an append raises StaleSessionError
the writer catches up and retries, at most 10 tries per event (then it gives up on that
event). Ways of catching up, each on a session that already holds ``--history`` events:

- ``reload``: ``get_session`` again (what a Runner-based worker does): reads the whole,
  growing history on every retry;
- ``reload+cache``: the same with the verified read cache on (``read_cache_bytes``), when the
  installed version has it;
- ``refresh``: ``refresh(session)``: reads only the events the copy lacks (on a single node,
  nothing: the refusal carried it).

The baseline is the same writers appending to distinct sessions (no contention). The target:
same-session appends/s with ``refresh`` >= 50% of the distinct-session figure, no writer
giving up, nothing lost (every acknowledged event is stored, once, and the count of stored
events adds up). Ratios are of figures measured in one run.

Also measured: one writer alone appending back to back to one session. Under the reject
policy each append to a session must follow the one before it (a writer must have seen
it), so no number of writers can take a session faster than one writer alone: that rate,
as a share of the distinct-session figure, is the ceiling for the same-session ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from redis.asyncio import Redis

import redis_agent_sessions

# scripts/bench.py, next to this file (on sys.path when this runs as a script).
from bench import make_event, throwaway_redis
from redis_agent_sessions import (
    RedisSessionService,
    Session,
    SessionServiceConfig,
    StaleSessionError,
)

APP = "contention_app"
WRITERS = (2, 4, 8)
MAX_TRIES = 10
TARGET_SHARE = 0.5


@dataclass
class Run:
    mode: str
    writers: int
    seconds: float
    appended: int
    stale: int
    gave_up: int
    per_second: float
    lost: int


async def _writer(
    service: RedisSessionService,
    session: Session,
    mode: str,
    deadline: float,
    acked: list[str],
    counts: dict[str, int],
) -> None:
    turn = len(session.events)
    invocation = str(uuid.uuid4())
    while time.perf_counter() < deadline:
        event = make_event(turn, invocation)
        turn += 1
        for _ in range(MAX_TRIES):
            try:
                await service.append_event(session, event)
            except StaleSessionError:
                counts["stale"] += 1
                if mode == "refresh":
                    await service.refresh(session)
                else:
                    fresh = await service.get_session(
                        app_name=APP, user_id=session.user_id, session_id=session.id
                    )
                    assert fresh is not None
                    session = fresh
                continue
            acked.append(event.id)
            break
        else:
            counts["gave_up"] += 1


async def _history(service: RedisSessionService, user: str, events: int) -> Session:
    session = await service.create_session(app_name=APP, user_id=user, state={"turn": 0})
    invocation = str(uuid.uuid4())
    for turn in range(events):
        await service.append_event(session, make_event(turn, invocation))
    return session


async def run_case(
    client: Redis, prefix: str, mode: str, writers: int, seconds: float, history: int
) -> Run:
    cache = mode.endswith("+cache")
    fields: dict[str, Any] = {"key_prefix": f"{prefix}-{mode}-{writers}".replace("+", "-")}
    if cache:
        fields["read_cache_bytes"] = 256 << 20
    service = RedisSessionService(client, config=SessionServiceConfig(**fields))
    distinct = mode == "distinct"
    sessions = [
        await _history(service, f"user-{i}", history) for i in range(writers if distinct else 1)
    ]
    copies = []
    for i in range(writers):
        base = sessions[i if distinct else 0]
        copy = await service.get_session(app_name=APP, user_id=base.user_id, session_id=base.id)
        assert copy is not None
        copies.append(copy)
    acked: list[str] = []
    counts = {"stale": 0, "gave_up": 0}
    started = time.perf_counter()
    deadline = started + seconds
    catch_up = "refresh" if mode in ("refresh", "distinct") else "reload"
    await asyncio.gather(*(_writer(service, c, catch_up, deadline, acked, counts) for c in copies))
    elapsed = time.perf_counter() - started
    lost = 0
    stored_ids: list[str] = []
    for s in sessions:
        got = await service.get_session(app_name=APP, user_id=s.user_id, session_id=s.id)
        assert got is not None
        stored_ids += [e.id for e in got.events[history:]]
    if sorted(stored_ids) != sorted(acked) or len(set(stored_ids)) != len(stored_ids):
        lost = len(set(acked) - set(stored_ids)) or abs(len(stored_ids) - len(acked))
    return Run(
        mode,
        writers,
        round(elapsed, 2),
        len(acked),
        counts["stale"],
        counts["gave_up"],
        round(len(acked) / elapsed, 1),
        lost,
    )


def has_cache() -> bool:
    return "read_cache_bytes" in SessionServiceConfig.model_fields


async def bench(url: str, seconds: float, history: int) -> dict[str, Any]:
    client = Redis.from_url(url)
    prefix = f"ras-contention-{uuid.uuid4().hex[:8]}"
    modes = ["distinct", "reload", *(["reload+cache"] if has_cache() else []), "refresh"]
    runs: list[Run] = []
    try:
        alone = await run_case(client, prefix, "distinct", 1, seconds, history)
        print(f"  one writer alone: {alone.per_second:8.1f} appends/s", file=sys.stderr)
        for writers in WRITERS:
            for mode in modes:
                run = await run_case(client, prefix, mode, writers, seconds, history)
                runs.append(run)
                print(f"  {mode:>13} x{writers}: {run.per_second:8.1f} appends/s, "
                      f"{run.stale} stale, {run.gave_up} gave up, {run.lost} lost",
                      file=sys.stderr)  # fmt: skip
    finally:
        async for key in client.scan_iter(match=f"{prefix}*", count=1000):
            await client.delete(key)
        await client.aclose()
    return {"runs": [asdict(r) for r in runs], "ratios": ratios(runs, alone)}


def ratios(runs: list[Run], alone: Run) -> dict[str, dict[str, float]]:
    """Same-session appends/s of each catch-up mode / distinct sessions, per writer count;
    ``ceiling``: one writer alone / distinct sessions."""
    out: dict[str, dict[str, float]] = {}
    for writers in WRITERS:
        base = next(r for r in runs if r.writers == writers and r.mode == "distinct")
        out[str(writers)] = {
            r.mode: round(r.per_second / base.per_second, 3)
            for r in runs
            if r.writers == writers and r.mode != "distinct"
        }
        out[str(writers)]["ceiling"] = round(alone.per_second / base.per_second, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a Redis to use (default: a throwaway redis-server)")
    parser.add_argument("--quick", action="store_true", help="short runs (smoke test)")
    parser.add_argument("--history", type=int, default=None, help="events already stored")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    seconds = 1.0 if args.quick else 4.0
    history = args.history if args.history is not None else (200 if args.quick else 1000)

    def run(url: str) -> dict[str, Any]:
        return asyncio.run(bench(url, seconds, history))

    if args.url:
        result = run(args.url)
    else:
        with throwaway_redis() as url:
            result = run(url)
    result["environment"] = {
        "python": platform.python_version(),
        "redis_agent_sessions": redis_agent_sessions.__version__,
        "seconds_per_run": seconds,
        "history": history,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"\nSame session vs distinct sessions, {history} events of history, {seconds:.0f} s "
        f"per run (appends/s ratio; target refresh >= {TARGET_SHARE:.0%}):"
    )
    for writers, by_mode in result["ratios"].items():
        line = ", ".join(f"{mode} {ratio:.0%}" for mode, ratio in by_mode.items())
        ok = by_mode["refresh"] >= TARGET_SHARE
        refresh = next(
            r for r in result["runs"] if r["writers"] == int(writers) and r["mode"] == "refresh"
        )
        gave_up, lost = refresh["gave_up"], refresh["lost"]
        verdict = "met" if ok and not gave_up and not lost else "MISSED"
        print(f"  {writers} writers: {line} -> {verdict} (gave up {gave_up}, lost {lost})")


if __name__ == "__main__":
    main()
