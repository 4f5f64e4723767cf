"""Background generation under a real ADK ``Runner``: an ``after_agent_callback`` adds the
session to memory after every turn, as ADK's samples do, with a model that answers only
when the test lets it. The turn ends while the model still waits (in background mode the
callback only records a job), and once the worker is let through and waited for,
``PreloadMemoryTool`` shows the learned fact in the next turn."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest
from pydantic import Field

from _backends import backend, pick

pytest.importorskip("google.adk", reason="needs the [adk] extra (google.adk is not installed)")

from google.adk.agents import LlmAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.tools.preload_memory_tool import PreloadMemoryTool
from google.genai import types

from redis_agent_sessions import FactSettings, FactWorker
from redis_agent_sessions.adk import ModelGenerator, RedisMemoryService, RedisSessionService

pytestmark = pytest.mark.adk

APP, USER = "facts_bg_runner_app", "ana"
DEADLINE = 30.0
"""The most a turn or a wait may take: a turn held by the model would never end."""


class GatedModel(BaseLlm):
    """The memory model: answers only once ``gate`` is set (a slow model, without a clock)."""

    model: str = "gated-facts"
    gate: Any = Field(default_factory=asyncio.Event)
    asked: int = 0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.asked += 1
        await self.gate.wait()
        op = {"action": "add", "fact": "The user lives in Berlin.", "topics": ["home"]}
        text = json.dumps({"operations": [op]})
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


class Assistant(BaseLlm):
    """The agent's model: records its requests (what PreloadMemoryTool put in them)."""

    model: str = "scripted-agent"
    requests: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="ok")]))


async def remember(callback_context: CallbackContext) -> None:
    """ADK's sample callback: the session goes to memory after every turn."""
    invocation = callback_context._invocation_context
    assert invocation.memory_service is not None
    await invocation.memory_service.add_session_to_memory(invocation.session)


@pytest.fixture(params=pick("fake", "real"))
async def client(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    async with backend(request.param, monkeypatch) as redis:
        yield redis


async def turn(runner: Runner, session_id: str, text: str) -> None:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for _ in runner.run_async(user_id=USER, session_id=session_id, new_message=message):
        pass


async def test_the_turn_is_not_held_by_the_model(client: Any) -> None:
    model = GatedModel()
    sessions = RedisSessionService(client)
    memory = RedisMemoryService(
        client, generator=ModelGenerator(model), facts=FactSettings(mode="background")
    )
    assistant = Assistant()
    agent = LlmAgent(
        name="facts_agent",
        model=assistant,
        tools=[PreloadMemoryTool()],
        after_agent_callback=remember,
    )
    runner = Runner(agent=agent, app_name=APP, session_service=sessions, memory_service=memory)
    first = await sessions.create_session(app_name=APP, user_id=USER)
    async with FactWorker(memory, poll_interval=0.01):
        # Inline, the callback would wait for the gated model: the turn would never end.
        await asyncio.wait_for(turn(runner, first.id, "I live in Berlin now"), DEADLINE)
        assert await memory.list_facts(app_name=APP, user_id=USER) == []
        model.gate.set()
        await memory.wait_for_generation(
            app_name=APP, user_id=USER, session_id=first.id, timeout=DEADLINE
        )
    assert model.asked == 1
    second = await sessions.create_session(app_name=APP, user_id=USER)
    await asyncio.wait_for(turn(runner, second.id, "Where do I live?"), DEADLINE)
    await runner.close()
    shown = " ".join(
        p.text or "" for c in assistant.requests[-1].contents for p in c.parts or () if p.text
    )
    assert "The user lives in Berlin." in shown
