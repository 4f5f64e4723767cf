"""A recall agent with ADK's ``load_memory`` tool on a scripted model, for the ADK end-to-end
tests. Run as a script to play one turn in its own OS process::

    python tests/adk_recall_app.py REDIS_URL KEY_PREFIX APP_NAME USER_ID SESSION_ID MESSAGE

with a Runner on our ADK session and memory services; prints one JSON object: the events
the Runner yielded and the queries the model sent to load_memory.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.tools import load_memory
from google.genai import types
from pydantic import BaseModel, Field

from adk_booking_app import collect
from redis_agent_sessions import SessionServiceConfig
from redis_agent_sessions.adk import RedisMemoryService, RedisSessionService

NOTHING = "I don't remember that."


class RecallModel(BaseLlm):
    """A question asking for a "favorite <thing>" becomes a load_memory call for it; the
    tool's result becomes a reply quoting the first memory found (from the request alone,
    like the booking model, so any process can serve any step)."""

    model: str = "scripted-recall"
    queries: list[str] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        parts = llm_request.contents[-1].parts or []
        results = [p.function_response for p in parts if p.function_response]
        text = " ".join(p.text for p in parts if p.text)
        part: types.Part
        if results:
            # FunctionTool wraps load_memory's LoadMemoryResponse as {"result": ...}; in the
            # live request it is still the pydantic object (JSON only once stored).
            found = (results[0].response or {}).get("result")
            if isinstance(found, BaseModel):
                found = found.model_dump(mode="json")
            memories = (found or {}).get("memories") or []
            recalled = [
                " ".join(p.get("text", "") for p in m["content"].get("parts") or [])
                for m in memories
            ]
            part = types.Part(text=f"You told me: {recalled[0]}" if recalled else NOTHING)
        elif m := re.search(r"favorite (\w+)", text):
            query = f"favorite {m[1]}"
            self.queries.append(query)
            part = types.Part.from_function_call(name="load_memory", args={"query": query})
        else:
            part = types.Part(text="Ask me what you told me before.")
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def build_agent() -> tuple[LlmAgent, RecallModel]:
    model = RecallModel()
    agent = LlmAgent(name="recall_agent", model=model, tools=[load_memory])
    return agent, model


async def run_turn(
    sessions: RedisSessionService,
    memory: RedisMemoryService,
    app_name: str,
    user_id: str,
    session_id: str,
    message: str,
) -> dict[str, Any]:
    """One user turn through a real Runner wired to both of our services."""
    agent, model = build_agent()
    runner = Runner(agent=agent, app_name=app_name, session_service=sessions, memory_service=memory)
    events = await collect(runner, user_id, session_id, message)
    return {"events": events, "queries": model.queries, "pid": os.getpid()}


async def _main(url: str, prefix: str, app_name: str, user_id: str, sid: str, msg: str) -> None:
    config = SessionServiceConfig(key_prefix=prefix)
    async with (
        RedisSessionService.from_url(url, config=config) as sessions,
        RedisMemoryService.from_url(url, config=config) as memory,
    ):
        result = await run_turn(sessions, memory, app_name, user_id, sid, msg)
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(_main(*sys.argv[1:7]))
