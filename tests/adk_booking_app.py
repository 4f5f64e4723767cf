"""The flight-booking agent of scenarios.md on a scripted model, for the ADK end-to-end tests.

Imported by the tests, and run as a script to play one turn in its own OS process::

    python tests/adk_booking_app.py REDIS_URL KEY_PREFIX SESSION_ID MESSAGE [WORKER]

which prints one JSON object: the events the Runner yielded, the instructions the model
was given and the state the agent saw at its end (temp: keys included).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from pydantic import Field

from redis_agent_sessions import SessionServiceConfig
from redis_agent_sessions.adk import RedisSessionService

APP_NAME = "booking_app"
USER_ID = "user1"
INITIAL_STATE = {"booking_step": "start", "user:name": "Ravi"}
INSTRUCTION = "Current booking step: {booking_step?}"
FLIGHTS = [
    {"flight": "AA101", "price": 450, "time": "8:00 AM"},
    {"flight": "UA202", "price": 380, "time": "11:30 AM"},
    {"flight": "DL303", "price": 520, "time": "3:00 PM"},
]


class ScriptedModel(BaseLlm):
    """Answers from the request alone (no memory between calls), so any process can serve
    any step: a user message becomes a tool call, a tool result becomes a text reply that
    quotes the booking step the instruction showed."""

    model: str = "scripted"
    instructions: list[str] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        found = re.search(r"Current booking step: (.*)", str(llm_request.config.system_instruction))
        step = found.group(1).strip() if found else "<no instruction>"
        self.instructions.append(f"Current booking step: {step}")
        parts = llm_request.contents[-1].parts or []
        results = [p.function_response for p in parts if p.function_response]
        text = " ".join(p.text for p in parts if p.text)
        part: types.Part
        if results:
            part = types.Part(text=f"{results[0].name} done (step was {step}).")
        elif m := re.search(r"from (\w+) to (\w+)", text):
            part = types.Part.from_function_call(
                name="search_flights", args={"origin": m[1], "destination": m[2]}
            )
        elif m := re.search(r"Book (\w+)", text):
            part = types.Part.from_function_call(name="book_flight", args={"flight_number": m[1]})
        else:
            part = types.Part(text="How can I help?")
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def build_agent(
    worker: str = "w", *, before_tool: Callable[[str], Awaitable[None]] | None = None
) -> tuple[LlmAgent, ScriptedModel, list[dict[str, Any]]]:
    """The agent, its model, and a list receiving the state seen at each agent end."""
    model = ScriptedModel()
    seen: list[dict[str, Any]] = []

    async def search_flights(
        origin: str, destination: str, tool_context: ToolContext
    ) -> dict[str, Any]:
        """Search flights between two cities."""
        if before_tool is not None:
            await before_tool("search_flights")
        tool_context.state["search_results"] = FLIGHTS
        tool_context.state["origin"] = origin
        tool_context.state["destination"] = destination
        tool_context.state["booking_step"] = "select_flight"
        tool_context.state["searched_by"] = worker
        tool_context.state["temp:last_search"] = f"{origin}->{destination}"
        return {"flights": FLIGHTS}

    async def book_flight(flight_number: str, tool_context: ToolContext) -> dict[str, Any]:
        """Book a flight from the last search results."""
        if before_tool is not None:
            await before_tool("book_flight")
        previous_temp = tool_context.state.get("temp:last_search")
        results = tool_context.state.get("search_results") or []
        flight = next((f for f in results if f["flight"] == flight_number), None)
        if flight is None:
            return {"error": f"Flight {flight_number} not found in search results"}
        tool_context.state["booked_flight"] = flight
        tool_context.state["booking_step"] = "confirmed"
        tool_context.state["user:total_bookings"] = (
            tool_context.state.get("user:total_bookings", 0) + 1
        )
        tool_context.state["temp:booking_reference"] = f"REF-{flight_number}"
        return {"status": "booked", "flight": flight, "previous_temp": previous_temp}

    def after_agent(callback_context: CallbackContext) -> None:
        seen.append(callback_context.state.to_dict())

    agent = LlmAgent(
        name="booking_agent",
        model=model,
        instruction=INSTRUCTION,
        tools=[search_flights, book_flight],
        output_key="last_response",
        after_agent_callback=after_agent,
    )
    return agent, model, seen


async def run_turn(
    service: RedisSessionService,
    session_id: str,
    message: str,
    worker: str = "w",
    *,
    before_tool: Callable[[str], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """One user turn through a real Runner; what it yielded and what the model saw."""
    agent, model, seen = build_agent(worker, before_tool=before_tool)
    runner = Runner(agent=agent, app_name=APP_NAME, session_service=service)
    events = await collect(runner, USER_ID, session_id, message, yield_user_message=True)
    return {"events": events, "instructions": model.instructions, "seen": seen, "pid": os.getpid()}


async def collect(
    runner: Runner, user_id: str, session_id: str, message: str, **options: Any
) -> list[dict[str, Any]]:
    """Run one user message through ``runner``; every event it yielded, as stored JSON."""
    events = []
    try:
        async for event in runner.run_async(
            user_id=user_id,
            session_id=session_id,
            new_message=types.Content(role="user", parts=[types.Part(text=message)]),
            **options,
        ):
            events.append(event.model_dump(mode="json", exclude_none=True))
    finally:
        await runner.close()
    return events


async def _main(url: str, prefix: str, session_id: str, message: str, worker: str) -> None:
    config = SessionServiceConfig(key_prefix=prefix)
    async with RedisSessionService.from_url(url, config=config) as service:
        result = await run_turn(service, session_id, message, worker)
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(_main(*sys.argv[1:5], *(sys.argv[5:6] or ["w"])))
