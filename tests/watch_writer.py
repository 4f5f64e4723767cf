"""Run by tests/test_watch_processes.py in its own OS process: appends events to one session
(``write``) or watches one (``watch``), and prints what it did as one JSON object.

    python watch_writer.py write URL PREFIX APP USER SID NAME N SEED [HOLD] [--cluster] [--adk]
    python watch_writer.py watch URL PREFIX APP USER SID N [--cluster]

``write`` prints ``ready`` once connected and waits for a line on stdin (the test's barrier,
so that writers start together however long each took to start), then appends N events
authored ``NAME-0`` .. ``NAME-<N-1>`` under the ``merge`` stale policy (another process
appends to the same session at the same time), sleeping a random 5-25 ms before each. With
HOLD it prints ``held`` after HOLD events and waits for another line (the test acts while
the writer is known to be mid-way). Its last line is ``{"ids": [...], "events": [<event
JSON>, ...]}``, in the order they landed. ``watch`` follows the session from its beginning,
stops after N events and prints ``{"ids": [...]}``. Kept apart from the test module so that
the process imports only this and the library.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from typing import Any

from redis_agent_sessions import Event, EventActions, RedisSessionService, SessionServiceConfig


async def write(
    url: str,
    prefix: str,
    ids: dict[str, str],
    name: str,
    n: int,
    seed: int,
    hold: int | None,
    cluster: bool,
    adk: bool,
) -> dict[str, Any]:
    rng = random.Random(seed)
    config = SessionServiceConfig(key_prefix=prefix, stale_policy="merge")
    landed: list[str] = []
    dumped: list[str] = []
    if adk:
        from google.adk.events import Event as AdkEvent
        from google.adk.events import EventActions as AdkEventActions
        from google.genai import types

        from redis_agent_sessions.adk import RedisSessionService as AdkService

        service: Any = AdkService.from_url(url, config=config, cluster=cluster)
    else:
        service = RedisSessionService.from_url(url, config=config, cluster=cluster)
    async with service:
        session = await service.get_session(**ids)
        assert session is not None, "the test creates the session before starting writers"
        _signal("ready")
        for i in range(n):
            if i == hold:
                _signal("held")
            await asyncio.sleep(rng.uniform(0.005, 0.025))
            delta = {f"{name}:last": i, "shared": f"{name}-{i}"}
            if adk:
                event: Any = AdkEvent(
                    author=f"{name}-{i}",
                    invocation_id=f"inv-{name}",
                    content=types.Content(role="model", parts=[types.Part(text=f"{name} #{i}")]),
                    actions=AdkEventActions(state_delta=delta),
                )
            else:
                event = Event(author=f"{name}-{i}", actions=EventActions(state_delta=delta))
            await service.append_event(session, event)
            landed.append(event.id)
            dumped.append(event.model_dump_json())
    return {"ids": landed, "events": dumped}


async def watch(url: str, prefix: str, ids: dict[str, str], n: int, cluster: bool) -> list[str]:
    config = SessionServiceConfig(key_prefix=prefix)
    seen: list[str] = []
    async with RedisSessionService.from_url(url, config=config, cluster=cluster) as service:
        async for event in service.watch(**ids, from_beginning=True, block_ms=200):
            seen.append(event.id)
            if len(seen) == n:
                break
    return seen


def _signal(line: str) -> None:
    """Tell the test ``line``, and wait for its answer (a line, or stdin closed)."""
    print(line, flush=True)
    sys.stdin.readline()


def main(argv: list[str]) -> None:
    flags = {a for a in argv if a.startswith("--")}
    args = [a for a in argv if not a.startswith("--")]
    mode, url, prefix, app, user, sid, *rest = args
    ids = {"app_name": app, "user_id": user, "session_id": sid}
    cluster = "--cluster" in flags
    if mode == "write":
        name, n, seed, *hold = rest
        held = int(hold[0]) if hold else None
        result = asyncio.run(
            write(url, prefix, ids, name, int(n), int(seed), held, cluster, "--adk" in flags)
        )
    elif mode == "watch":
        [n] = rest
        result = {"ids": asyncio.run(watch(url, prefix, ids, int(n), cluster))}
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
