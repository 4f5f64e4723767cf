"""The demo's worker process: scripted flight-booking turns, no LLM.

A worker owns nothing but a name. It takes jobs from its own Redis list, loads the
session fresh from Redis for every job (any worker may have served the previous turn),
appends the turn's events and reports what it saw on a shared results list. The
dispatcher and the workers share nothing but Redis.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import multiprocessing
import os
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from redis_agent_sessions._messages import plural
from redis_agent_sessions._redis.lifecycle import AnyRedis, client_for
from redis_agent_sessions._redis.uri import parse_service_url
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import StaleSessionError
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.models import Content, Event, EventActions, Part, Session
from redis_agent_sessions.sessions import RedisSessionService

APP = "booking_app"
AGENT = "booking_agent"
INSTRUCTION = "Current booking step: {booking_step?}"
FLIGHTS = [
    {"flight": "AA101", "price": 450, "time": "8:00 AM"},
    {"flight": "UA202", "price": 380, "time": "11:30 AM"},
    {"flight": "DL303", "price": 520, "time": "3:00 PM"},
]
JOB_TIMEOUT = 10.0
IDLE_EXIT = 60.0


@dataclass(frozen=True)
class Turn:
    kind: str  # "search", "book" or "system"
    text: str = ""
    arg: str = ""


@dataclass(frozen=True)
class Conversation:
    user: str
    name: str
    turns: tuple[Turn, ...]
    books: str  # the flight the conversation ends up booking

    @property
    def session_id(self) -> str:
        return f"{self.user}-trip"


def _book(flight: str, text: str = "Book {} please") -> Turn:
    return Turn("book", text.format(flight), flight)


SEARCH = Turn("search", "Find flights from NYC to Paris", "NYC>Paris")
# Scenario 1 for three users; user3 first asks for a flight that is not in the results,
# user1's conversation ends with scenario 2's system event.
SCRIPT = (
    Conversation("user1", "Ravi", (SEARCH, _book("UA202"), Turn("system")), "UA202"),
    Conversation("user2", "Mei", (SEARCH, _book("AA101")), "AA101"),
    Conversation(
        "user3", "Ana", (SEARCH, _book("BA999"), _book("DL303", "Then {} please")), "DL303"
    ),
)
CONVERSATIONS = {c.user: c for c in SCRIPT}


def connect(url: str, prefix: str | None = None) -> tuple[AnyRedis, SessionServiceConfig]:
    """A client for ``url`` and the config its query gives, read as every service reads a
    URL (the library's settings, ``cluster=true``, TLS files), with ``prefix`` as the key
    prefix when given; InvalidInputError or ValueError for a URL it cannot use. Makes no
    connection yet."""
    parsed = parse_service_url(url)
    config = parsed.config(None)
    if prefix is not None:
        config = SessionServiceConfig(**{**config.model_dump(), "key_prefix": prefix})
    return client_for(parsed, config, False, {}), config


def queue_key(prefix: str, worker: str) -> str:
    return KeySpace(prefix).demo("queue", worker)


def results_key(prefix: str) -> str:
    return KeySpace(prefix).demo("results")


def render_instruction(template: str, state: dict[str, Any]) -> str:
    """ADK-style ``{key}`` substitution; ``{key?}`` is empty when the key is absent."""

    def value(match: re.Match[str]) -> str:
        key, optional = match.group(1), match.group(2)
        if key in state:
            return str(state[key])
        if optional:
            return ""
        raise KeyError(f"context variable not found: {key}")

    return re.sub(r"\{([A-Za-z_][\w:]*)(\?)?\}", value, template)


def search_flights(origin: str, destination: str) -> list[dict[str, Any]]:
    return [dict(f) for f in FLIGHTS]


def book_flight(number: str, state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tool's result and the state delta it writes (none on error)."""
    found = next((f for f in state.get("search_results", []) if f["flight"] == number), None)
    if found is None:
        return {"error": f"Flight {number} not found in search results"}, {}
    delta = {
        "booked_flight": found,
        "booking_step": "confirmed",
        # From the value this worker just read; the stale check makes that safe.
        "user:total_bookings": state.get("user:total_bookings", 0) + 1,
    }
    return {"status": "booked", **found}, delta


class _Turn:
    """Appends one turn's events; ids are derived from the turn so a retry is idempotent."""

    def __init__(self, svc: RedisSessionService, session: Session, prefix: str, tag: str):
        self.svc, self.session = svc, session
        self.invocation = f"inv-{session.user_id}-{tag}"
        self._base = f"{prefix}/{session.app_name}/{session.user_id}/{session.id}/{tag}"
        self._count = 0

    async def append(
        self, author: str, parts: list[dict[str, Any]] | None, delta: dict[str, Any], role: str = ""
    ) -> None:
        content = (
            Content(role=role, parts=[Part.model_validate(p) for p in parts]) if parts else None
        )
        event = Event(
            id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self._base}/{self._count + 1}")),
            invocation_id=self.invocation,
            author=author,
            content=content,
            actions=EventActions(state_delta=delta),
        )
        await self.svc.append_event(self.session, event)
        # Only a stored event moves on: a rejected one is retried under the same id.
        self._count += 1


async def _play(svc: RedisSessionService, session: Session, prefix: str, turn_no: int) -> str:
    """Run scripted turn ``turn_no`` on ``session``; returns a one-line tool summary."""
    turn = CONVERSATIONS[session.user_id].turns[turn_no - 1]
    t = _Turn(svc, session, prefix, f"turn{turn_no}")
    if turn.kind == "system":
        # Scenario 2: one system event touching every scope.
        t.invocation = "inv_system_update"
        delta = {
            "task_status": "active",
            "user:login_count": 5,
            # A time as people and JSON read it (an epoch float reads as noise in state).
            "user:last_login": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "app:maintenance_mode": False,
            "temp:validation_result": {"valid": True},
        }
        await t.append("system", None, delta)
        return "system event: task_status, user:login_count, app:maintenance_mode, temp:..."
    await t.append("user", [{"text": turn.text}], {}, role="user")
    if turn.kind == "search":
        origin, destination = turn.arg.split(">")
        result: Any = search_flights(origin, destination)
        delta = {
            "search_results": result,
            "origin": origin,
            "destination": destination,
            "booking_step": "select_flight",
            "temp:raw_search": {"query": turn.text, "hits": len(result)},
        }
        name, reply = (
            "search_flights",
            f"I found {plural(len(result), 'flight')} from {origin} to {destination}.",
        )
        summary = f"search_flights({origin!r}, {destination!r}) -> {plural(len(result), 'flight')}"
    else:
        result, delta = book_flight(turn.arg, session.state)
        name = "book_flight"
        reply = (
            result.get("error") or f"Booked {turn.arg} at {result['time']} for ${result['price']}."
        )
        summary = f"book_flight({turn.arg!r}) -> {result.get('error') or 'booked'}"
    response = {"function_response": {"name": name, "response": {"result": result}}}
    await t.append(AGENT, [response], delta, role="user")
    # output_key="last_response": the agent's final text is also kept in state.
    await t.append(AGENT, [{"text": reply}], {"last_response": reply}, role="model")
    return summary


async def _turn_job(svc: RedisSessionService, job: dict[str, Any]) -> dict[str, Any]:
    user, turn_no = job["user"], job["turn"]
    stale = 0
    session = await svc.get_session(app_name=APP, user_id=user, session_id=job["session_id"])
    if session is None:
        raise RuntimeError(f"session {job['session_id']} not found")
    while True:
        before = dict(session.state)
        try:
            summary = await _play(svc, session, job["prefix"], turn_no)
            break
        except StaleSessionError:
            # Someone appended between our read and our write: catch up, redo the turn
            # (its events already stored are recognized by id).
            stale += 1
            if stale > 3:
                raise
            await svc.refresh(session)
    turn = CONVERSATIONS[user].turns[turn_no - 1]
    return {
        "kind": "turn",
        "user": user,
        "turn": turn_no,
        "turn_kind": turn.kind,
        "text": turn.text or "(system event)",
        "instruction": render_instruction(INSTRUCTION, before),
        "step_before": before.get("booking_step"),
        "step_after": session.state.get("booking_step"),
        "total_before": before.get("user:total_bookings"),
        "total_after": session.state.get("user:total_bookings"),
        "temp_seen": sorted(k for k in session.state if k.startswith("temp:")),
        "summary": summary,
        "stale": stale,
    }


async def _race_job(svc: RedisSessionService, ctl: AnyRedis, job: dict[str, Any]) -> dict[str, Any]:
    """Two workers load the same session; the second appends after the first did."""
    user, sid, keys = job["user"], job["session_id"], job["keys"]
    session = await svc.get_session(app_name=APP, user_id=user, session_id=sid)
    if session is None:
        raise RuntimeError(f"session {sid} not found")
    t = _Turn(svc, session, job["prefix"], f"race-{job['role']}")
    log: list[str] = [f"loaded the session ({plural(len(session.events), 'event')})"]
    stale = False
    if job["role"] == "first":
        if not await ctl.blpop([keys["second_loaded"]], timeout=JOB_TIMEOUT):
            raise RuntimeError("the second worker never loaded the session")
        await t.append("user", [{"text": "A window seat, please"}], {}, role="user")
        await t.append(AGENT, [{"text": "Seat 14A reserved."}], {"seat": "14A"}, role="model")
        log.append("appended 2 events (seat = 14A)")
        await ctl.rpush(keys["first_done"], "1")
    else:
        await ctl.rpush(keys["second_loaded"], "1")
        if not await ctl.blpop([keys["first_done"]], timeout=JOB_TIMEOUT):
            raise RuntimeError("the first worker never appended")
        try:
            await t.append("notifier", [{"text": "E-ticket emailed"}], {"ticket_email": "sent"})
            log.append("append went through: expected StaleSessionError!")
        except StaleSessionError as exc:
            stale = True
            # The message's first sentence: the session changed since it was loaded.
            log.append(f"append rejected: StaleSessionError: {str(exc).split('. ')[0]}")
            had = len(session.events)
            # Only what the copy lacks is read, however long the conversation.
            await svc.refresh(session)
            log.append(
                f"refreshed: read {plural(len(session.events) - had, 'new event')} "
                f"(now {len(session.events)}, seat={session.state.get('seat')})"
            )
            await t.append("notifier", [{"text": "E-ticket emailed"}], {"ticket_email": "sent"})
            log.append("retried: append accepted (ticket_email = sent)")
    return {"kind": "race", "user": user, "role": job["role"], "log": log, "stale": stale}


async def serve(url: str, prefix: str, name: str) -> None:
    """Serve jobs from this worker's queue until told to stop (or orphaned, or idle)."""
    ctl, config = connect(url, prefix)
    svc = RedisSessionService(ctl, config=config)
    parent = multiprocessing.parent_process()
    try:
        idle_since = time.monotonic()
        while True:
            item = await ctl.blpop([queue_key(prefix, name)], timeout=1)
            if item is None:
                orphaned = parent is not None and not parent.is_alive()
                if orphaned or time.monotonic() - idle_since > IDLE_EXIT:
                    return
                continue
            job = json.loads(item[1])
            if job["kind"] == "stop":
                return
            try:
                if job["kind"] == "race":
                    report = await _race_job(svc, ctl, job)
                else:
                    report = await _turn_job(svc, job)
            except Exception as exc:
                report = {"kind": job["kind"], "user": job.get("user"), "error": repr(exc)}
            report.update(worker=name, pid=os.getpid())
            await ctl.rpush(results_key(prefix), json.dumps(report))
            idle_since = time.monotonic()
    finally:
        await ctl.aclose()


def worker_main(url: str, prefix: str, name: str) -> None:
    """Entry point of a worker process (a picklable top-level function for spawn)."""
    try:
        asyncio.run(serve(url, prefix, name))
    except KeyboardInterrupt:
        # Ctrl-C reaches the whole process group; the dispatcher reports it once.
        pass
