"""A scripted app for the ADK rewind and compaction end-to-end tests.

Imported by tests/test_adk_rewind_compaction.py (which also plays the same script on
ADK's InMemorySessionService), and run as a script to act as one worker in its own OS
process::

    python tests/adk_rewind_app.py REDIS_URL KEY_PREFIX turns SESSION_ID COMPACT MESSAGE...
    python tests/adk_rewind_app.py REDIS_URL KEY_PREFIX rewind SESSION_ID INVOCATION_ID

``turns`` plays each message as one turn through a fresh Runner (``COMPACT`` is ``1`` for
the App with sliding-window compaction, ``0`` without) and prints one JSON object: per
turn its invocation id, the events the Runner yielded, the LLM requests the model got and
the session state read back afterwards; plus the summaries the summarizer wrote.
``rewind`` calls ``Runner.rewind_async`` and prints the session read back afterwards.

Nothing calls a network: the model and the summarizer answer from their input alone,
so every process (and every session service) gets the same answers for the same history.
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
from google.adk.apps import App
from google.adk.apps.app import EventsCompactionConfig
from google.adk.apps.base_events_summarizer import BaseEventsSummarizer
from google.adk.events import Event
from google.adk.events.event_actions import EventActions, EventCompaction
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, Session
from google.genai import types
from pydantic import Field

from redis_agent_sessions import SessionServiceConfig
from redis_agent_sessions.adk import RedisSessionService

APP_NAME = "rewind_app"
USER_ID = "user1"
# Every state key the turns write shows up in the prompt, so a store that keeps a key
# another store drops (or stores None differently) changes the LLM request.
INSTRUCTION = (
    "count={count?} turn1={turn1?} turn2={turn2?} turn3={turn3?} turn4={turn4?}"
    " visits={user:visits?} last={last_reply?}"
)
TURN = re.compile(r"turn (\d+)")


def request_json(llm_request: LlmRequest) -> dict[str, Any]:
    """What the model was sent: the contents and the system instruction."""
    return {
        "contents": [c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents],
        "system_instruction": str(llm_request.config.system_instruction),
    }


def texts(contents: list[dict[str, Any]]) -> list[str]:
    """Every text part of dumped contents."""
    return [p["text"] for c in contents for p in c.get("parts", []) if "text" in p]


class ScriptedModel(BaseLlm):
    """Replies from the request alone: quotes the last user text and counts the contents."""

    model: str = "scripted"
    requests: list[dict[str, Any]] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(request_json(llm_request))
        said = " ".join(p.text for p in llm_request.contents[-1].parts or [] if p.text)
        reply = f"reply to [{said}] after {len(llm_request.contents)} contents"
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=reply)]))


class ScriptedSummarizer(BaseEventsSummarizer):
    """A deterministic summary naming the turns of the window; ``hook`` runs first."""

    def __init__(
        self, hook: Callable[[list[Event]], Awaitable[None]] | None = None, tag: str = ""
    ) -> None:
        self.hook = hook
        self.tag = tag
        self.windows: list[list[str]] = []  # the event ids of each window summarized

    async def maybe_summarize_events(self, *, events: list[Event]) -> Event | None:
        if self.hook is not None:
            await self.hook(events)
        self.windows.append([e.id for e in events])
        turns = sorted(
            {
                int(m[1])
                for e in events
                if e.author == "user" and e.content and e.content.parts
                for p in e.content.parts
                if p.text and (m := TURN.match(p.text))
            }
        )
        summary = f"{self.tag}summary of turns {turns[0]}-{turns[-1]}" if turns else "summary"
        return compaction_event(events[0].timestamp, events[-1].timestamp, summary)


def compaction_event(start: float, end: float, summary: str, **fields: Any) -> Event:
    """A summary event as ADK's LlmEventSummarizer writes one: ``summary`` of the events
    from ``start`` to ``end``; ``fields`` set other Event fields."""
    compaction = EventCompaction(
        start_timestamp=start,
        end_timestamp=end,
        compacted_content=types.Content(role="model", parts=[types.Part(text=summary)]),
    )
    fields.setdefault("invocation_id", Event.new_id())
    return Event(author="user", actions=EventActions(compaction=compaction), **fields)


def before_agent(callback_context: CallbackContext) -> None:
    """Each turn writes session state (a key of its own, a shared counter) and user state."""
    content = callback_context.user_content
    said = " ".join(p.text for p in (content.parts or []) if p.text) if content else ""
    found = TURN.match(said)
    if found is None:
        return
    n = int(found[1])
    state = callback_context.state
    state[f"turn{n}"] = f"note {n}"
    state["count"] = n
    state["user:visits"] = (state.get("user:visits") or 0) + 1


def build_app(
    *, compaction: bool, hook: Callable[[list[Event]], Awaitable[None]] | None = None, tag: str = ""
) -> tuple[App, ScriptedModel, ScriptedSummarizer]:
    """The App (sliding-window compaction every 2 invocations, overlap 1, or none)."""
    model = ScriptedModel()
    summarizer = ScriptedSummarizer(hook, tag)
    agent = LlmAgent(
        name="rewind_agent",
        model=model,
        instruction=INSTRUCTION,
        output_key="last_reply",
        before_agent_callback=before_agent,
    )
    config = (
        EventsCompactionConfig(compaction_interval=2, overlap_size=1, summarizer=summarizer)
        if compaction
        else None
    )
    return App(name=APP_NAME, root_agent=agent, events_compaction_config=config), model, summarizer


def dump_session(session: Session) -> dict[str, Any]:
    return {
        "state": session.state,
        "events": [e.model_dump(mode="json", exclude_none=True) for e in session.events],
    }


async def read(service: BaseSessionService, session_id: str) -> Session:
    session = await service.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=session_id)
    assert session is not None, session_id
    return session


async def run_turn(
    service: BaseSessionService,
    session_id: str,
    message: str,
    *,
    compaction: bool,
    hook: Callable[[list[Event]], Awaitable[None]] | None = None,
    tag: str = "",
) -> dict[str, Any]:
    """One user turn through a fresh Runner on ``service``, and what it left behind."""
    app, model, summarizer = build_app(compaction=compaction, hook=hook, tag=tag)
    runner = Runner(app=app, session_service=service)
    events = []
    try:
        async for event in runner.run_async(
            user_id=USER_ID,
            session_id=session_id,
            new_message=types.Content(role="user", parts=[types.Part(text=message)]),
            yield_user_message=True,
        ):
            events.append(event.model_dump(mode="json", exclude_none=True))
    finally:
        await runner.close()
    return {
        "invocation_id": events[0]["invocation_id"],
        "events": events,
        "requests": model.requests,
        "windows": summarizer.windows,
        "state": (await read(service, session_id)).state,
        "pid": os.getpid(),
    }


async def rewind(service: BaseSessionService, session_id: str, invocation_id: str) -> None:
    app, _, _ = build_app(compaction=False)
    runner = Runner(app=app, session_service=service)
    try:
        await runner.rewind_async(
            user_id=USER_ID, session_id=session_id, rewind_before_invocation_id=invocation_id
        )
    finally:
        await runner.close()


async def _main(url: str, prefix: str, command: str, session_id: str, *args: str) -> None:
    config = SessionServiceConfig(key_prefix=prefix)
    async with RedisSessionService.from_url(url, config=config) as service:
        result: dict[str, Any]
        if command == "turns":
            compaction, *messages = args
            turns = [
                await run_turn(service, session_id, m, compaction=compaction == "1")
                for m in messages
            ]
            result = {"turns": turns, "pid": os.getpid()}
        elif command == "rewind":
            await rewind(service, session_id, args[0])
            result = {**dump_session(await read(service, session_id)), "pid": os.getpid()}
        else:
            raise SystemExit(f"unknown command {command!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(_main(*sys.argv[1:]))
