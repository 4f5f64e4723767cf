"""ADK's memory tools on the ranking, through a real ``Runner``: ``PreloadMemoryTool`` puts the
best entries first in the model's request, ``load_memory`` returns them in the ranking's
order, and a hybrid service's results say how each was found (scores)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel, Field

from _backends import backend, pick
from _embedders import SynonymEmbedder

pytest.importorskip("google.adk", reason="needs the [adk] extra (google.adk is not installed)")

from google.adk.agents import LlmAgent
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import Session
from google.adk.tools import load_memory
from google.adk.tools.preload_memory_tool import PreloadMemoryTool
from google.genai import types

from redis_agent_sessions.adk import RedisMemoryService, RedisSessionService

pytestmark = pytest.mark.adk

APP, USER = "tools_app", "caroline"
# Past sessions: the answer ("the blue one") says none of the question's words; the turn
# before it does. Distractors share the common words only.
PAST = [
    ("wedding", [("user", "Which scarf should I wear to my sister's wedding?"),
                 ("stylist", "Yes, the blue one! It matches the dress."),
                 ("user", "Thanks, see you next week")]),
    ("errands", [("user", "I need to buy milk and bread"),
                 ("stylist", "The bakery opens at nine")]),
    ("travel", [("user", "I booked two flights to Lisbon for the wedding anniversary"),
                ("stylist", "Pack light, it is warm there")]),
]  # fmt: skip


class Scripted(BaseLlm):
    """Records every request; a question becomes one load_memory call with its text, and the
    tool's answer a closing reply."""

    model: str = "scripted-tools"
    calls_tool: bool = True
    requests: list[LlmRequest] = Field(default_factory=list)
    recalled: list[dict[str, Any]] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        parts = llm_request.contents[-1].parts or []
        results = [p.function_response for p in parts if p.function_response]
        if not self.calls_tool:
            part = types.Part(text="ok")
        elif results:
            found = (results[0].response or {}).get("result")
            if isinstance(found, BaseModel):
                found = found.model_dump(mode="json")
            self.recalled = list((found or {}).get("memories") or [])
            part = types.Part(text="done")
        else:
            question = " ".join(p.text for p in parts if p.text)
            part = types.Part.from_function_call(name="load_memory", args={"query": question})
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


@pytest.fixture(params=pick("fake", "real"))
async def client(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    async with backend(request.param, monkeypatch) as redis:
        yield redis


async def remembered(memory: RedisMemoryService) -> None:
    for i, (sid, turns) in enumerate(PAST):
        events = [
            Event(
                author=author,
                timestamp=1_700_000_000 + 100 * i + j,
                content=types.Content(role="user", parts=[types.Part(text=said)]),
            )
            for j, (author, said) in enumerate(turns)
        ]
        await memory.add_session_to_memory(
            Session(id=sid, app_name=APP, user_id=USER, events=events)
        )


async def ask(runner: Runner, sessions: RedisSessionService, question: str) -> None:
    session = await sessions.create_session(app_name=APP, user_id=USER)
    message = types.Content(role="user", parts=[types.Part(text=question)])
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=message):
        pass


QUESTION = "What colour was the scarf for the wedding?"


async def test_preload_memory_shows_the_ranking_first(client: Any) -> None:
    sessions, memory = RedisSessionService(client), RedisMemoryService(client)
    await remembered(memory)
    expected = await memory.search_memory(app_name=APP, user_id=USER, query=QUESTION)
    texts = [m.content.parts[0].text for m in expected.memories if m.content.parts]
    # The question's turn, then its answer (found through it), before the distractor.
    assert texts[:2] == [PAST[0][1][0][1], PAST[0][1][1][1]]
    model = Scripted(calls_tool=False)
    agent = LlmAgent(name="tools_agent", model=model, tools=[PreloadMemoryTool()])
    runner = Runner(agent=agent, app_name=APP, session_service=sessions, memory_service=memory)
    await ask(runner, sessions, QUESTION)
    shown = " ".join(
        p.text or "" for c in model.requests[0].contents for p in c.parts or () if p.text
    )
    assert "<PAST_CONVERSATIONS>" in shown
    positions = [shown.index(t) for t in texts]
    assert positions == sorted(positions)  # in the ranking's order
    await runner.close()


async def test_load_memory_returns_the_ranking_with_its_reasons(client: Any) -> None:
    sessions = RedisSessionService(client)
    memory = RedisMemoryService(client, embedder=SynonymEmbedder())
    await remembered(memory)
    model = Scripted()
    agent = LlmAgent(name="tools_agent", model=model, tools=[load_memory])
    runner = Runner(agent=agent, app_name=APP, session_service=sessions, memory_service=memory)
    await ask(runner, sessions, QUESTION)
    await runner.close()
    expected = await memory.search_memory(app_name=APP, user_id=USER, query=QUESTION)
    assert [m["id"] for m in model.recalled] == [m.id for m in expected.memories]
    best = model.recalled[0]
    assert best["content"]["parts"][0]["text"] == PAST[0][1][0][1]
    how = best["custom_metadata"]["redis_agent_sessions"]
    assert "keyword" in how["found_by"]
    assert how["keyword_rank"] == 1
    assert how["keyword_score"] > 0
    assert how["score"] > 0
