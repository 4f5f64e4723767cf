"""Learned facts through ADK: ``ModelGenerator`` on a scripted ADK model (no network) keeps
the user's facts, and a real ``Runner``'s ``PreloadMemoryTool`` shows the consolidated fact,
never the one it replaced. Also what the model adapter makes of a model's bad answers."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import pytest
from pydantic import Field

from _backends import backend, pick

pytest.importorskip("google.adk", reason="needs the [adk] extra (google.adk is not installed)")

from google.adk.agents import LlmAgent
from google.adk.events import Event as AdkEvent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.tools.preload_memory_tool import PreloadMemoryTool
from google.genai import types

from redis_agent_sessions import (
    FactSettings,
    GenerationError,
    GenerationRequest,
    InvalidInputError,
)
from redis_agent_sessions.adk import ModelGenerator, RedisMemoryService, RedisSessionService
from redis_agent_sessions.models import Content, Event, Part

pytestmark = pytest.mark.adk

APP, USER = "facts_runner_app", "ana"

# (stored facts, newest turns) as the prompt shows them -> the model's JSON answer
Answer = Callable[[list[dict[str, Any]], list[dict[str, Any]]], str]


class FactModel(BaseLlm):
    """The memory model: answers each generation request with the next scripted answer, and
    records what it was asked (system instruction, schema, prompt)."""

    model: str = "scripted-facts"
    answers: list[Any] = Field(default_factory=list)
    requests: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        prompt = llm_request.contents[-1].parts[0].text or ""
        facts = json.loads(prompt.split("Stored facts:\n", 1)[1].split("\n\n", 1)[0])
        turns = json.loads(prompt.split("Newest turns:\n", 1)[1])
        answer = self.answers.pop(0)
        if isinstance(answer, LlmResponse):
            yield answer
            return
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text=answer(facts, turns))])
        )


class Assistant(BaseLlm):
    """The agent's model: records its requests (what PreloadMemoryTool put in them)."""

    model: str = "scripted-agent"
    requests: list[LlmRequest] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="ok")]))


def lives(facts: list[dict[str, Any]], turns: list[dict[str, Any]]) -> str:
    """Keeps where the user lives: one fact, updated when they move."""
    said = " ".join(t["text"] for t in turns if t["author"] == "user")
    city = next(c for c in ("Paris", "Berlin") if c in said)
    old = [f for f in facts if "lives in" in f["fact"]]
    op: dict[str, Any] = {"action": "add", "fact": f"The user lives in {city}.", "topics": ["home"]}
    if old:
        op = {"action": "update", "fact_id": old[0]["fact_id"], "fact": op["fact"]}
    return json.dumps({"operations": [op]})


@pytest.fixture(params=pick("fake", "real"))
async def client(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    async with backend(request.param, monkeypatch) as redis:
        yield redis


async def turn(runner: Runner, sessions: RedisSessionService, text: str) -> Any:
    session = await sessions.create_session(app_name=APP, user_id=USER)
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=message):
        pass
    return await sessions.get_session(app_name=APP, user_id=USER, session_id=session.id)


async def test_preload_memory_shows_the_consolidated_fact(client: Any) -> None:
    facts_model = FactModel(answers=[lives, lives])
    sessions = RedisSessionService(client)
    memory = RedisMemoryService(client, generator=ModelGenerator(facts_model))
    assistant = Assistant()
    agent = LlmAgent(name="facts_agent", model=assistant, tools=[PreloadMemoryTool()])
    runner = Runner(agent=agent, app_name=APP, session_service=sessions, memory_service=memory)
    for said in ("I live in Paris now", "We moved to Berlin last month"):
        # What ADK apps do after each turn: the session goes to memory.
        await memory.add_session_to_memory(await turn(runner, sessions, said))
    await turn(runner, sessions, "Where do I live?")
    await runner.close()

    shown = " ".join(
        p.text or "" for c in assistant.requests[-1].contents for p in c.parts or () if p.text
    )
    assert "The user lives in Berlin." in shown
    assert "Paris" not in shown  # neither the superseded fact nor the raw turn
    # The model was asked for structured output, with the instructions and the stored fact.
    asked = facts_model.requests[1]
    assert asked.config.response_mime_type == "application/json"
    assert "Never keep" in str(asked.config.system_instruction)
    assert "The user lives in Paris." in asked.contents[-1].parts[0].text
    assert len(facts_model.requests) == 2  # the question's session was never added


def request(*texts: str) -> GenerationRequest:
    events = [
        Event(author="user", content=Content(role="user", parts=[Part(text=t)])) for t in texts
    ]
    return GenerationRequest(
        app_name=APP, user_id=USER, session_id="s", events=events, facts=[], topics=["home"]
    )


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("not json at all", "did not answer JSON"),
        ('{"ops": []}', "no operations list"),
        ('["add"]', "no operations list"),
        ("x" * 300_000, "answered 300000 characters"),
    ],
)
async def test_a_bad_answer_is_a_generation_error(answer: str, expected: str) -> None:
    generator = ModelGenerator(FactModel(answers=[lambda facts, turns: answer]))
    with pytest.raises(GenerationError, match=expected):
        await generator.generate(request("I live in Paris"))


async def test_the_adapter_reads_fenced_json_and_model_errors() -> None:
    fenced = '```json\n{"operations": [{"action": "add", "fact": "The user likes tea."}]}\n```'
    model = FactModel(
        answers=[
            lambda facts, turns: fenced,
            LlmResponse(error_code="RESOURCE_EXHAUSTED", error_message="quota"),
        ]
    )
    generator = ModelGenerator(model)
    [op] = await generator.generate(request("I like tea"))
    assert op == {"action": "add", "fact": "The user likes tea."}
    assert "home" in (model.requests[0].contents[-1].parts[0].text or "")  # the topics
    with pytest.raises(GenerationError, match="RESOURCE_EXHAUSTED quota"):
        await generator.generate(request("I like tea"))


def test_a_model_is_named_or_given() -> None:
    with pytest.raises(InvalidInputError):
        ModelGenerator(42)
    with pytest.raises(InvalidInputError, match="knows no model"):
        ModelGenerator("no-such-model-family-1")
    assert ModelGenerator("gemini-2.5-flash").name == "gemini-2.5-flash"


async def test_the_adk_service_takes_a_generator_by_url() -> None:
    """As `adk api_server` builds it from services.yaml's URL."""
    memory = RedisMemoryService(uri="redis://localhost/0?generator=import:facts_generators:likes")
    assert getattr(memory._memory.generator, "name", None) == "likes"
    await memory.close()
    named = RedisMemoryService(uri="redis://localhost/0?generator=adk:gemini-2.5-flash")
    assert isinstance(named._memory.generator, ModelGenerator)
    await named.close()


async def test_adks_memory_bank_keys_in_custom_metadata_label_and_tag_facts(client: Any) -> None:
    """The keys ADK's VertexAiMemoryBankService reads from ``custom_metadata``: the drop-in
    reads them alike, and a search's ADK MemoryEntry carries the fact's metadata."""
    memory = RedisMemoryService(
        client,
        generator=ModelGenerator(FactModel(answers=[lives, lives])),
        facts=FactSettings(revision_ttl=3600),
    )

    def told(text: str) -> AdkEvent:
        return AdkEvent(
            author="user", content=types.Content(role="user", parts=[types.Part(text=text)])
        )

    await memory.add_events_to_memory(
        app_name=APP, user_id=USER, session_id="s1", events=[told("I live in Paris")],
        custom_metadata={"revision_labels": {"via": "callback"}, "metadata": {"city": "Paris"},
                         "revision_ttl": "600s"},
    )  # fmt: skip
    await memory.add_events_to_memory(
        app_name=APP, user_id=USER, session_id="s1", events=[told("We moved to Berlin")],
        custom_metadata={"metadata": {"moved": True}, "metadata_merge_strategy": "MERGE"},
    )  # fmt: skip
    found = await memory.search_memory(app_name=APP, user_id=USER, query="lives")
    [entry] = found.memories
    assert entry.content.parts[0].text == "The user lives in Berlin."
    ours = "redis_agent_sessions"  # what the library says of the fact, beside its metadata
    metadata = {k: v for k, v in (entry.custom_metadata or {}).items() if k != ours}
    assert metadata == {"city": "Paris", "moved": True}
    [fact] = await memory.list_facts(app_name=APP, user_id=USER)
    [was] = await memory.fact_history(app_name=APP, user_id=USER, fact_id=fact.id)
    assert was.labels == {"via": "callback"}
    assert was.expires is not None
    assert round(was.expires - was.updated) == 600
