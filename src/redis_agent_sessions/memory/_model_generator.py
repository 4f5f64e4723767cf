"""A generator on any ADK model (the ``[adk]`` extra): Gemini by name, or any ``BaseLlm``
(LiteLlm and the others ADK ships), asked for structured output.

google-adk is imported when one is made, never by the core.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from redis_agent_sessions.errors import GenerationError, InvalidInputError
from redis_agent_sessions.memory._generators import (
    MAX_FACT_CHARS,
    GenerationRequest,
    MemoryOperation,
)

__all__ = ["PROMPT", "ModelGenerator"]

PROMPT = """You maintain the long-term memory an assistant keeps about one user.

You are given the user's stored facts (each with an id) and the newest turns of a
conversation. Answer with the changes to make to the stored facts, as JSON:
{"operations": [{"action": "add" | "update" | "delete", "fact": "...", "fact_id": "...",
"topics": ["..."]}]}.

Keep: what the user states about themselves (who they are, where they live, work, family),
their preferences and dislikes, their plans and commitments with dates, and standing
instructions they give the assistant. Write each fact as one short, self-contained sentence
in the third person ("The user lives in Berlin."), with absolute dates where the turns give
them.

Never keep: greetings and small talk, what the assistant said unless the user confirmed it,
one-off questions, secrets (passwords, keys, card or account numbers), and anything about
other people the user did not ask to be remembered.

Consolidate instead of piling up: when a turn changes a stored fact (the user moved, changed
their mind, a plan was cancelled), "update" that fact by its fact_id with the new text; when a
stored fact is no longer true and nothing replaces it, "delete" it; add a fact only when no
stored fact covers it. Only use fact_ids from the stored facts. When nothing is worth
keeping, answer {"operations": []}."""

_SCHEMA: dict[str, Any] = {
    "type": "OBJECT",
    "properties": {
        "operations": {
            "type": "ARRAY",
            "items": {
                "type": "OBJECT",
                "properties": {
                    "action": {"type": "STRING", "enum": ["add", "update", "delete"]},
                    "fact": {"type": "STRING"},
                    "fact_id": {"type": "STRING"},
                    "topics": {"type": "ARRAY", "items": {"type": "STRING"}},
                },
                "required": ["action"],
            },
        }
    },
    "required": ["operations"],
}


class ModelGenerator:
    """Learns facts with an ADK model.

    Args:
        model: a model name ADK's registry knows (``"gemini-2.5-flash"``), or a ``BaseLlm``.
        instructions: replaces ``PROMPT``, what to keep and what never to keep.
        name: how telemetry and logs name it (default: the model's name).
    """

    def __init__(self, model: Any, *, instructions: str = PROMPT, name: str | None = None) -> None:
        from google.adk.models import BaseLlm, LLMRegistry  # the [adk] extra, only when used

        if isinstance(model, str):
            try:
                model = LLMRegistry.new_llm(model)
            except ValueError as exc:
                raise InvalidInputError(f"ADK knows no model {model!r}: {exc}") from exc
        if not isinstance(model, BaseLlm):
            raise InvalidInputError(
                f"model must be a name or an ADK BaseLlm: {type(model).__name__}"
            )
        self.model = model
        self.instructions = instructions
        self.name = name or model.model

    async def generate(self, request: GenerationRequest) -> Sequence[MemoryOperation]:
        from google.adk.models.llm_request import LlmRequest
        from google.genai import types

        llm_request = LlmRequest(
            model=self.model.model,
            contents=[types.Content(role="user", parts=[types.Part(text=_prompt(request))])],
            config=types.GenerateContentConfig(
                system_instruction=self.instructions,
                response_mime_type="application/json",
                response_schema=_SCHEMA,
                temperature=0.0,
            ),
        )
        answer = ""
        async for response in self.model.generate_content_async(llm_request, stream=False):
            if response.error_code:
                why = f"{response.error_code} {response.error_message or ''}".strip()
                raise GenerationError(f"model {self.name!r} failed: {why}")
            if response.content and response.content.parts:
                answer += "".join(p.text or "" for p in response.content.parts if not p.thought)
        return _parse(answer, self.name)


def _prompt(request: GenerationRequest) -> str:
    facts = [{"fact_id": f.id, "fact": f.text, "topics": f.topics} for f in request.facts]
    turns = [
        {"author": e.author, "text": e.content.text if e.content is not None else ""}
        for e in request.events
    ]
    topics = (
        f"Keep facts about these topics only, and name them in each fact's topics: "
        f"{', '.join(request.topics)}.\n\n"
        if request.topics
        else ""
    )
    return (
        f"{topics}Stored facts:\n{orjson.dumps(facts).decode()}\n\n"
        f"Newest turns:\n{orjson.dumps(turns).decode()}"
    )


def _parse(answer: str, name: str) -> list[MemoryOperation]:
    text = answer.strip()
    if text.startswith("```"):  # some models fence JSON even when asked for JSON
        text = text.strip("`").removeprefix("json").strip()
    if len(text) > 100 * MAX_FACT_CHARS:
        raise GenerationError(f"model {name!r} answered {len(text)} characters")
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise GenerationError(f"model {name!r} did not answer JSON: {exc}") from exc
    ops = parsed.get("operations") if isinstance(parsed, dict) else None
    if not isinstance(ops, list):
        raise GenerationError(f"model {name!r} answered no operations list")
    # Checked, with the request, by checked_operations: passed on as the model said them.
    return ops
