"""Run by tests/test_facts_background_chaos.py in its own OS process: a FactWorker whose
model counts events.

    python facts_bg_worker.py URL PREFIX APP [--cluster] [--hold]

Its model reads the user's counter fact ("The user said K things.") and updates it to
K + the events it is given, after a pause of 150 ms (a model's latency); with ``--hold``,
of 60 s, so that a test that kills the process once it says ``generating`` kills it
mid-generation however loaded the machine (150 ms could pass before the kill). It prints
``ready`` once running, ``generating`` as each generation starts, and on SIGTERM stops
(finishing or releasing what it holds) and prints its counts as one JSON line. Kept apart
from the test module so that the process imports only this and the library.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys

from redis_agent_sessions import (
    FactSettings,
    FactWorker,
    GenerationRequest,
    MemoryOperation,
    RedisMemoryService,
    SessionServiceConfig,
)

COUNTER = re.compile(r"^The user said (\d+) things\.$")
LATENCY = 0.15
HELD = 60.0


def counter_text(k: int) -> str:
    return f"The user said {k} things."


class Counting:
    def __init__(self, latency: float) -> None:
        self.latency = latency

    async def generate(self, request: GenerationRequest) -> list[MemoryOperation]:
        print("generating", flush=True)
        await asyncio.sleep(self.latency)
        [fact] = [f for f in request.facts if COUNTER.match(f.text)]
        k = int(COUNTER.match(fact.text).group(1))  # type: ignore[union-attr]
        text = counter_text(k + len(request.events))
        return [MemoryOperation(action="update", fact_id=fact.id, fact=text)]


async def main(url: str, prefix: str, app: str, cluster: bool, latency: float) -> None:
    memory = RedisMemoryService.from_url(
        url,
        config=SessionServiceConfig(key_prefix=prefix),
        cluster=cluster,
        backend="plain",
        generator=Counting(latency),
        facts=FactSettings(mode="background", history=1000),
    )
    worker = FactWorker(
        memory, concurrency=2, apps=[app], visibility_timeout=1.0, poll_interval=0.01,
        sweep_interval=0.1, retry_delay=0.05, grace=5.0,
    )  # fmt: skip
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
    print("ready", flush=True)
    await worker.run()
    print(json.dumps(dict(worker.counts)), flush=True)
    await memory.aclose()


if __name__ == "__main__":
    url, prefix, app = sys.argv[1:4]
    flags = sys.argv[4:]
    asyncio.run(
        main(url, prefix, app, "--cluster" in flags, HELD if "--hold" in flags else LATENCY)
    )
