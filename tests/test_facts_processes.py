"""Learned facts with real worker processes on one user: no update lost, none applied twice.

WORKERS processes (tests/facts_worker.py) consolidate sessions of the same user at once, on
a real Redis, a Redis Cluster, a Valkey Cluster and Redis with the search module. Each has
a session of its own and appends each event before consolidating it, so every event is read
exactly once overall. Each worker's fake model (no network) bumps one shared counter fact
("The user has visited K cities.") from K to K+1, and now and then adds a fact of its own.
Every worker's first generation is held until all have read the counter at revision 1, so
all but one of those writes are refused and generated again: conflicts happen in every run,
whatever the timing. Afterwards, what is stored must tell the whole story, each increment
once and in order:

- the counter says K = every event of every worker, at revision K + 1;
- its history holds each revision below, newest first, without gaps or repeats, and the
  sources of revision r + 1 name the event that made K = r: each worker's events appear
  there once each, in the order the worker appended them;
- the counts the workers' applied writes wrote are 1..K, each once;
- each worker's own facts are all there, once each, at revision 1;
- each session's watermark counts its events and names its last one;
- the user's stats count one generation per event, and each fact added or updated once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from _backends import backend as open_backend
from _backends import pick
from _processes import start
from _servers import skip_without
from facts_worker import ADD_EVERY, COUNTER, counter_text, own_text
from redis_agent_sessions import (
    CallableGenerator,
    Content,
    Event,
    Fact,
    FactSettings,
    GenerationRequest,
    MemoryOperation,
    Part,
    RedisMemoryService,
    Session,
)
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory import FactRevision

pytestmark = [pytest.mark.real, pytest.mark.slow]

WORKER = Path(__file__).with_name("facts_worker.py")
APP, USER = "facts_procs_app", "traveller"
WORKERS = 4
STEPS = 15
"""Events per worker. With WORKERS, it keeps the user's facts (the counter and each worker's
own, one per ADD_EVERY events) under the 30 a generation is shown, so that every generation
is shown the counter without depending on ranking."""
TOTAL = WORKERS * STEPS
HISTORY = TOTAL + 5
"""Revisions kept in a fact's history: all of the counter's."""
DEADLINE = 60.0
"""The most any wait on a worker may take (not a timing assertion: a hung worker fails)."""
KEYS = KeySpace()

SERVERS = {
    # the registry's kind: (env variable, cluster, memory backend)
    "real": ("REDIS_URL", False, "plain"),
    "cluster": ("REDIS_CLUSTER_URL", True, "plain"),
    "valkey-cluster": ("REDIS_VALKEY_CLUSTER_URL", True, "plain"),
    "search": ("REDIS_SEARCH_URL", False, "search"),
}


@pytest.fixture(params=pick(*SERVERS))
async def server(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[str, Any, bool, str]]:
    """The server's URL, an admin client on it (flushed before and after), whether it is a
    cluster, and the memory backend."""
    variable, cluster, backend = SERVERS[request.param]
    async with open_backend(request.param, monkeypatch) as client:
        yield skip_without(variable), client, cluster, backend


async def spawn(started: list[asyncio.subprocess.Process], *args: Any) -> Any:
    return await start(started, WORKER, *args)


async def signalled(proc: asyncio.subprocess.Process, line: str) -> None:
    """Wait until a worker prints ``line``: it then waits for :func:`go`."""
    assert proc.stdout is not None
    got = await asyncio.wait_for(proc.stdout.readline(), DEADLINE)
    if got.decode().strip() != line:
        _, err = await asyncio.wait_for(proc.communicate(), DEADLINE)
        pytest.fail(f"expected {line!r}, got {got!r} (exit {proc.returncode}): {err.decode()}")


async def go(procs: Sequence[asyncio.subprocess.Process]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()


async def finished(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    """What the worker printed last, once it exited 0."""
    out, err = await asyncio.wait_for(proc.communicate(), DEADLINE)
    assert proc.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    return result


async def seed_counter(client: Any, backend: str) -> RedisMemoryService:
    """The counter at K = 0 (revision 1), stored before any worker starts: workers only
    update it, so no two of them can each add a counter of their own. The service returned
    reads what the workers stored."""

    def answer(request: GenerationRequest) -> list[MemoryOperation]:
        return [MemoryOperation(action="add", fact=counter_text(0))]

    memory = RedisMemoryService(
        client,
        backend=backend,  # type: ignore[arg-type]
        generator=CallableGenerator(answer),
        facts=FactSettings(history=HISTORY),
    )
    said = Event(author="user", content=Content(role="user", parts=[Part(text="cities")]))
    await memory.add_session_to_memory(
        Session(id="seed", app_name=APP, user_id=USER, events=[said])
    )
    return memory


async def test_workers_on_one_user_lose_no_update_and_apply_none_twice(
    server: tuple[str, Any, bool, str], processes: list[asyncio.subprocess.Process]
) -> None:
    url, client, cluster, backend = server
    memory = await seed_counter(client, backend)
    names = [f"w{n}" for n in range(WORKERS)]
    flags = ["--cluster"] if cluster else []
    procs = [
        await spawn(processes, url, APP, USER, name, STEPS, n, HISTORY, backend, *flags)
        for n, name in enumerate(names)
    ]
    for proc in procs:
        await signalled(proc, "ready")
    await go(procs)
    # Every worker has read the counter at revision 1 and waits in its first generation.
    for proc in procs:
        await signalled(proc, "generating")
    await go(procs)
    reports = {r["name"]: r for r in [await finished(proc) for proc in procs]}
    print(summary(reports))  # the run's figures, shown with -s or when it fails

    # The workers: each event consolidated by one applied write; every other write refused
    # because the counter had changed (no other worker reads a worker's own session).
    for name, r in reports.items():
        assert r["outcomes"].get("applied") == STEPS, (name, r["outcomes"])
        assert r["outcomes"].get("watermark moved", 0) == 0, (name, r["outcomes"])
        assert r["generations"] == sum(r["outcomes"].values()), (name, r)
    assert sorted(k for r in reports.values() for k in r["wrote"]) == list(range(1, TOTAL + 1))
    refused = sum(r["outcomes"].get("fact changed", 0) for r in reports.values())
    assert refused >= WORKERS - 1  # the held first generations: all but one were refused

    # The counter: K = every event, each revision kept once, in order.
    facts = await memory.list_facts(app_name=APP, user_id=USER)
    [counter] = [f for f in facts if COUNTER.match(f.text)]
    assert (counter.text, counter.revision) == (counter_text(TOTAL), TOTAL + 1)
    history = await memory.fact_history(app_name=APP, user_id=USER, fact_id=counter.id)
    assert [(h.revision, h.text) for h in history] == [
        (r, counter_text(r - 1)) for r in range(TOTAL, 0, -1)
    ]
    revisions: list[Fact | FactRevision] = [counter, *history]  # newest first
    assert [s.session_id for s in revisions[-1].sources] == ["seed"]
    # Revision r + 1 (K = r) names the one event that made it: each worker's events are
    # there once each, in the order it appended them, with the counts its writes wrote.
    made_by: dict[str, list[tuple[str, int]]] = {name: [] for name in names}
    for revision in reversed(revisions[:-1]):
        [source] = revision.sources
        [event_id] = source.event_ids
        made_by[source.session_id].append((event_id, revision.revision - 1))
    for name, r in reports.items():
        assert [e for e, _ in made_by[name]] == r["events"], name
        assert [k for _, k in made_by[name]] == r["wrote"], name

    # Each worker's own facts: all there, once each, never updated.
    own = sorted((f.text, f.revision) for f in facts if f.id != counter.id)
    assert own == sorted(
        (own_text(name, i), 1) for name in names for i in range(STEPS) if i % ADD_EVERY == 0
    )

    # Each session read to its end, and the user's stats count each write once.
    for name, r in reports.items():
        mark = await client.get(KEYS.memory_watermark(APP, USER, name))
        assert mark.decode() == f"{STEPS}\t{r['events'][-1]}", name
    stats = await client.hgetall(KEYS.memory_stats(APP, USER))
    assert {k: int(stats[k.encode()]) for k in ("generations", "facts_added", "facts_updated")} == {
        "generations": TOTAL + 1,  # the seed's, then one per event
        "facts_added": 1 + len(own),
        "facts_updated": TOTAL,
    }


def summary(reports: dict[str, dict[str, Any]]) -> str:
    """Generations, applied writes, refused writes and give-ups, per worker and in all."""
    rows = [
        f"{name}: {r['generations']} generations, {r['outcomes'].get('applied', 0)} applied, "
        f"{r['outcomes'].get('fact changed', 0)} refused, {r['gave_up']} gave up"
        for name, r in reports.items()
    ]
    generations = sum(r["generations"] for r in reports.values())
    return "; ".join(rows) + f"; in all {generations} generations for {TOTAL} events"
