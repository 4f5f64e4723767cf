"""Compaction-aware reads (``CompactedReads``): a Runner turn sends the model exactly what
it sends when every event is read, while the read skips what compaction summarized.

The conversations run through real Runners with a scripted model and summarizer
(tests/adk_compaction_app.py), on every backend of the contract suites.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="needs the [adk] extra (google.adk is not installed)")

import warnings

from google.adk.events import Event, EventActions
from google.adk.sessions import InMemorySessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

import adk_compaction_app as app
from _snapshot import snapshot
from adk_rewind_app import compaction_event
from redis_agent_sessions import InvalidInputError
from redis_agent_sessions.adk import CompactedReads, RedisSessionService, StaleSessionError
from redis_agent_sessions.adk import _compacted as compacted

pytestmark = [pytest.mark.adk, pytest.mark.filterwarnings("ignore::UserWarning")]
warnings.filterwarnings("ignore", message=r"\[EXPERIMENTAL\]")

# Each mode compacts 5 or 6 times in 18 turns, summaries within summaries included (checked
# below); 30 turns compacted 9 to 12 times, at two thirds more cost on every backend.
TURNS = 18
A, U = app.APP_NAME, app.USER_ID


def reads(mode: app.Mode = "tokens") -> CompactedReads:
    return CompactedReads(compaction=app.compaction_config(mode))


async def play(service: Any, mode: app.Mode, session_id: str, *, compacted: bool) -> list[Any]:
    """The requests of each of TURNS turns of one conversation."""
    conversation = app.Conversation(service, mode, compacted=compacted)
    await service.create_session(app_name=app.APP_NAME, user_id=app.USER_ID, session_id=session_id)
    try:
        return [await conversation.turn(session_id, n) for n in range(1, TURNS + 1)]
    finally:
        await conversation.close()


_REFERENCES: dict[str, list[Any]] = {}


async def reference(mode: app.Mode) -> list[Any]:
    """The requests of ADK's in-memory service playing the conversation: the same on every
    backend and read-cache variant (the scripted model and summarizer answer from the
    request alone), so played once per mode in a run rather than once per backend."""
    if mode not in _REFERENCES:
        _REFERENCES[mode] = await play(InMemorySessionService(), mode, "mem", compacted=False)
    return _REFERENCES[mode]


async def both_reads(service: RedisSessionService, session_id: str, mode: app.Mode) -> Any:
    full = await service.get_session(
        app_name=app.APP_NAME, user_id=app.USER_ID, session_id=session_id
    )
    part = await service.get_session(
        app_name=app.APP_NAME, user_id=app.USER_ID, session_id=session_id, config=reads(mode)
    )
    assert full is not None
    assert part is not None
    return full, part


@pytest.mark.parametrize("mode", app.MODES)
async def test_the_model_gets_the_same_requests(worker_client: Any, mode: app.Mode) -> None:
    service = RedisSessionService(worker_client)
    want = await reference(mode)
    full = await play(service, mode, "full", compacted=False)
    part = await play(service, mode, "part", compacted=True)
    for n, (wanted, got_full, got_part) in enumerate(zip(want, full, part, strict=True), 1):
        assert got_full == wanted, f"turn {n}"
        assert got_part == wanted, f"turn {n}"
    # The requests did change with compaction: summaries replaced raw turns.
    last_texts = str(part[-1][-1]["contents"])
    assert "summary of turns" in last_texts
    assert "turn 1 " not in last_texts

    whole, read = await both_reads(service, "part", mode)
    assert sum(1 for e in whole.events if e.actions.compaction) >= 5  # see TURNS
    assert len(read.events) < len(whole.events) / 2, (len(read.events), len(whole.events))
    assert read.state == whole.state
    assert read.last_update_time == whole.last_update_time
    # What was read is a subsequence of the session, in order, every summary that counts
    # included.
    ids = [e.id for e in whole.events]
    positions = [ids.index(e.id) for e in read.events]
    assert positions == sorted(positions)
    assert read.events[-1] == whole.events[-1]


async def test_a_window_that_reaches_back_is_read_back_to_its_start(
    worker_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a look-back of one entry, every turn must read further back (the doubling
    loop) before the sliding window is known to start inside what was read."""
    monkeypatch.setattr(compacted, "_LOOK_BACK", 1)
    service = RedisSessionService(worker_client)
    want = await reference("window")
    part = await play(service, "window", "part", compacted=True)
    assert part == want
    whole, read = await both_reads(service, "part", "window")
    assert len(read.events) < len(whole.events) / 2


# -- the compaction index ---------------------------------------------------------------------

T0 = math.floor(time.time()) - 1000.0


def event(at: float, text: str = "", *, invocation: str = "inv", **fields: Any) -> Event:
    actions = fields.pop("actions", EventActions())
    content = types.Content(role="user", parts=[types.Part(text=text)]) if text else None
    return Event(
        timestamp=T0 + at,
        author="user",
        invocation_id=invocation,
        content=content,
        actions=actions,
        **fields,
    )


def summary(at: float, start: float, end: float, text: str = "summary") -> Event:
    return compaction_event(T0 + start, T0 + end, text, timestamp=T0 + at, invocation_id=f"c{at}")


async def session_with(service: RedisSessionService, *events: Event, sid: str = "s") -> Session:
    session = await service.create_session(app_name=A, user_id=U, session_id=sid)
    for e in events:
        await service.append_event(session, e)
    return session


async def index(redis_client: Any, sid: str = "s") -> list[tuple[float, float]]:
    keys = RedisSessionService(redis_client)._engine.keys.session(A, U, sid)
    members = await redis_client.zrange(keys.compactions, 0, -1)
    spans = []
    for m in members:
        _, start, end = (m.decode() if isinstance(m, bytes) else m).split(" ")
        spans.append((round(float(start) - T0, 3), round(float(end) - T0, 3)))
    return spans


async def full_reads(redis_client: Any, sid: str = "s") -> str | None:
    keys = RedisSessionService(redis_client)._engine.keys.session(A, U, sid)
    value = await redis_client.hget(keys.meta, "full_reads")
    return value.decode() if isinstance(value, bytes) else value


async def test_index_keeps_the_summaries_that_count(redis_client: Any, worker_client: Any) -> None:
    service = RedisSessionService(worker_client)
    raw = [event(i, f"turn {i}") for i in range(1, 10)]
    session = await session_with(service, *raw[:5])
    # Sliding windows overlap: all three count.
    for e in (summary(5.5, 1, 3), summary(5.6, 2, 5), raw[5], summary(6.5, 4, 6)):
        await service.append_event(session, e)
    assert await index(redis_client) == [(1, 3), (2, 5), (4, 6)]
    # A rolling summary contains them all: they stop counting.
    await service.append_event(session, summary(6.6, 1, 6))
    assert await index(redis_client) == [(1, 6)]
    # Of equal ranges, the latest counts; a contained later one is kept (the newest
    # summary is always listed) until a later one contains it.
    await service.append_event(session, summary(6.7, 1, 6, "again"))
    await service.append_event(session, summary(6.8, 2, 4))
    assert await index(redis_client) == [(1, 6), (2, 4)]
    read = await service.get_session(app_name=A, user_id=U, session_id="s", config=reads())
    assert read is not None
    # The tail starts where the newest summary ends (turn 4); before it, only the first
    # turn (at the boundary millisecond of the first range) is read.
    texts = [p.text for e in read.events if e.content for p in e.content.parts or []]
    assert texts == ["turn 1", "turn 4", "turn 5", "turn 6"]
    assert await full_reads(redis_client) is None


async def test_index_expires_and_goes_with_the_session(
    redis_client: Any, worker_client: Any
) -> None:
    service = RedisSessionService(worker_client)
    session = await service.create_session(app_name=A, user_id=U, session_id="s", ttl=600)
    for e in (event(1, "turn 1"), event(2, "turn 2"), summary(3, 1, 2)):
        await service.append_event(session, e)
    keys = service._engine.keys.session(A, U, "s")
    assert 0 < await redis_client.ttl(keys.compactions) <= 600
    await service.delete_session(app_name=A, user_id=U, session_id="s")
    assert not await redis_client.exists(keys.compactions)


@pytest.mark.parametrize(
    ("reason", "unusual"),
    [
        ("rewind", event(5, actions=EventActions(rewind_before_invocation_id="inv"))),
        ("scope", event(5, "scoped", isolation_scope="task-1")),
        ("interrupt", event(5, "waiting", long_running_tool_ids={"call-1"})),
        ("resume", event(5, actions=EventActions(agent_state={"step": 1}))),
        ("compaction", summary(5, 4, 1)),  # ends before it starts
        ("compaction", summary(5, 1, 9)),  # ends after its own entry
        ("clock", event(1.5, "late")),  # older than the newest entry
    ],
)
async def test_sessions_compaction_reads_cannot_model_are_read_in_full(
    redis_client: Any, worker_client: Any, reason: str, unusual: Event
) -> None:
    service = RedisSessionService(worker_client)
    raw = [event(i, f"turn {i}") for i in range(1, 5)]
    await session_with(service, *raw, summary(4.5, 1, 4), unusual, event(6, "turn 6"))
    assert await full_reads(redis_client) == reason
    whole, read = await both_reads(service, "s", "tokens")
    assert read.events == whole.events
    assert len(read.events) == 7


@pytest.mark.parametrize("bound", [math.nan, math.inf])
async def test_a_summary_with_a_bound_json_cannot_hold_is_refused(
    redis_client: Any, worker_client: Any, bound: float
) -> None:
    service = RedisSessionService(worker_client)
    session = await session_with(service, event(1, "turn 1"))
    before = await snapshot(redis_client)
    with pytest.raises(InvalidInputError, match="finite"):
        await service.append_event(session, summary(2, 1, bound))
    assert await snapshot(redis_client) == before
    assert len(session.events) == 1


async def test_a_response_whose_call_was_summarized_means_a_full_read(
    worker_client: Any,
) -> None:
    """ADK re-injects a compacted function call before its surviving response, from the
    whole history: such a session is read in full."""
    service = RedisSessionService(worker_client)
    call = types.Part(function_call=types.FunctionCall(id="c1", name="lookup", args={}))
    answer = types.Part(
        function_response=types.FunctionResponse(id="c1", name="lookup", response={"x": 1})
    )
    calling = event(2)
    calling.content = types.Content(role="model", parts=[call])
    answering = event(5)
    answering.content = types.Content(role="user", parts=[answer])
    await session_with(
        service, event(1, "turn 1"), calling, event(3, "turn 3"), summary(4, 1, 3), answering
    )
    whole, read = await both_reads(service, "s", "tokens")
    assert read.events == whole.events


async def test_without_summaries_or_session(worker_client: Any) -> None:
    service = RedisSessionService(worker_client)
    await session_with(service, event(1, "turn 1"), event(2, "turn 2"))
    whole, read = await both_reads(service, "s", "tokens")
    assert read.events == whole.events
    assert read == whole
    missing = await service.get_session(app_name=A, user_id=U, session_id="nope", config=reads())
    assert missing is None


async def test_compacted_reads_are_not_combined_with_narrowing(worker_client: Any) -> None:
    service = RedisSessionService(worker_client)
    await session_with(service, event(1, "turn 1"))
    for narrowing in ({"num_recent_events": 3}, {"after_timestamp": T0}):
        with pytest.raises(InvalidInputError, match="CompactedReads"):
            await service.get_session(
                app_name="a",
                user_id="u",
                session_id="s",
                config=CompactedReads(compaction=None, **narrowing),
            )
    assert isinstance(reads(), GetSessionConfig)


async def test_after_a_read_the_session_takes_appends(worker_client: Any) -> None:
    """A compacted copy carries the revision it was read at: appends from it land, and a
    stale one is refused like any other."""
    service = RedisSessionService(worker_client)
    raw = [event(i, f"turn {i}") for i in range(1, 6)]
    await session_with(service, *raw, summary(5.5, 1, 4))
    _, read = await both_reads(service, "s", "tokens")
    _, other = await both_reads(service, "s", "tokens")
    await service.append_event(read, event(7, "turn 7"))
    whole = await service.get_session(app_name=A, user_id=U, session_id="s")
    assert whole is not None
    assert whole.events[-1].id == read.events[-1].id
    with pytest.raises(StaleSessionError):
        await service.append_event(other, event(8, "turn 8"))
