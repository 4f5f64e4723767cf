"""A scripted ADK app with compaction, for compaction-aware reads (``CompactedReads``).

Imported by tests/test_adk_compacted_reads.py, which plays one conversation on several
session services and compares what the model was sent, and by
benchmarks/adk_turns.py, which times Runner turns on long sessions.

Nothing calls a network: the model answers from its request alone (every third turn it
calls a tool first), reports a prompt token count that grows with the request (so
token-threshold compaction triggers), and the summarizer writes a summary naming the
turns it covers. The same history therefore always gives the same requests.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator
from typing import Any, Literal

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App
from google.adk.apps.app import EventsCompactionConfig
from google.adk.apps.base_events_summarizer import BaseEventsSummarizer
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService
from google.genai import types
from pydantic import Field

import adk_rewind_app as rewind_app
from adk_rewind_app import compaction_event
from redis_agent_sessions.adk import CompactedReads

APP_NAME = "compaction_app"
USER_ID = "user1"
Mode = Literal["tokens", "window", "both"]
MODES: tuple[Mode, ...] = ("tokens", "window", "both")
_TURN = re.compile(r"turns? (\d+)(?:-(\d+))?")


def lookup(n: int) -> dict[str, Any]:
    """Looks up the fact numbered n."""
    return {"n": n, "fact": f"fact {n}"}


def request_json(llm_request: LlmRequest) -> dict[str, Any]:
    """What the model was sent, with function call ids (random per run) left out."""
    sent = rewind_app.request_json(llm_request)
    for content in sent["contents"]:
        for part in content.get("parts", []):
            for kind in ("function_call", "function_response"):
                part.get(kind, {}).pop("id", None)
    return sent


class ScriptedModel(BaseLlm):
    """Calls ``lookup`` when the user asks for the tool, otherwise replies with a quote of
    the last text and the number of contents; prompt tokens = 40 per content."""

    model: str = "scripted"
    requests: list[dict[str, Any]] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(request_json(llm_request))
        last = llm_request.contents[-1]
        said = " ".join(p.text for p in last.parts or [] if p.text)
        usage = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=40 * len(llm_request.contents)
        )
        if "tool" in said and (found := _TURN.search(said)):
            call = types.FunctionCall(name="lookup", args={"n": int(found[1])})
            content = types.Content(role="model", parts=[types.Part(function_call=call)])
        else:
            reply = f"reply to [{said}] after {len(llm_request.contents)} contents"
            content = types.Content(role="model", parts=[types.Part(text=reply)])
        yield LlmResponse(content=content, usage_metadata=usage)


class ScriptedSummarizer(BaseEventsSummarizer):
    """``summary of turns A-B``: the span of turn numbers in the window's texts (its
    user messages, and the previous summary that token-threshold compaction seeds)."""

    async def maybe_summarize_events(self, *, events: list[Event]) -> Event | None:
        numbers = [
            int(n)
            for e in events
            if e.content and e.content.parts
            for p in e.content.parts
            if p.text and (e.author == "user" or p.text.startswith("summary"))
            for m in _TURN.finditer(p.text)
            for n in m.groups()
            if n
        ]
        summary = f"summary of turns {min(numbers)}-{max(numbers)}" if numbers else "summary"
        return compaction_event(events[0].timestamp, events[-1].timestamp, summary)


def compaction_config(mode: Mode) -> EventsCompactionConfig:
    """Token threshold (rolling summaries that contain the previous one), sliding window
    (every 3 invocations, overlapping by 1: summaries that all count), or both."""
    tokens: dict[str, Any] = {"token_threshold": 400, "event_retention_size": 3}
    window: dict[str, Any] = {"compaction_interval": 3, "overlap_size": 1}
    chosen = {"tokens": tokens, "window": window, "both": {**tokens, **window}}[mode]
    return EventsCompactionConfig(summarizer=ScriptedSummarizer(), **chosen)


def build_app(mode: Mode) -> tuple[App, ScriptedModel]:
    model = ScriptedModel()
    agent = LlmAgent(
        name="compaction_agent",
        model=model,
        instruction="turn={turn?}",
        tools=[lookup],
        before_agent_callback=_note_turn,
    )
    app = App(name=APP_NAME, root_agent=agent, events_compaction_config=compaction_config(mode))
    return app, model


def _note_turn(callback_context: Any) -> None:
    content = callback_context.user_content
    said = " ".join(p.text for p in (content.parts or []) if p.text) if content else ""
    if found := _TURN.match(said):
        callback_context.state["turn"] = int(found[1])


def message(n: int) -> str:
    return f"turn {n}" + (" please use the tool" if n % 3 == 0 else "")


class Conversation:
    """One session played turn by turn through one Runner, optionally with compacted reads."""

    def __init__(self, service: BaseSessionService, mode: Mode, *, compacted: bool) -> None:
        self.app, self.model = build_app(mode)
        self.runner = Runner(app=self.app, session_service=service)
        self.service = service
        self.run_config = RunConfig(
            get_session_config=CompactedReads(compaction=self.app.events_compaction_config)
            if compacted
            else None
        )

    async def turn(self, session_id: str, n: int) -> list[dict[str, Any]]:
        """Play turn ``n``; the requests the model got during it."""
        before = len(self.model.requests)
        async for _ in self.runner.run_async(
            user_id=USER_ID,
            session_id=session_id,
            new_message=types.Content(role="user", parts=[types.Part(text=message(n))]),
            run_config=self.run_config,
        ):
            pass
        return self.model.requests[before:]

    async def close(self) -> None:
        await self.runner.close()
