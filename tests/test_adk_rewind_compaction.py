"""ADK rewind and events compaction end to end on our session service, across processes.

A real ``Runner`` (an ``App`` whose agent runs on a scripted model, tests/adk_rewind_app.py)
plays each scenario on Redis with turns served by separate OS processes, and the same
script plays in this process on ADK's own ``InMemorySessionService``: the states, the
stored rewind/compaction events and the LLM requests must come out the same.

Then two workers race one compaction: exactly one summary lands, the other writer gets
ADK's ``StaleSessionError``. Through the Runner, ADK itself catches that error from its
post-invocation compaction append (``Runner._run_post_invocation_compaction``), logs
"Discarding stale post-invocation compaction" at INFO and ends the turn normally; the
summary is dropped and a later turn compacts again from a fresh read. Needs REDIS_URL.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from _processes import ADK, run_helper
from _servers import skip_without

pytest.importorskip("google.adk", reason="needs the [adk] extra (google.adk is not installed)")

from google.adk.apps.compaction import _run_compaction_for_sliding_window
from google.adk.errors import StaleSessionError as AdkStaleSessionError
from google.adk.events import Event
from google.adk.sessions import InMemorySessionService, Session
from redis.asyncio import Redis

from redis_agent_sessions import SessionServiceConfig
from redis_agent_sessions.adk import RedisSessionService, StaleSessionError
from redis_agent_sessions.keys import KeySpace

sys.path.insert(0, str(Path(__file__).parent))
import adk_rewind_app as app

pytestmark = [
    pytest.mark.adk,
    pytest.mark.real,
    pytest.mark.slow,
    # EventsCompactionConfig and BaseEventsSummarizer are @experimental in ADK.
    pytest.mark.filterwarnings(r"ignore:\[EXPERIMENTAL\]:UserWarning"),
]

HELPER = Path(app.__file__)
MESSAGES = [f"turn {n}: please remember item {n}" for n in range(1, 6)]


class Shared:
    """One Redis, one unique key prefix, and our service on it."""

    def __init__(self, url: str, prefix: str, client: Redis, service: RedisSessionService):
        self.url, self.prefix, self.client, self.service = url, prefix, client, service
        self.extra_clients: list[Redis] = []

    def other_service(self) -> RedisSessionService:
        """Another worker: a service on a client of its own (closed by the fixture)."""
        client = Redis.from_url(self.url)
        self.extra_clients.append(client)
        return RedisSessionService(client, config=SessionServiceConfig(key_prefix=self.prefix))

    async def create(self) -> Session:
        return await self.service.create_session(app_name=app.APP_NAME, user_id=app.USER_ID)

    async def turns(
        self, session_id: str, *messages: str, compaction: bool
    ) -> list[dict[str, Any]]:
        """Turns played, in order, by one new OS process."""
        result = await run_helper(
            HELPER,
            self.url,
            self.prefix,
            "turns",
            session_id,
            "1" if compaction else "0",
            *messages,
            preload=ADK,
        )
        turns: list[dict[str, Any]] = result["turns"]
        return turns

    async def rewind(self, session_id: str, invocation_id: str) -> dict[str, Any]:
        """``Runner.rewind_async`` in a new OS process; the session it read back."""
        return await run_helper(  # type: ignore[no-any-return]
            HELPER, self.url, self.prefix, "rewind", session_id, invocation_id, preload=ADK
        )

    async def raw_events(self, session_id: str) -> list[dict[str, Any]]:
        """The session's events exactly as stored: the JSON of each stream entry."""
        key = KeySpace(self.prefix).session(app.APP_NAME, app.USER_ID, session_id).events
        entries = await self.client.xrange(key)
        assert entries, key
        events = []
        for _, fields in entries:
            assert fields is not None
            events.append(json.loads(fields[b"event"]))
        return events


@pytest.fixture
async def shared() -> AsyncIterator[Shared]:
    redis_url = skip_without("REDIS_URL")
    # A prefix of its own: other suites flush this database, and this one never does.
    prefix = f"adk-rewind-{uuid.uuid4().hex[:12]}"
    client = Redis.from_url(redis_url)
    service = RedisSessionService(client, config=SessionServiceConfig(key_prefix=prefix))
    shared = Shared(redis_url, prefix, client, service)
    yield shared
    for extra in shared.extra_clients:
        await extra.aclose()
    async for key in client.scan_iter(match=f"{prefix}:*"):
        await client.delete(key)
    await client.aclose()


def compactions(events: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """(position, compaction) of each stored event carrying ``actions.compaction``."""
    return [
        (i, e["actions"]["compaction"])
        for i, e in enumerate(events)
        if e.get("actions", {}).get("compaction")
    ]


def summary_text(compaction: dict[str, Any]) -> str:
    text: str = compaction["compacted_content"]["parts"][0]["text"]
    return text


async def in_memory_rewind_script() -> dict[str, Any]:
    """Turns 1-3, rewind before turn 2, turn 4, on ADK's InMemorySessionService."""
    service = InMemorySessionService()
    session = await service.create_session(app_name=app.APP_NAME, user_id=app.USER_ID)
    turns = [await app.run_turn(service, session.id, m, compaction=False) for m in MESSAGES[:3]]
    await app.rewind(service, session.id, turns[1]["invocation_id"])
    rewound = await app.read(service, session.id)
    turn4 = await app.run_turn(service, session.id, MESSAGES[3], compaction=False)
    return {"turns": turns, "rewound": app.dump_session(rewound), "turn4": turn4}


async def test_rewind_across_processes_matches_in_memory(shared: Shared) -> None:
    created = await shared.create()
    sid = created.id

    first = await shared.turns(sid, *MESSAGES[:3], compaction=False)  # process 1
    turn1, turn2, turn3 = first
    rewound = await shared.rewind(sid, turn2["invocation_id"])  # process 2
    (turn4,) = await shared.turns(sid, MESSAGES[3], compaction=False)  # process 3
    assert len({turn1["pid"], rewound["pid"], turn4["pid"], os.getpid()}) == 4
    memory = await in_memory_rewind_script()

    # Each turn wrote its own key, the shared counter and user state, and its reply.
    assert turn1["state"] == {
        "turn1": "note 1",
        "count": 1,
        "user:visits": 1,
        "last_reply": f"reply to [{MESSAGES[0]}] after 1 contents",
    }
    assert turn3["state"]["turn3"] == "note 3"
    assert turn3["state"]["user:visits"] == 3
    # Same script, same answers up to the rewind.
    for ours, theirs in zip(first, memory["turns"], strict=True):
        assert ours["requests"] == theirs["requests"]
        assert ours["state"] == theirs["state"]

    # The rewind event, exactly as stored in the Redis stream.
    raw = await shared.raw_events(sid)
    rewinds = [e for e in raw if e.get("actions", {}).get("rewind_before_invocation_id")]
    assert len(rewinds) == 1
    (stored,) = rewinds
    assert stored["actions"]["rewind_before_invocation_id"] == turn2["invocation_id"]
    delta = stored["actions"]["state_delta"]
    # Keys created after the rewind point are null; overwritten ones get their old value;
    # user: keys are not rewound (ADK keeps user state).
    assert delta == {
        "turn2": None,
        "turn3": None,
        "count": 1,
        "last_reply": turn1["state"]["last_reply"],
    }
    assert stored["author"] == "user"
    assert stored["id"] == rewound["events"][-1]["id"]
    # Same delta as ADK computes on InMemorySessionService for the same script.
    memory_rewind = memory["rewound"]["events"][-1]["actions"]
    assert delta == memory_rewind["state_delta"]

    # Nothing was deleted: every event of turns 2 and 3 is still in the stream, in order,
    # followed by the rewind event and turn 4.
    expected_ids = [e["id"] for t in (*first, turn4) for e in t["events"]]
    expected_ids.insert(sum(len(t["events"]) for t in first), stored["id"])
    assert [e["id"] for e in raw] == expected_ids

    # The state after the rewind is the state before turn 2 (later keys None), exactly
    # what InMemorySessionService gives; read by process 2 and by this process.
    ours_after = rewound["state"]
    assert ours_after == memory["rewound"]["state"]
    read_back = await shared.service.get_session(
        app_name=app.APP_NAME, user_id=app.USER_ID, session_id=sid
    )
    assert read_back is not None
    assert read_back.state == memory["turn4"]["state"] == turn4["state"]
    before_turn2 = {k: v for k, v in turn1["state"].items() if not k.startswith("user:")}
    assert {
        k: v for k, v in ours_after.items() if v is not None and not k.startswith("user:")
    } == before_turn2
    assert ours_after["user:visits"] == 3

    # Turn 4's LLM request: turn 1 and turn 4 only, identical to InMemorySessionService's.
    (request,) = turn4["requests"]
    assert app.texts(request["contents"]) == [
        MESSAGES[0],
        turn1["state"]["last_reply"],
        MESSAGES[3],
    ]
    forgotten = [MESSAGES[1], MESSAGES[2], turn2["state"]["last_reply"]]
    forgotten.append(turn3["state"]["last_reply"])
    assert not any(t in json.dumps(request["contents"]) for t in forgotten)
    assert "turn2= turn3= " in request["system_instruction"]
    assert turn4["requests"] == memory["turn4"]["requests"]


async def in_memory_compaction_script() -> list[dict[str, Any]]:
    service = InMemorySessionService()
    session = await service.create_session(app_name=app.APP_NAME, user_id=app.USER_ID)
    turns = [await app.run_turn(service, session.id, m, compaction=True) for m in MESSAGES]
    turns.append(app.dump_session(await app.read(service, session.id)))
    return turns


async def test_compaction_across_processes_matches_in_memory(shared: Shared) -> None:
    created = await shared.create()
    sid = created.id
    # Five turns, each served by a new OS process (its own client and Runner).
    turns = [(await shared.turns(sid, m, compaction=True))[0] for m in MESSAGES]
    assert len({t["pid"] for t in turns} | {os.getpid()}) == 6
    *memory_turns, memory_session = await in_memory_compaction_script()

    # Compaction ran after turn 2 (invocations 1-2) and after turn 4 (2-4, overlap 1).
    ids = [[e["id"] for e in t["events"]] for t in turns]
    assert [t["windows"] for t in turns] == [
        [],
        [ids[0] + ids[1]],
        [],
        [ids[1] + ids[2] + ids[3]],
        [],
    ]
    raw = await shared.raw_events(sid)
    found = compactions(raw)
    assert [i for i, _ in found] == [6, 13]
    (_, first), (_, second) = found
    stamps = [[e["timestamp"] for e in t["events"]] for t in turns]
    assert (first["start_timestamp"], first["end_timestamp"]) == (stamps[0][0], stamps[1][-1])
    assert (second["start_timestamp"], second["end_timestamp"]) == (stamps[1][0], stamps[3][-1])
    assert [summary_text(c) for _, c in found] == ["summary of turns 1-2", "summary of turns 2-4"]
    assert len(raw) == 5 * 3 + 2
    # InMemorySessionService stores the same compactions at the same places.
    memory_found = compactions(memory_session["events"])
    assert [i for i, _ in memory_found] == [i for i, _ in found]
    assert [summary_text(c) for _, c in memory_found] == [summary_text(c) for _, c in found]

    # The model saw summaries in place of the compacted turns, exactly as on InMemory.
    assert app.texts(turns[4]["requests"][0]["contents"]) == [
        "summary of turns 1-2",
        "summary of turns 2-4",
        MESSAGES[4],
    ]
    assert app.texts(turns[2]["requests"][0]["contents"]) == ["summary of turns 1-2", MESSAGES[2]]
    for n, (ours, theirs) in enumerate(zip(turns, memory_turns, strict=True), start=1):
        assert ours["requests"] == theirs["requests"], f"turn {n}"
        assert ours["state"] == theirs["state"], f"turn {n}"


async def two_uncompacted_turns(shared: Shared) -> Session:
    """A session holding invocations 1 and 2, which a compaction would summarize."""
    created = await shared.create()
    for message in MESSAGES[:2]:
        await app.run_turn(shared.service, created.id, message, compaction=False)
    return await app.read(shared.service, created.id)


async def compaction_from(session: Session, service: RedisSessionService) -> list[Event]:
    """The summaries ADK's sliding-window compactor makes from this session copy."""
    compaction_app, _, _ = app.build_app(compaction=True)
    return [e async for e in _run_compaction_for_sliding_window(compaction_app, session, service)]


@pytest.mark.parametrize("round_", range(5))
async def test_two_workers_race_one_compaction(shared: Shared, round_: int) -> None:
    session = await two_uncompacted_turns(shared)
    workers = [shared.service, shared.other_service()]
    # Both workers hold the same revision of the session and summarize the same window.
    copies = [await app.read(worker, session.id) for worker in workers]
    assert copies[0] == copies[1]
    before = [(c.model_copy(deep=True), c._storage_update_marker) for c in copies]
    summaries = [(await compaction_from(c, w))[0] for c, w in zip(copies, workers, strict=True)]
    assert summaries[0].id != summaries[1].id
    assert summaries[0].actions.compaction == summaries[1].actions.compaction

    results = await asyncio.gather(
        *(w.append_event(c, s) for w, c, s in zip(workers, copies, summaries, strict=True)),
        return_exceptions=True,
    )
    landed = [i for i, r in enumerate(results) if isinstance(r, Event)]
    stale = [i for i, r in enumerate(results) if isinstance(r, AdkStaleSessionError)]
    assert (len(landed), len(stale)) == (1, 1), results
    (winner,), (loser,) = landed, stale
    assert type(results[loser]) is StaleSessionError  # ADK's, and this library's

    raw = await shared.raw_events(session.id)
    found = compactions(raw)
    assert len(found) == 1
    assert raw[-1]["id"] == summaries[winner].id
    assert [e["id"] for e in raw[:-1]] == [e.id for e in session.events]
    assert summaries[loser].id not in json.dumps(raw)
    # The loser's copy is untouched; the winner's has the summary.
    loser_before, loser_marker = before[loser]
    assert copies[loser] == loser_before
    assert copies[loser]._storage_update_marker == loser_marker
    assert copies[winner].events[-1].id == summaries[winner].id

    # The loser retries from a fresh read: ADK finds nothing left to compact.
    fresh = await app.read(workers[loser], session.id)
    assert fresh.events[-1].id == summaries[winner].id
    assert await compaction_from(fresh, workers[loser]) == []
    assert len(compactions(await shared.raw_events(session.id))) == 1


async def test_runner_discards_a_stale_compaction(
    shared: Shared, caplog: pytest.LogCaptureFixture
) -> None:
    """Worker A (this process) is summarizing turns 1-2 when worker B (another process)
    answers turn 3: ADK drops A's summary, keeps B's, and A's turn still succeeds."""
    caplog.set_level(logging.INFO, logger="google_adk")
    created = await shared.create()
    sid = created.id
    turn1 = await app.run_turn(shared.service, sid, MESSAGES[0], compaction=True)
    assert turn1["windows"] == []

    reached, release = asyncio.Event(), asyncio.Event()

    async def hold(events: list[Event]) -> None:
        reached.set()
        await release.wait()

    a = asyncio.create_task(
        app.run_turn(shared.service, sid, MESSAGES[1], compaction=True, hook=hold, tag="A:")
    )
    await asyncio.wait_for(reached.wait(), timeout=60)
    (b,) = await shared.turns(sid, MESSAGES[2], compaction=True)
    release.set()
    turn2 = await asyncio.wait_for(a, timeout=60)  # no StaleSessionError reaches A's caller

    # A summarized invocations 1-2; B, seeing three new invocations, summarized 1-3.
    ids = [[e["id"] for e in t["events"]] for t in (turn1, turn2, b)]
    assert turn2["windows"] == [ids[0] + ids[1]]
    assert b["windows"] == [ids[0] + ids[1] + ids[2]]
    raw = await shared.raw_events(sid)
    ((position, compaction),) = compactions(raw)
    assert position == len(raw) - 1 == 9
    assert summary_text(compaction) == "summary of turns 1-3"
    assert "A:summary" not in json.dumps(raw)
    assert [e["id"] for e in raw[:-1]] == ids[0] + ids[1] + ids[2]
    # ADK said why it dropped A's summary.
    discarded = [
        r
        for r in caplog.records
        if r.name.startswith("google_adk")
        and "Discarding stale post-invocation compaction" in r.getMessage()
    ]
    assert len(discarded) == 1
    assert sid in discarded[0].getMessage()
    assert discarded[0].levelno == logging.INFO

    # The next turn's request is built from B's summary.
    turn4 = await app.run_turn(shared.service, sid, MESSAGES[3], compaction=True)
    assert app.texts(turn4["requests"][0]["contents"]) == ["summary of turns 1-3", MESSAGES[3]]
    assert turn4["windows"] == []
