"""Writers racing on one session under the reject policy: what a lost race costs.

A stale append's refusal carries what the copy lacks (single-node layout), so the
refresh that follows reads nothing; writers of one worker take turns, so none loses race
after race. Runs on every backend of the contract suites (conftest.py); on a cluster the
refresh reads, and the rest holds the same.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from _spies import decoded
from redis_agent_sessions import RedisSessionService, Session, StaleSessionError
from redis_agent_sessions.sessions import _catch_up, _turns
from test_sessions import APP, USER, delta_event, fresh


@contextmanager
def reads(service: Any) -> Iterator[list[int]]:
    """Counts the session reads (snapshots) ``service`` makes."""
    reads = service._engine.reads
    calls: list[int] = []
    original = reads.snapshot

    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return await original(*args, **kwargs)

    reads.snapshot = counted
    try:
        yield calls
    finally:
        del reads.snapshot


async def _lost_race(service: RedisSessionService) -> tuple[Session, Session]:
    """A session, and a copy of it that another writer has overtaken by two events, after
    the copy's append was refused."""
    s = await service.create_session(app_name=APP, user_id=USER, state={"n": 0})
    await service.append_event(s, delta_event({"n": 1}))
    held = await fresh(service, s.id)
    await service.append_event(s, delta_event({"n": 2, "user:seen": 1}))
    await service.append_event(s, delta_event({"n": 3, "app:fare": "EUR"}))
    before = held.model_copy(deep=True)
    with pytest.raises(StaleSessionError):
        await service.append_event(held, delta_event({"n": 99}))
    assert held == before  # a refusal leaves the copy as it was
    return s, held


async def test_a_refusal_carries_what_the_refresh_needs(
    service: RedisSessionService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whether the catch-up is used is under test, not when it lapses (test_a_late_refresh_
    # reads): a runner stalled past 0.1 s before the refresh must not make it read.
    monkeypatch.setattr(_catch_up, "SECONDS", 60.0)
    s, held = await _lost_race(service)
    with reads(service) as snapshots, decoded(service) as counts:
        await service.refresh(held)
    assert held == await fresh(service, s.id)
    assert held.state == {"n": 3, "user:seen": 1, "app:fare": "EUR"}
    assert counts == [2]  # only the two events it lacked
    # The catch-up rides on the refusal on a single node; a cluster's app state is in
    # another slot, so there the refresh reads (once).
    assert snapshots == ([1] if service._engine.layout.name == "cluster" else [])
    await service.append_event(held, delta_event({"n": 4}))  # the retry is accepted
    assert (await fresh(service, s.id)).state["n"] == 4


async def test_a_late_refresh_reads(
    service: RedisSessionService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_catch_up, "SECONDS", 0.0)  # every catch-up has lapsed
    s, held = await _lost_race(service)
    with reads(service) as snapshots:
        await service.refresh(held)
    assert snapshots == [1]
    assert held == await fresh(service, s.id)


async def test_a_catch_up_never_serves_a_copy_elsewhere(service: RedisSessionService) -> None:
    """A catch-up is for copies at the refused copy's exact position; a copy that is
    behind by a different amount, or ahead, reads."""
    s, held = await _lost_race(service)
    older = await fresh(service, s.id)
    await service.append_event(s, delta_event({"n": 4}))
    with reads(service) as snapshots:
        await service.refresh(older)
    assert snapshots == [1]
    assert older == await fresh(service, s.id)
    await service.refresh(held)  # its catch-up (to n=3) would be one event short now
    assert held == await fresh(service, s.id)


async def test_merge_policy_asks_for_no_catch_up(make_service: Any) -> None:
    service = make_service(stale_policy="merge")
    s = await service.create_session(app_name=APP, user_id=USER)
    held = await fresh(service, s.id)
    await service.append_event(s, delta_event({"n": 1}))
    await service.append_event(held, delta_event({"n": 2}))  # merged, not refused
    assert len(service._engine.catch_ups) == 0


@pytest.mark.adk
async def test_adk_refusal_carries_the_catch_up_too(
    worker_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_catch_up, "SECONDS", 60.0)  # as above: the lapse is tested apart
    from redis_agent_sessions.adk import RedisSessionService as AdkService

    adk_service = AdkService(worker_client)
    s = await adk_service.create_session(app_name=APP, user_id=USER)
    first = await adk_service.get_session(app_name=APP, user_id=USER, session_id=s.id)
    second = await adk_service.get_session(app_name=APP, user_id=USER, session_id=s.id)
    assert first is not None
    assert second is not None
    await adk_service.append_event(first, _adk_event("first"))
    marker = second._storage_update_marker
    with pytest.raises(ValueError, match="modified in storage"):
        await adk_service.append_event(second, _adk_event("second"))
    assert second._storage_update_marker == marker
    assert second.events == []
    with reads(adk_service) as snapshots:
        await adk_service.refresh(second)
    assert snapshots == ([1] if adk_service._engine.layout.name == "cluster" else [])
    assert [e.author for e in second.events] == ["first"]
    await adk_service.append_event(second, _adk_event("second"))


def _adk_event(author: str) -> Any:
    from google.adk.events import Event as AdkEvent

    return AdkEvent(author=author, invocation_id=str(uuid.uuid4()))


# -- several writers of one worker racing ---------------------------------------------------

WRITERS = 4
EVENTS_EACH = 30


async def _race(
    service: RedisSessionService, writers: int
) -> tuple[Session, list[Session], list[int]]:
    """``writers`` tasks each append EVENTS_EACH events to one session as fast as they can,
    refreshing and retrying on every refusal; returns the session, the writers' copies and
    the tries each event took."""
    s = await service.create_session(app_name=APP, user_id=USER)
    copies = [await fresh(service, s.id) for _ in range(writers)]
    tries: list[int] = []

    async def writer(copy: Session, w: int) -> None:
        for i in range(EVENTS_EACH):
            event = delta_event({f"w{w}": i})
            for attempt in range(1, 100):
                try:
                    await service.append_event(copy, event)
                except StaleSessionError:
                    await service.refresh(copy)
                    continue
                tries.append(attempt)
                break

    await asyncio.gather(*(writer(c, w) for w, c in enumerate(copies)))
    return s, copies, tries


@contextmanager
def refusals(service: Any) -> Iterator[list[int]]:
    """Collects the status of every append the server refused as stale (-2)."""
    runner = service._engine.ctx.runner
    refused: list[int] = []
    original = runner.run

    async def counted(script: Any, *args: Any, **kwargs: Any) -> Any:
        reply = await original(script, *args, **kwargs)
        if script is runner.append and reply[0] == -2:
            refused.append(-2)
        return reply

    runner.run = counted  # type: ignore[method-assign]
    try:
        yield refused
    finally:
        del runner.run


async def test_writers_of_one_worker_take_turns(
    service: RedisSessionService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fairness is under test, not expiry (test_a_lost_writer_that_never_retries_...): a
    # refresh slowed past 10 ms by a loaded runner must not cost the writer its place.
    monkeypatch.setattr(_turns, "GRACE", 1.0)
    # Nor when a catch-up lapses (test_a_late_refresh_reads): a waiting writer stalled past
    # 0.1 s on a loaded runner found its catch-up gone, sent its append, and the server
    # refused it, once 12 refusals against the bound of 8 below.
    monkeypatch.setattr(_catch_up, "SECONDS", 60.0)
    with refusals(service) as refused:
        s, copies, tries = await _race(service, WRITERS)
    stored = await fresh(service, s.id)
    assert len(stored.events) == WRITERS * EVENTS_EACH == len(tries)
    assert len({e.id for e in stored.events}) == len(stored.events)
    # Every copy, brought up to date by refreshes that chained the catch-ups of the
    # writers ahead of it, holds the stored history in order, up to its last append.
    stored_ids = [e.id for e in stored.events]
    for copy in copies:
        ids = [e.id for e in copy.events]
        assert ids == stored_ids[: len(ids)]
        assert copy.events[-1].actions.state_delta.items() <= copy.state.items()
        await service.refresh(copy)
        assert copy.model_dump() == stored.model_dump()
    assert stored.state == {f"w{w}": EVENTS_EACH - 1 for w in range(WRITERS)}
    # A lost race puts its writer in line; nobody loses race after race. (Without the
    # turns, in a tight loop the writer whose append won sends its next one first and
    # wins again: a loser then fails 10 tries and more.)
    assert max(tries) <= 2 * WRITERS, sorted(tries)[-10:]
    if service._engine.layout.name == "single":
        # Only the first race reaches the server: after it the writers go one at a time,
        # each refreshed by the previous append's reply before it sends. (When the writer
        # whose turn ended sent its next append ahead of the waiting one, about half of
        # all appends were refused: 58-61 of 120.) A cluster's refusals carry no catch-up.
        assert len(refused) <= 2 * WRITERS, len(refused)


async def test_writers_retrying_the_adk_way_take_turns(
    service: RedisSessionService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ADK's users retry with a new get_session and a new event: neither the session object
    nor the event is the one refused, so the turn is recognised by the task, and held while
    that task reads the session again."""
    monkeypatch.setattr(_turns, "GRACE", 1.0)  # as above: a slow runner is not under test
    s = await service.create_session(app_name=APP, user_id=USER)
    tries: list[int] = []

    async def writer(w: int) -> None:
        for i in range(EVENTS_EACH):
            for attempt in range(1, 100):
                copy = await fresh(service, s.id)
                try:
                    await service.append_event(copy, delta_event({f"w{w}": i}))
                except StaleSessionError:
                    continue
                tries.append(attempt)
                break

    await asyncio.gather(*(writer(w) for w in range(WRITERS)))
    stored = await fresh(service, s.id)
    assert len(stored.events) == WRITERS * EVENTS_EACH == len(tries)
    assert stored.state == {f"w{w}": EVENTS_EACH - 1 for w in range(WRITERS)}
    # Recognised by object or event only, such writers lost 20 races in a row and more.
    assert max(tries) <= 2 * WRITERS, sorted(tries)[-10:]


async def test_a_lost_writer_keeps_its_place_while_it_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_turns, "GRACE", 0.05)
    turns, order = _turns.Turns(), []
    turns.owe(KEY, A)
    turns.reading(KEY, TASK_A, done=False)  # A reads the session again: slower than GRACE
    waiting = asyncio.create_task(_in_line(turns, B, order))
    await asyncio.sleep(0.15)
    assert order == []  # B waits behind A's held place
    turns.reading(KEY, TASK_A, done=True)
    retry = (_turns.Ref(object()), "a-new", TASK_A)  # a new copy and event, the same task
    place = await turns.take(KEY, retry)
    assert place == A
    turns.taken(KEY, place, lost=False)
    await waiting
    assert order == ["b1"]
    assert not turns.in_line(KEY)


# -- the line itself (no server) -------------------------------------------------------------

KEY = "session-key"
TASK_A, TASK_B, TASK_C = object(), object(), object()
COPY_A, COPY_B, COPY_C = _turns.Ref(object()), _turns.Ref(object()), _turns.Ref(object())
A, A_NEXT = (COPY_A, "a1", TASK_A), (COPY_A, "a2", TASK_A)
B, C = (COPY_B, "b1", TASK_B), (COPY_C, "c1", TASK_C)


async def _in_line(turns: _turns.Turns, writer: _turns.Writer, order: list[str]) -> None:
    place = await turns.take(KEY, writer)
    order.append(writer[1])
    await asyncio.sleep(0)
    if place is not None:
        turns.taken(KEY, place, lost=False)


async def test_a_writer_whose_turn_ended_queues_behind_the_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_turns, "GRACE", 60.0)  # the order is under test, not the expiry
    turns, order = _turns.Turns(), []
    turns.owe(KEY, A)
    waiting = asyncio.create_task(_in_line(turns, B, order))
    await asyncio.sleep(0)
    place = await turns.take(KEY, A)  # A's retry: its turn at once
    assert place == A
    assert turns.waiting(KEY, place)
    turns.taken(KEY, place, lost=False)
    # A's next append (same session object, next event) goes after B, not before it.
    assert turns.in_line(KEY)
    await _in_line(turns, A_NEXT, order)
    await waiting
    assert order == ["b1", "a2"]
    assert not turns.in_line(KEY)


async def test_a_writer_that_leaves_the_line_lets_the_others_move_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_turns, "GRACE", 60.0)  # the order is under test, not the expiry
    turns, order = _turns.Turns(), []
    turns.owe(KEY, A)
    place = await turns.take(KEY, A)
    leaving = asyncio.create_task(_in_line(turns, B, order))
    staying = asyncio.create_task(_in_line(turns, C, order))
    await asyncio.sleep(0)
    leaving.cancel()
    await asyncio.sleep(0)
    assert place is not None
    turns.taken(KEY, place, lost=False)
    await asyncio.wait_for(staying, 1)
    assert order == ["c1"]
    assert not turns.in_line(KEY)


async def test_a_lost_writer_that_never_retries_holds_the_line_for_grace_only() -> None:
    turns, order = _turns.Turns(), []
    started = time.monotonic()  # before the place is held: a stall between can only add
    turns.owe(KEY, A)
    await asyncio.wait_for(_in_line(turns, B, order), 1)
    assert order == ["b1"]
    assert not turns.in_line(KEY)
    assert time.monotonic() - started >= _turns.GRACE * 0.9
