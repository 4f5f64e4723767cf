"""Run by tests/test_facts_processes.py in its own OS process: one worker that learns facts
about a user whom other worker processes learn about at the same time.

    python facts_worker.py URL APP USER NAME STEPS SEED HISTORY BACKEND [--cluster]

The worker owns session NAME of the user (it creates it, and no other process writes it). It
prints ``ready`` and waits for a line on stdin (the test's barrier, so that workers start
together however long each took to start), then STEPS times: appends one event ``NAME visited
city i`` to its session, reads the session back and consolidates it into the user's memory.

Its generator is a scripted fake model (no network): it reads the shared counter fact ("The
user has visited K cities.") from the request and updates it to K+1; on every ADD_EVERY-th
event it also adds a fact of this worker's own ("Worker NAME noted stop i."). Before each
answer it awaits a random pause of up to 10 ms, so that generations of different workers
overlap and their writes conflict. Its first generation prints ``generating`` and waits for
another line: the test lets every worker go only once all have read the counter at the same
revision, so at least all but one of them are refused once, whatever the timing.

A consolidation that gives up after its attempts (ConsolidationConflictError: nothing was
written) is called again, as an application would; any other error ends the worker (exit
status non-zero), and the test fails with its traceback. Its last line is a JSON object:
generations, outcomes of the writes (``applied``, ``fact changed``, ``watermark moved``),
give-ups, the counts K it wrote in the writes that were applied, and its event ids in order.
Kept apart from the test module so that the process imports only this and the library.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
from collections import Counter
from typing import Any

from redis_agent_sessions import (
    ConsolidationConflictError,
    Content,
    Event,
    FactSettings,
    GenerationRequest,
    MemoryOperation,
    Part,
    RedisMemoryService,
    RedisSessionService,
)
from redis_agent_sessions.memory import _facts

COUNTER = re.compile(r"^The user has visited (\d+) cities\.$")
ADD_EVERY = 3
MAX_PAUSE = 0.010


def counter_text(k: int) -> str:
    return f"The user has visited {k} cities."


def own_text(name: str, i: int) -> str:
    return f"Worker {name} noted stop {i}."


class Model:
    """The fake model: deterministic answers from the request alone (a retry on fresh facts
    answers from those facts), with random pauses that only change the interleaving."""

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = random.Random(seed)
        self.generations = 0
        self.proposed: int | None = None
        """The count K the latest answer wrote (the one applied, once its write is)."""

    async def generate(self, request: GenerationRequest) -> list[MemoryOperation]:
        self.generations += 1
        if self.generations == 1:
            _signal("generating")
        await asyncio.sleep(self.rng.uniform(0, MAX_PAUSE))
        [(fact, k)] = [
            (f, int(m.group(1))) for f in request.facts if (m := COUNTER.match(f.text)) is not None
        ]
        [event] = request.events  # one new event per consolidation: the worker's own
        assert event.content is not None
        i = int(event.content.text.rsplit(" ", 1)[1])
        self.proposed = k + 1
        ops = [MemoryOperation(action="update", fact_id=fact.id, fact=counter_text(k + 1))]
        if i % ADD_EVERY == 0:
            ops.append(MemoryOperation(action="add", fact=own_text(self.name, i)))
        return ops


async def work(
    url: str, app: str, user: str, name: str, steps: int, seed: int, history: int, backend: str,
    cluster: bool,
) -> dict[str, Any]:  # fmt: skip
    model = Model(name, seed)
    outcomes: Counter[str] = Counter()
    wrote: list[int] = []
    apply = _facts.FactStore.apply

    async def counted(store: _facts.FactStore, *args: Any, **kwargs: Any) -> Any:
        outcome = await apply(store, *args, **kwargs)
        outcomes[outcome] += 1
        if outcome == "applied":
            assert model.proposed is not None
            wrote.append(model.proposed)
        return outcome

    # Observed, not changed: every write's outcome, and the count each applied one wrote.
    _facts.FactStore.apply = counted  # type: ignore[method-assign]
    gave_up = 0
    events: list[str] = []
    sessions = RedisSessionService.from_url(url, cluster=cluster)
    memory = RedisMemoryService.from_url(
        url,
        cluster=cluster,
        backend=backend,  # type: ignore[arg-type]
        generator=model,
        facts=FactSettings(history=history),
    )
    async with sessions, memory:
        session = await sessions.create_session(app_name=app, user_id=user, session_id=name)
        _signal("ready")
        for i in range(steps):
            text = f"{name} visited city {i}"
            event = Event(author="user", content=Content(role="user", parts=[Part(text=text)]))
            await sessions.append_event(session, event)
            events.append(event.id)
            stored = await sessions.get_session(app_name=app, user_id=user, session_id=name)
            assert stored is not None
            while True:
                try:
                    await memory.add_session_to_memory(stored)
                    break
                except ConsolidationConflictError:
                    gave_up += 1  # nothing was written: the same events are read again
    return {
        "name": name,
        "generations": model.generations,
        "outcomes": dict(outcomes),
        "gave_up": gave_up,
        "wrote": wrote,
        "events": events,
    }


def _signal(line: str) -> None:
    """Tell the test ``line``, and wait for its answer (a line, or stdin closed)."""
    print(line, flush=True)
    sys.stdin.readline()


def main(argv: list[str]) -> None:
    flags = {a for a in argv if a.startswith("--")}
    url, app, user, name, steps, seed, history, backend = [
        a for a in argv if not a.startswith("--")
    ]
    result = asyncio.run(
        work(
            url, app, user, name, int(steps), int(seed), int(history), backend,
            "--cluster" in flags,
        )
    )  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
