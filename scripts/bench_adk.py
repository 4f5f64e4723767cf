"""Benchmark of the google-adk extra (not a test): what ADK types cost on top of the core.

Starts a throwaway redis-server (from PATH) on a free loopback port, fills one session
with 1,000 ADK events shaped like a tool-using conversation, and prints medians of:

* the parse floor: ``Event.model_validate`` on the same 1,000 events (dicts already
  decoded), the cost any store pays to hand ADK its own objects;
* ``get_session`` through the extra, full and ``num_recent_events=20``;
* ``append_event`` through the extra next to the core service's, same client, same events.

Targets (issue 4): full read <= 1.2x the floor; last 20 <= 2 ms; append <= 1.3x core.

    .venv/bin/python scripts/bench_adk.py [--events 1000] [--rounds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from google.adk.events import Event, EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types
from redis.asyncio import Redis

from redis_agent_sessions import Event as CoreEvent
from redis_agent_sessions import RedisSessionService as CoreService
from redis_agent_sessions.adk import RedisSessionService


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_redis(port: int, workdir: str) -> subprocess.Popen[bytes]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not on PATH")
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
        ],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("redis-server did not start")


def make_event(i: int) -> Event:
    """One event of a booking conversation: user text, tool call, tool result, reply."""
    kind = i % 4
    inv = f"e-{i // 4:06d}"
    if kind == 0:
        content = types.Content(role="user", parts=[types.Part(text=f"Find flights, turn {i}")])
        return Event(invocation_id=inv, author="user", content=content)
    if kind == 1:
        call = types.Part.from_function_call(
            name="search_flights", args={"origin": "NYC", "destination": "Paris"}
        )
        return Event(
            invocation_id=inv,
            author="booking_agent",
            content=types.Content(role="model", parts=[call]),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=812, candidates_token_count=24, total_token_count=836
            ),
        )
    if kind == 2:
        flights = [{"flight": f"AA{n}", "price": 400 + n, "time": "8:00 AM"} for n in range(3)]
        result = types.Part.from_function_response(
            name="search_flights", response={"flights": flights}
        )
        return Event(
            invocation_id=inv,
            author="booking_agent",
            content=types.Content(role="user", parts=[result]),
            actions=EventActions(
                state_delta={"search_results": flights, "booking_step": "select_flight"}
            ),
        )
    reply = f"I found 3 flights from NYC to Paris; the cheapest is AA0 at $400 (turn {i})."
    return Event(
        invocation_id=inv,
        author="booking_agent",
        content=types.Content(role="model", parts=[types.Part(text=reply)]),
        actions=EventActions(state_delta={"last_response": reply}),
    )


async def median_ms(fn: Callable[[], Awaitable[Any]], rounds: int) -> float:
    for _ in range(3):
        await fn()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


async def bench(port: int, n_events: int, rounds: int) -> None:
    client = Redis(host="127.0.0.1", port=port)
    adk = RedisSessionService(client)
    core = CoreService(client)
    session = await adk.create_session(app_name="bench", user_id="u", session_id="big")
    for i in range(n_events):
        await adk.append_event(session, make_event(i))
    entries: Any = await client.xrange(adk._engine.keys.session("bench", "u", "big").events)
    raws: list[bytes] = [fields[b"event"] for _, fields in entries]
    dicts = [orjson.loads(r) for r in raws]
    size = sum(map(len, raws)) / len(raws)

    async def floor() -> None:
        for d in dicts:
            Event.model_validate(d)

    async def floor_json() -> None:
        for r in raws:
            Event.model_validate_json(r)

    async def read_full() -> None:
        await adk.get_session(app_name="bench", user_id="u", session_id="big")

    last20 = GetSessionConfig(num_recent_events=20)

    async def read_last20() -> None:
        await adk.get_session(app_name="bench", user_id="u", session_id="big", config=last20)

    # Interleaved, so that drift on a shared machine hits both sides alike.
    samples: dict[Any, list[float]] = {floor: [], floor_json: [], read_full: []}
    for i in range(rounds + 3):
        for fn, times in samples.items():
            start = time.perf_counter()
            await fn()
            if i >= 3:
                times.append(time.perf_counter() - start)
    floor_ms, floor_json_ms, full_ms = (statistics.median(t) * 1000 for t in samples.values())
    last20_ms = await median_ms(read_last20, rounds * 10)

    # Appends: both services on the same client, alternating, onto sessions of equal length.
    adk_s = await adk.create_session(app_name="bench", user_id="u", session_id="a-adk")
    core_s = await core.create_session(app_name="bench", user_id="u", session_id="a-core")
    n_append = rounds * 20
    adk_events = [make_event(i) for i in range(n_append + 3)]
    core_events = [
        CoreEvent.model_validate(e.model_dump(mode="json", exclude_none=True)) for e in adk_events
    ]
    adk_t: list[float] = []
    core_t: list[float] = []
    for i in range(n_append + 3):
        start = time.perf_counter()
        await adk.append_event(adk_s, adk_events[i])
        mid = time.perf_counter()
        await core.append_event(core_s, core_events[i])
        end = time.perf_counter()
        if i >= 3:
            adk_t.append(mid - start)
            core_t.append(end - mid)
    adk_append = statistics.median(adk_t) * 1000
    core_append = statistics.median(core_t) * 1000
    await client.aclose()

    print(f"{n_events} ADK events, {size:.0f} bytes of JSON each on average; medians")
    print(f"  parse floor: Event.model_validate x{n_events} (dicts)    {floor_ms:8.2f} ms")
    print(f"  JSON floor:  Event.model_validate_json x{n_events}       {floor_json_ms:8.2f} ms")
    ratio = full_ms / floor_ms
    verdict = "ok" if ratio <= 1.2 else "MISSED"
    print(
        f"  get_session full                               {full_ms:8.2f} ms"
        f"  {ratio:.2f}x parse floor (target <= 1.2x: {verdict}),"
        f" {full_ms / floor_json_ms:.2f}x JSON floor"
    )
    verdict = "ok" if last20_ms <= 2 else "MISSED"
    print(
        f"  get_session num_recent_events=20               {last20_ms:8.3f} ms"
        f"  (target <= 2 ms: {verdict})"
    )
    ratio = adk_append / core_append
    verdict = "ok" if ratio <= 1.3 else "MISSED"
    print(f"  append_event via extra                         {adk_append:8.3f} ms")
    print(
        f"  append_event via core                          {core_append:8.3f} ms"
        f"  extra/core {ratio:.2f}x (target <= 1.3x: {verdict})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        server = start_redis(port, workdir)
        try:
            asyncio.run(bench(port, args.events, args.rounds))
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
