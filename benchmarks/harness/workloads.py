"""Events, sessions and names the benchmarks work with; public API only.

Event builders (each deterministic apart from ids and times):

- :func:`make_event`: a booking conversation turn (text content; a state delta with
  session and ``user:`` keys), the core models. The default workload.
- :func:`make_kind_turn`: the same text, agent turns with a function call, and a delta of
  session keys only, or with ``user:`` or ``app:`` keys (the cluster benchmark).
- :func:`make_adk_event`: a tool-using ADK conversation (google-adk models).
- :func:`make_transfer_event`: ~200 characters of text, every 5th turn a function call and
  response (the export/import benchmark).
- :func:`make_page_event`: one small event (the listing benchmark's seed).
- :func:`make_memory_events`: memory entries of Zipf-distributed words.
- :func:`tiny_event`: a bare event with a two-key delta (the write-concern benchmark).

This module imports only the library's public API (``redis_agent_sessions``), so that
``benchmarks.ab`` can run it against any revision of the library.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from redis_agent_sessions import Content, Event, EventActions, Part, Session

__all__ = [
    "FUNCTION_ARGS",
    "MEMORY_VOCAB",
    "Workload",
    "adk_compaction_app",
    "events_for",
    "in_chunks",
    "initial_state",
    "make_adk_event",
    "make_event",
    "make_kind_turn",
    "make_memory_events",
    "make_page_event",
    "make_transfer_event",
    "seed_session",
    "tiny_event",
    "unique_prefix",
    "user_name",
]


def unique_prefix(tag: str) -> str:
    """A key prefix of this run's own: ``ras-bench-<tag>-<8 hex>``."""
    return f"ras-bench-{tag}-{uuid.uuid4().hex[:8]}"


def user_name(index: int, users: int) -> str:
    """User ``index % users``: ``user-0042``."""
    return f"user-{index % users:04d}"


def initial_state() -> dict[str, Any]:
    """A new booking session's state: a session key, a ``user:`` key and an ``app:`` key."""
    return {"booking_step": "start", "user:name": "Ravi", "app:fare_currency": "EUR"}


# -- the booking conversation (core models) --------------------------------------------------

_USER_LINES = (
    "I need a flight from Lisbon to Berlin next Tuesday morning, one adult, economy please.",
    "Aisle seat if possible, and I will bring one checked bag of about 20 kg.",
    "The 08:40 departure works. Can you also check whether there is a later return on Friday?",
    "Please use the card ending in 4421 and send the confirmation to my work address.",
)
_AGENT_LINES = (
    "I found three nonstop options: TP 552 at 08:40 (EUR 129), LH 1167 at 11:05 (EUR 164) and "
    "TP 556 at 17:20 (EUR 118). All include a cabin bag; a checked bag costs EUR 35 extra.",
    "Seat 14C (aisle) is available on TP 552. I have added one checked bag, total now EUR 164.",
    "On Friday the latest return is TP 557 at 20:55 from Berlin, arriving 23:10, fare EUR 141.",
    "Booking confirmed: reference K7QX2M. The e-ticket and receipt are on their way by email.",
)


def make_event(turn: int, invocation_id: str) -> Event:
    """One realistic turn: text content, and a delta on session and ``user:`` keys."""
    by_user = turn % 2 == 0
    lines = _USER_LINES if by_user else _AGENT_LINES
    delta: dict[str, Any] = {
        "booking_step": ("search", "select", "extras", "pay")[turn % 4],
        "turn": turn,
        "user:last_seen": time.time(),
    }
    if not by_user:
        delta["itinerary"] = {"from": "LIS", "to": "BER", "flight": "TP552", "fare": 129.0}
        delta["user:preferred_seat"] = "aisle"
    return Event(
        invocation_id=invocation_id,
        author="user" if by_user else "booking_agent",
        content=Content(
            role="user" if by_user else "model", parts=[Part(text=lines[turn % len(lines)])]
        ),
        actions=EventActions(state_delta=delta),
    )


FUNCTION_ARGS = {
    "origin": "LIS",
    "destination": "BER",
    "date": "2025-06-03",
    "cabin": "economy",
    "passengers": 1,
}


def kind_delta(turn: int, kind: str) -> dict[str, Any]:
    """A delta of session keys, plus ``user:`` keys (``kind`` "user") or ``app:`` keys."""
    delta: dict[str, Any] = {
        "booking_step": ("search", "select", "extras", "pay")[turn % 4],
        "turn": turn,
        "itinerary": {"from": "LIS", "to": "BER", "flight": "TP552", "fare": 129.0},
    }
    if kind == "user":
        delta["user:last_seen"] = time.time()
        delta["user:preferred_seat"] = "aisle"
    elif kind == "app":
        delta["app:fares_checked_at"] = time.time()
        delta["app:fare_cache_version"] = turn
    return delta


def make_kind_turn(turn: int, kind: str, invocation: str) -> Event:
    """:func:`make_event`'s text (agent turns add a function call) with ``kind``'s delta."""
    base = make_event(turn, invocation)
    assert base.content is not None
    parts = list(base.content.parts or [])
    if base.author != "user":
        call = {"id": f"call-{turn}", "name": "search_flights", "args": FUNCTION_ARGS}
        parts.append(Part.model_validate({"function_call": call}))
    return Event(
        invocation_id=invocation,
        author=base.author,
        content=Content(role=base.content.role, parts=parts),
        actions=EventActions(state_delta=kind_delta(turn, kind)),
    )


# -- other shapes ----------------------------------------------------------------------------

_LONG_USER_LINES = (
    "I need a flight from Lisbon to Berlin next Tuesday morning, one adult, economy please. "
    "Aisle seat if possible, and one checked bag of about 20 kg; the 08:40 departure works.",
    "Can you also check whether there is a later return on Friday evening? Please use the card "
    "ending in 4421 and send the confirmation to my work address, not the personal one.",
)
_LONG_AGENT_LINES = (
    "I found three nonstop options: TP 552 at 08:40 (EUR 129), LH 1167 at 11:05 (EUR 164) and "
    "TP 556 at 17:20 (EUR 118). All include a cabin bag; a checked bag costs EUR 35 extra.",
    "Seat 14C (aisle) is held on TP 552 and one checked bag is added, total now EUR 164. On "
    "Friday the latest return is TP 557 at 20:55 from Berlin, arriving 23:10, fare EUR 141.",
)


def make_transfer_event(session_no: int, turn: int) -> Event:
    """One turn: ~200 characters of text; every 5th turn also a tool call and its result."""
    by_user = turn % 2 == 0
    lines = _LONG_USER_LINES if by_user else _LONG_AGENT_LINES
    text = f"[{session_no}/{turn}] {lines[(turn // 2) % len(lines)]}"
    parts = [Part(text=text)]
    if turn % 5 == 4:
        call_id = f"call-{session_no}-{turn}"
        args = {"origin": "LIS", "destination": "BER", "date": "2025-06-10", "adults": 1}
        parts += [
            Part(function_call={"id": call_id, "name": "search_flights", "args": args}),
            Part(
                function_response={
                    "id": call_id,
                    "name": "search_flights",
                    "response": {
                        "flights": [
                            {"flight": "TP552", "departs": "08:40", "fare": 129.0},
                            {"flight": "LH1167", "departs": "11:05", "fare": 164.0},
                        ]
                    },
                }
            ),
        ]
    delta: dict[str, Any] = {
        "booking_step": ("search", "select", "extras", "pay")[turn % 4],
        "turn": turn,
    }
    if turn % 10 == 0:
        delta["user:last_seen"] = time.time()
    return Event(
        invocation_id=f"inv-{session_no}-{turn // 2}",
        author="user" if by_user else "booking_agent",
        content=Content(role="user" if by_user else "model", parts=parts),
        actions=EventActions(state_delta=delta),
    )


def make_page_event(number: int) -> Event:
    """A small agent event with a three-key delta (one ``user:`` key)."""
    return Event(
        invocation_id=f"seed-{number}",
        author="booking_agent",
        content=Content(role="model", parts=[Part(text="Seat 14C (aisle) is held for you.")]),
        actions=EventActions(
            state_delta={"booking_step": "select", "turn": 1, "user:last_seen": time.time()}
        ),
    )


def tiny_event(i: int) -> Event:
    """No content; a delta of one session key and one ``user:`` key."""
    return Event(actions=EventActions(state_delta={"k": i, "user:u": i}))


MEMORY_VOCAB = [f"w{i}" for i in range(5000)]
_MEMORY_WEIGHTS = [1 / (i + 1) for i in range(len(MEMORY_VOCAB))]


def memory_words(rng: random.Random, count: int) -> list[str]:
    """``count`` words of a Zipf-distributed vocabulary (some are in most entries)."""
    return rng.choices(MEMORY_VOCAB, _MEMORY_WEIGHTS, k=count)


def make_memory_events(rng: random.Random, start: int, count: int, prefix: str) -> list[Event]:
    """Events of 12 Zipf-distributed words each, ids ``prefix<i>``."""
    return [
        Event(
            id=f"{prefix}{i}",
            timestamp=1_700_000_000 + i,
            content=Content(parts=[Part(text=" ".join(memory_words(rng, 12)))]),
        )
        for i in range(start, start + count)
    ]


def make_adk_event(i: int) -> Any:
    """One event of a booking conversation, google-adk models: user text, tool call, tool
    result (with a state delta), reply (with a state delta), in turn."""
    from google.adk.events import Event as AdkEvent
    from google.adk.events import EventActions as AdkActions
    from google.genai import types

    kind = i % 4
    inv = f"e-{i // 4:06d}"
    if kind == 0:
        content = types.Content(role="user", parts=[types.Part(text=f"Find flights, turn {i}")])
        return AdkEvent(invocation_id=inv, author="user", content=content)
    if kind == 1:
        call = types.Part.from_function_call(
            name="search_flights", args={"origin": "NYC", "destination": "Paris"}
        )
        return AdkEvent(
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
        return AdkEvent(
            invocation_id=inv,
            author="booking_agent",
            content=types.Content(role="user", parts=[result]),
            actions=AdkActions(
                state_delta={"search_results": flights, "booking_step": "select_flight"}
            ),
        )
    reply = f"I found 3 flights from NYC to Paris; the cheapest is AA0 at $400 (turn {i})."
    return AdkEvent(
        invocation_id=inv,
        author="booking_agent",
        content=types.Content(role="model", parts=[types.Part(text=reply)]),
        actions=AdkActions(state_delta={"last_response": reply}),
    )


def adk_compaction_app() -> ModuleType:
    """tests/adk_compaction_app.py: the scripted ADK app whose LLM requests
    tests/test_adk_compacted_reads.py proves identical with and without compacted reads
    (imported from tests/, with its sibling modules; not part of the package)."""
    import warnings

    warnings.filterwarnings("ignore", message=r"\[EXPERIMENTAL\]")
    tests = str(Path(__file__).resolve().parents[2] / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import adk_compaction_app

    return adk_compaction_app


# -- sessions --------------------------------------------------------------------------------


async def seed_session(
    service: Any,
    app: str,
    user: str,
    count: int,
    make: Callable[[int], Any],
    *,
    session_id: str | None = None,
    state: dict[str, Any] | None = None,
) -> Any:
    """A new session given ``count`` events (``make(i)``) by the real ``append_event``."""
    session = await service.create_session(
        app_name=app, user_id=user, session_id=session_id, state=state
    )
    for i in range(count):
        await service.append_event(session, make(i))
    return session


class Workload:
    """Booking sessions and events of one app, under one service."""

    def __init__(self, service: Any, app: str, users: int = 50) -> None:
        self.service = service
        self.app = app
        self.users = users
        self._next_user = 0

    def next_user(self) -> str:
        self._next_user += 1
        return user_name(self._next_user, self.users)

    async def new_session(self, service: Any = None) -> Session:
        session: Session = await (service or self.service).create_session(
            app_name=self.app, user_id=self.next_user(), state=initial_state()
        )
        return session

    async def fill(self, session: Session, count: int) -> None:
        """Append ``count`` events with the real ``append_event``."""
        invocation = str(uuid.uuid4())
        start = len(session.events)
        for turn in range(start, start + count):
            await self.service.append_event(session, make_event(turn, invocation))

    async def sessions_with(self, count: int, events: int) -> list[Session]:
        limit = asyncio.Semaphore(16)

        async def one() -> Session:
            async with limit:
                session = await self.new_session()
                await self.fill(session, events)
                return session

        return list(await asyncio.gather(*(one() for _ in range(count))))


def events_for(sessions: Sequence[Session], count: int) -> list[tuple[Session, Event]]:
    """``count`` (session, event) pairs, round-robin over ``sessions``."""
    invocation = str(uuid.uuid4())
    return [
        (s, make_event(len(s.events) + i // len(sessions), invocation))
        for i, s in ((i, sessions[i % len(sessions)]) for i in range(count))
    ]


async def in_chunks(
    calls: Sequence[Callable[[], Awaitable[Any]]],
    label: str,
    chunk: int,
    progress: Callable[[str], None],
) -> list[Any]:
    """Run ``calls`` ``chunk`` at a time (``asyncio.gather``), saying how far it got."""
    out: list[Any] = []
    step = max(1, len(calls) // 10)
    for start in range(0, len(calls), chunk):
        out += await asyncio.gather(*(call() for call in calls[start : start + chunk]))
        done = min(len(calls), start + chunk)
        if done // step != start // step or done == len(calls):
            progress(f"{label}: {done:,}/{len(calls):,}")
    return out
