"""One conversation served in turns by a Python ADK ``Runner`` and a Node ADK-JS ``Runner``
(typescript/, its worker run with node as a subprocess), on Redis 7 and on a Redis Cluster.

Each worker reads the other's events and every state scope exactly, a stale write from
either side is refused and retried, and ``redis-agent-sessions show`` prints the session as
one conversation. Skips without node or without the TypeScript package built (``npm ci &&
npm run build`` in typescript/, which scripts/test.sh does when node is on PATH).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from _servers import skip_without

pytest.importorskip("google.adk", reason="needs the [adk] extra (google.adk is not installed)")

from google.adk.agents import LlmAgent
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from pydantic import Field

from redis_agent_sessions import SessionServiceConfig
from redis_agent_sessions.adk import RedisSessionService
from redis_agent_sessions.errors import StaleSessionError

pytestmark = [pytest.mark.adk, pytest.mark.real, pytest.mark.slow]

TYPESCRIPT = Path(__file__).resolve().parent.parent / "typescript"
WORKER = TYPESCRIPT / "dist" / "worker" / "turn.js"
NODE = shutil.which("node")
APP, USER = "mixed_app", "ravi"
TIMEOUT = 120


def node_or_skip() -> str:
    if NODE is None:
        pytest.skip("node is not on PATH")
    if not (TYPESCRIPT / "node_modules").is_dir() or not WORKER.is_file():
        pytest.skip("the TypeScript package is not built: npm ci && npm run build in typescript/")
    return NODE


class ScriptedModel(BaseLlm):
    """The Node worker's model, in Python: "note X" becomes a call of the note tool, its
    result a reply naming the worker; it records every text it was shown."""

    model: str = "scripted"
    worker: str = "python"
    shown: list[str] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.shown = [p.text for c in llm_request.contents for p in c.parts or [] if p.text]
        parts = llm_request.contents[-1].parts or []
        text = " ".join(p.text for p in parts if p.text)
        part: types.Part
        if any(p.function_response for p in parts):
            part = types.Part(text=f"noted by {self.worker}")
        elif m := re.search(r"note (.+)", text):
            call = types.FunctionCall(id=f"call-{uuid.uuid4().hex[:8]}", name="note")
            call.args = {"text": m[1]}
            part = types.Part(function_call=call)
        else:
            part = types.Part(text="How can I help?")
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def note(text: str, tool_context: ToolContext) -> dict[str, Any]:
    """Note a text in the conversation state."""
    state = tool_context.state
    state["notes"] = [*(state.get("notes") or []), text]
    state["last_by"] = "python"
    state["user:turns"] = (state.get("user:turns") or 0) + 1
    state["app:served"] = (state.get("app:served") or 0) + 1
    state["temp:scratch"] = text
    return {"noted": text, "by": "python"}


class Conversation:
    """One session on one server, and the two workers that serve it."""

    def __init__(self, url: str, cluster: bool, service: RedisSessionService) -> None:
        self.url, self.cluster, self.service = url, cluster, service
        self.prefix = service._engine.keys.prefix
        self.session_id = f"conv-{uuid.uuid4().hex[:8]}"

    async def python_turn(self, message: str) -> list[str]:
        """One turn by a Python Runner; the texts its model was shown."""
        model = ScriptedModel()
        agent = LlmAgent(name="assistant", model=model, instruction="Take notes.", tools=[note])
        runner = Runner(agent=agent, app_name=APP, session_service=self.service)
        content = types.Content(role="user", parts=[types.Part(text=message)])
        try:
            async for _ in runner.run_async(
                user_id=USER, session_id=self.session_id, new_message=content
            ):
                pass
        finally:
            await runner.close()
        return model.shown

    def request(self, command: str, **more: Any) -> str:
        return json.dumps(
            {
                "command": command,
                "url": self.url,
                "cluster": self.cluster,
                "prefix": self.prefix,
                "app": APP,
                "user": USER,
                "session": self.session_id,
                **more,
            }
        )

    async def node_turn(self, message: str) -> dict[str, Any]:
        """One turn by a Node ADK-JS Runner, in its own process."""
        proc = await asyncio.create_subprocess_exec(
            node_or_skip(),
            str(WORKER),
            self.request("turn", message=message, worker="node"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
        assert proc.returncode == 0, err.decode()
        result: dict[str, Any] = json.loads(out.decode().splitlines()[-1])
        return result

    async def read(self) -> Any:
        session = await self.service.get_session(
            app_name=APP, user_id=USER, session_id=self.session_id
        )
        assert session is not None
        return session

    async def stored(self) -> list[dict[str, Any]]:
        """The events as Redis holds them (the stream's JSON, as written)."""
        key = self.service._engine.keys.session(APP, USER, self.session_id).events
        entries: Any = await self.service._client.xrange(key)
        return [json.loads(fields[b"event"]) for _, fields in entries]


async def output(*argv: str, env: dict[str, str]) -> str:
    """What a command printed, once it exited 0."""
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    assert proc.returncode == 0, err.decode()
    return out.decode()


_DEFAULTS = {
    "requested_auth_configs": {},
    "requested_tool_confirmations": {},
    "node_info": {"path": ""},
    "long_running_tool_ids": [],
}


def canonical(value: Any, where: str = "") -> Any:
    """An event's JSON with what either port fills in by default left out, so that what one
    port wrote and the other read back compare (exactly: times to the last bit)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if v is None or (where != "state" and _DEFAULTS.get(k, object()) == v):
                continue
            out[k] = canonical(v, "state" if k in ("state_delta", "args", "response") else "")
        return out
    if isinstance(value, list):
        return [canonical(v, where) for v in value]
    return value


def same(a: dict[str, Any], b: dict[str, Any]) -> None:
    """``a`` and ``b`` (views: state and events) alike; else the first difference, whole."""
    assert a["state"] == b["state"]
    assert len(a["events"]) == len(b["events"])
    for i, (x, y) in enumerate(zip(a["events"], b["events"], strict=True)):
        shown = "\n".join(json.dumps(e, sort_keys=True) for e in (x, y))
        assert x == y, f"event {i}:\n{shown}"


def python_view(session: Any) -> dict[str, Any]:
    return {
        "state": dict(session.state),
        "events": [canonical(e.model_dump(mode="json", exclude_none=True)) for e in session.events],
    }


def node_view(view: dict[str, Any]) -> dict[str, Any]:
    return {"state": view["state"], "events": [canonical(e) for e in view["events"]]}


@pytest.fixture(params=["REDIS_URL", "REDIS_CLUSTER_URL"], ids=["redis7", "cluster"])
async def conversation(request: pytest.FixtureRequest) -> AsyncIterator[Conversation]:
    node_or_skip()
    url = skip_without(request.param)
    cluster = request.param == "REDIS_CLUSTER_URL"
    # A prefix of its own: other suites flush these servers, this one never does.
    config = SessionServiceConfig(key_prefix=f"mixed-{uuid.uuid4().hex[:10]}")
    service = RedisSessionService.from_url(url, config=config, cluster=cluster)
    try:
        yield Conversation(url, cluster, service)
    finally:
        await service.aclose()


async def test_python_and_node_workers_serve_one_conversation(
    conversation: Conversation,
) -> None:
    c = conversation
    await c.service.create_session(
        app_name=APP,
        user_id=USER,
        session_id=c.session_id,
        state={"notes": [], "user:name": "Ravi", "app:motd": "héllo 🌍"},
    )
    await c.python_turn("note python one")

    # Node reads Python's events and every scope exactly, and its model is shown them.
    py_before = python_view(await c.read())
    node = await c.node_turn("note node two")
    same(node_view(node["before"]), py_before)
    assert [canonical(e) for e in await c.stored()][: len(py_before["events"])] == [
        canonical(e) for e in node["before"]["events"]
    ]
    assert "python one" in " ".join(node["shown"])
    assert "noted by python" in node["shown"]

    # Python reads Node's events and state exactly: what Node saw after its turn.
    after_node = await c.read()
    same(python_view(after_node), node_view(node["after"]))
    assert [canonical(e) for e in await c.stored()] == node_view(node["after"])["events"]
    assert after_node.state["notes"] == ["python one", "node two"]
    assert after_node.state["last_by"] == "node"
    assert after_node.state["user:turns"] == 2
    assert after_node.state["app:served"] == 2
    assert after_node.state["user:name"] == "Ravi"
    assert after_node.state["app:motd"] == "héllo 🌍"
    assert not [k for k in after_node.state if k.startswith("temp:")]
    assert {e.author for e in after_node.events} == {"user", "assistant"}

    shown = await c.python_turn("note python three")
    assert "node two" in " ".join(shown)
    assert "noted by node" in shown

    # A stale Python copy, behind a Node turn: refused, nothing written, then retried.
    stale_copy = await c.read()
    await c.node_turn("note node four")
    late = Event(
        invocation_id="py-stale",
        author="assistant",
        content=types.Content(role="model", parts=[types.Part(text="late note from python")]),
    )
    late.actions.state_delta.update({"last_by": "python-stale", "user:late": "python"})
    stored_before = await c.stored()
    with pytest.raises(StaleSessionError):
        await c.service.append_event(stale_copy, late)
    assert await c.stored() == stored_before
    await c.service.append_event(await c.read(), late)

    # A stale Node copy, behind a Python append: refused, then retried.
    proc = await asyncio.create_subprocess_exec(
        node_or_skip(),
        str(WORKER),
        c.request("stale"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdin is not None
        ready = await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)
        assert json.loads(ready) == {"ready": True}
        await c.python_turn("note python five")
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    stale = json.loads(out.decode().splitlines()[-1])
    assert stale["refused"] == "StaleSessionError"

    final = await c.read()
    same(python_view(final), node_view(stale["after"]))
    assert final.state["notes"] == [
        "python one",
        "node two",
        "python three",
        "node four",
        "python five",
    ]
    assert final.state["user:turns"] == 5
    assert final.state["app:served"] == 5
    assert final.state["last_by"] == "node-stale"
    assert final.state["user:late"] == "node"
    assert final.state["app:late"] == "node"
    texts = [p.text for e in final.events for p in (e.content.parts if e.content else []) if p.text]
    assert texts == [
        "note python one",
        "noted by python",
        "note node two",
        "noted by node",
        "note python three",
        "noted by python",
        "note node four",
        "noted by node",
        "late note from python",
        "note python five",
        "noted by python",
        "late note from node",
    ]

    # The command line shows it as one conversation: every turn, in order.
    argv = [sys.executable, "-m", "redis_agent_sessions", "show", APP, USER, c.session_id]
    argv += ["--url", c.url, "--key-prefix", c.prefix, *(["--cluster"] if c.cluster else [])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    record = json.loads(await output(*argv, "--json", env=env))
    assert [canonical(e) for e in record["events"]] == python_view(final)["events"]
    assert record["state"]["user"]["turns"] == 5
    assert record["state"]["app"]["served"] == 5
    transcript = await output(*argv, env=env)
    at = 0
    for text in texts:  # each turn's text, after the one before it
        at = transcript.index(text, at) + len(text)
