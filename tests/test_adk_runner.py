"""A real ADK Runner on our session service, with turns served by different OS processes.

The flight-booking story of scenarios.md runs on a scripted model (tests/adk_booking_app.py):
each turn is played by a fresh ``python`` process pointed at the same Redis, so nothing
but Redis carries the conversation from one turn to the next. A recall agent with
``load_memory`` (tests/adk_recall_app.py) then finds, in yet another process, what the
user said in that conversation. Needs REDIS_URL.
"""

from __future__ import annotations

import asyncio
import json
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

from google.adk.errors import StaleSessionError as AdkStaleSessionError
from google.adk.sessions import Session
from redis.asyncio import Redis

from redis_agent_sessions import SessionServiceConfig
from redis_agent_sessions.adk import RedisMemoryService, RedisSessionService

sys.path.insert(0, str(Path(__file__).parent))
import adk_booking_app as app
import adk_recall_app as recall_app

pytestmark = [pytest.mark.adk, pytest.mark.real, pytest.mark.slow]

HELPER = Path(app.__file__)
RECALL_HELPER = Path(recall_app.__file__)


class Shared:
    """One Redis, one unique key prefix, and our services on it."""

    def __init__(
        self, url: str, prefix: str, service: RedisSessionService, memory: RedisMemoryService
    ) -> None:
        self.url, self.prefix, self.service, self.memory = url, prefix, service, memory

    async def turn(self, session_id: str, message: str, worker: str = "w") -> dict[str, Any]:
        """One booking turn played by a new OS process."""
        return await run_helper(  # type: ignore[no-any-return]
            HELPER, self.url, self.prefix, session_id, message, worker, preload=ADK
        )

    async def recall_turn(
        self, session_id: str, message: str, user_id: str = app.USER_ID
    ) -> dict[str, Any]:
        """One recall-agent turn played by a new OS process."""
        return await run_helper(  # type: ignore[no-any-return]
            RECALL_HELPER,
            self.url,
            self.prefix,
            app.APP_NAME,
            user_id,
            session_id,
            message,
            preload=ADK,
        )

    async def session(self, session_id: str) -> Session:
        session = await self.service.get_session(
            app_name=app.APP_NAME, user_id=app.USER_ID, session_id=session_id
        )
        assert session is not None
        return session


@pytest.fixture
async def shared() -> AsyncIterator[Shared]:
    redis_url = skip_without("REDIS_URL")
    # A prefix of its own: other suites flush this database, and this one never does.
    prefix = f"adk-e2e-{uuid.uuid4().hex[:12]}"
    client = Redis.from_url(redis_url)
    config = SessionServiceConfig(key_prefix=prefix)
    service = RedisSessionService(client, config=config)
    yield Shared(redis_url, prefix, service, RedisMemoryService(client, config=config))
    async for key in client.scan_iter(match=f"{prefix}:*"):
        await client.delete(key)
    await client.aclose()


def dumps(session: Session) -> list[dict[str, Any]]:
    return [e.model_dump(mode="json", exclude_none=True) for e in session.events]


def folded_state(initial: dict[str, Any], session: Session) -> dict[str, Any]:
    """What the state must be if it is exactly the fold of the stored events' deltas."""
    state = {k: v for k, v in initial.items() if not k.startswith("temp:")}
    for event in session.events:
        state.update(event.actions.state_delta)
    return state


async def test_booking_turns_in_separate_processes(shared: Shared) -> None:
    created = await shared.service.create_session(
        app_name=app.APP_NAME, user_id=app.USER_ID, state=app.INITIAL_STATE
    )

    turn1 = await shared.turn(created.id, "Find flights from NYC to Paris")
    s1 = await shared.session(created.id)
    assert s1.state["booking_step"] == "select_flight"
    assert s1.state["origin"] == "NYC"
    assert s1.state["destination"] == "Paris"
    assert s1.state["search_results"] == app.FLIGHTS
    assert s1.state["user:name"] == "Ravi"
    assert s1.state["last_response"] == "search_flights done (step was select_flight)."
    assert not any(k.startswith("temp:") for k in s1.state)
    # temp: values were visible inside the invocation only.
    assert turn1["seen"][-1]["temp:last_search"] == "NYC->Paris"
    # {booking_step?} was filled from the state each model call saw.
    assert turn1["instructions"] == [
        "Current booking step: start",
        "Current booking step: select_flight",
    ]
    assert dumps(s1) == turn1["events"]
    assert [e.author for e in s1.events] == ["user"] + ["booking_agent"] * 3
    assert s1.events[1].get_function_calls()[0].args == {"origin": "NYC", "destination": "Paris"}

    turn2 = await shared.turn(created.id, "Book UA202 please")
    assert len({turn1["pid"], turn2["pid"], os.getpid()}) == 3
    s2 = await shared.session(created.id)
    assert s2.state["booking_step"] == "confirmed"
    assert s2.state["booked_flight"] == app.FLIGHTS[1]
    assert s2.state["user:total_bookings"] == 1
    assert s2.state["last_response"] == "book_flight done (step was confirmed)."
    assert not any(k.startswith("temp:") for k in s2.state)
    assert turn2["instructions"] == [
        "Current booking step: select_flight",
        "Current booking step: confirmed",
    ]
    # The previous invocation's temp: value did not survive into this one.
    response = s2.events[-2].get_function_responses()[0].response
    assert response is not None
    assert response["previous_temp"] is None
    assert turn2["seen"][-1]["temp:booking_reference"] == "REF-UA202"
    assert dumps(s2) == turn1["events"] + turn2["events"]
    assert s2.state == folded_state(app.INITIAL_STATE, s2)
    assert await shared.service.get_user_state(app_name=app.APP_NAME, user_id=app.USER_ID) == {
        "name": "Ravi",
        "total_bookings": 1,
    }

    turn3 = await shared.turn(created.id, "Book XX999 please")
    s3 = await shared.session(created.id)
    response = s3.events[-2].get_function_responses()[0].response
    assert response == {"error": "Flight XX999 not found in search results"}
    assert {k: v for k, v in s3.state.items() if k != "last_response"} == {
        k: v for k, v in s2.state.items() if k != "last_response"
    }
    assert dumps(s3) == turn1["events"] + turn2["events"] + turn3["events"]

    # Another session of the same user sees the user: keys the tools wrote.
    other = await shared.service.create_session(app_name=app.APP_NAME, user_id=app.USER_ID)
    assert other.state == {"user:name": "Ravi", "user:total_bookings": 1}


async def test_stale_invocation_is_rejected_whole(shared: Shared) -> None:
    """Worker A (this process) holds the session while worker B (another process) books."""
    initial = {**app.INITIAL_STATE, "booking_step": "select_flight", "search_results": app.FLIGHTS}
    created = await shared.service.create_session(
        app_name=app.APP_NAME, user_id=app.USER_ID, state=initial
    )
    reached, release = asyncio.Event(), asyncio.Event()

    async def hold(tool: str) -> None:
        reached.set()
        await release.wait()

    a = asyncio.create_task(
        app.run_turn(shared.service, created.id, "Book AA101 please", "A", before_tool=hold)
    )
    await asyncio.wait_for(reached.wait(), timeout=60)
    before_b = await shared.session(created.id)  # A's user message and tool call
    b = await shared.turn(created.id, "Book UA202 please", "B")
    release.set()
    with pytest.raises(AdkStaleSessionError):
        await asyncio.wait_for(a, timeout=60)

    after = await shared.session(created.id)
    assert [e.id for e in after.events] == [e.id for e in before_b.events] + [
        e["id"] for e in b["events"]
    ]
    assert after.state["booked_flight"] == app.FLIGHTS[1]
    assert after.state["user:total_bookings"] == 1
    assert not any(
        e.actions.state_delta.get("booked_flight") == app.FLIGHTS[0] for e in after.events
    )
    assert after.state == folded_state(initial, after)
    assert await shared.service.get_user_state(app_name=app.APP_NAME, user_id=app.USER_ID) == {
        "name": "Ravi",
        "total_bookings": 1,
    }

    # A retries from a fresh read: no booking is lost.
    await app.run_turn(shared.service, created.id, "Book AA101 please", "A")
    final = await shared.session(created.id)
    assert final.state["booked_flight"] == app.FLIGHTS[0]
    assert final.state["user:total_bookings"] == 2
    assert final.state == folded_state(initial, final)


async def test_recall_across_processes_with_load_memory(shared: Shared) -> None:
    """scenarios.md section 4 through a Runner: said in a booking conversation (two
    processes), added to memory here, recalled on a new session by a third process."""
    color = "My favorite color is blue and I love hiking."
    booking = await shared.service.create_session(
        app_name=app.APP_NAME, user_id=app.USER_ID, state=app.INITIAL_STATE
    )
    turn1 = await shared.turn(booking.id, "Find flights from NYC to Paris")
    turn2 = await shared.turn(booking.id, color)
    said = turn2["events"][0]
    assert said["author"] == "user"

    conversation = await shared.session(booking.id)
    await shared.memory.add_session_to_memory(conversation)

    recall = await shared.service.create_session(app_name=app.APP_NAME, user_id=app.USER_ID)
    result = await shared.recall_turn(recall.id, "What's my favorite color?")
    assert len({turn1["pid"], turn2["pid"], result["pid"], os.getpid()}) == 4
    assert result["queries"] == ["favorite color"]

    stored = await shared.session(recall.id)
    assert [e.model_dump(mode="json", exclude_none=True) for e in stored.events[1:]] == result[
        "events"
    ]
    assert [e.author for e in stored.events] == ["user"] + ["recall_agent"] * 3
    (call,) = stored.events[1].get_function_calls()
    assert (call.name, call.args) == ("load_memory", {"query": "favorite color"})
    (response,) = stored.events[2].get_function_responses()
    assert response.name == "load_memory"
    assert response.response is not None
    # FunctionTool wraps a non-dict return value (LoadMemoryResponse) as {"result": ...}.
    memories = response.response["result"]["memories"]
    assert memories[0]["id"] == said["id"]
    assert memories[0]["author"] == "user"
    assert memories[0]["content"]["parts"] == [{"text": color}]
    assert color in json.dumps(response.response)
    final = stored.events[3].content
    assert final is not None
    assert final.parts is not None
    assert final.parts[0].text == f"You told me: {color}"

    # Memory is per user: another user's recall agent finds nothing.
    other = await shared.service.create_session(app_name=app.APP_NAME, user_id="user2")
    result = await shared.recall_turn(other.id, "What's my favorite color?", user_id="user2")
    stranger = await shared.service.get_session(
        app_name=app.APP_NAME, user_id="user2", session_id=other.id
    )
    assert stranger is not None
    (response,) = stranger.events[2].get_function_responses()
    assert response.response == {"result": {"memories": []}}
    assert stranger.events[3].content is not None
    assert stranger.events[3].content.parts is not None
    assert stranger.events[3].content.parts[0].text == recall_app.NOTHING
