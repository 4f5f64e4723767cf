"""An agent that needs no model: each turn counts itself in every state scope.

Served by ``adk api_server`` in tests/test_adk_servers.py, so its state and memory go
through the services that ``services.yaml`` builds from the command line's URIs.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from google.adk.agents import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event, EventActions
from google.genai import types
from typing_extensions import override


class CounterAgent(BaseAgent):
    """Replies ``turn N`` and records the turn in session, user, app and temp state."""

    @override
    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        state = ctx.session.state
        n = int(state.get("turns", 0))
        if ctx.memory_service is None:
            raise RuntimeError("the server built no memory service")
        # Runs with the user's message already appended: memory gets every turn's words.
        await ctx.memory_service.add_session_to_memory(ctx.session)
        yield Event(
            author=self.name,
            invocation_id=ctx.invocation_id,
            content=types.Content(role="model", parts=[types.Part(text=f"turn {n + 1}")]),
            actions=EventActions(
                state_delta={
                    "turns": n + 1,
                    "user:turns_total": int(state.get("user:turns_total", 0)) + 1,
                    "app:last_user": ctx.session.user_id,
                    "temp:scratch": f"scratch {n + 1}",
                }
            ),
        )


root_agent = CounterAgent(name="counter_agent", description="Counts turns without a model.")
