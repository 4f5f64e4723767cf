"""``redis-agent-sessions mcp`` as a process, talked to with the MCP SDK's own client over
stdio and over streamable HTTP, and by an ADK agent through ADK's MCP toolset: every tool's
answer is what the library returns on the same store; bad calls, read-only and ACL refusals
get one-line tool errors naming what is wrong; HTTP off loopback needs a bearer token."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="needs the [mcp] extra (mcp is not installed)")

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from _cli import FORKERS
from _servers import skip_without
from redis_agent_sessions import (
    CallableGenerator,
    Content,
    Event,
    GenerationRequest,
    MemoryOperation,
    Part,
    RedisMemoryService,
    RedisSessionService,
    SessionServiceConfig,
)
from redis_agent_sessions.mcp import READS, WRITES

pytestmark = [pytest.mark.mcp, pytest.mark.real]

APP, USER, OTHER, LEARNER = "mcp_app", "ada", "bob", "cleo"
STARTUP = 60.0  # seconds a server process may take to start (imports on a busy machine)


@dataclass
class Store:
    """A real Redis under a key prefix of its own, seeded through the library."""

    url: str
    cluster: bool
    prefix: str
    sessions: RedisSessionService
    memory: RedisMemoryService
    session_ids: list[str]
    fact_id: str

    def argv(self, *args: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "redis_agent_sessions",
            "mcp",
            "--url",
            self.url,
            "--key-prefix",
            self.prefix,
            "--app",
            APP,
            *(["--cluster"] if self.cluster else []),
            *args,
        ]


def _learn(request: GenerationRequest) -> list[MemoryOperation]:
    """Each turn becomes the user's one fact, revised: a fact with a history."""
    text = " ".join(e.content.text for e in request.events if e.content is not None)
    if request.facts:
        return [MemoryOperation(action="update", fact_id=request.facts[0].id, fact=text)]
    return [MemoryOperation(action="add", fact=text, topics=["drinks"])]


@pytest.fixture
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """On Redis 7; a test parametrized indirectly with "REDIS_CLUSTER_URL" gets the cluster."""
    variable = getattr(request, "param", "REDIS_URL")
    url = skip_without(variable)
    cluster = variable == "REDIS_CLUSTER_URL"
    prefix = f"mcp-{uuid.uuid4().hex[:8]}"
    client: Any = RedisCluster.from_url(url) if cluster else Redis.from_url(url)
    config = SessionServiceConfig(key_prefix=prefix)
    sessions = RedisSessionService(client, config=config)
    memory = RedisMemoryService(client, config=config)
    learner = RedisMemoryService(
        client, config=config, generator=CallableGenerator(_learn, name="learn")
    )
    ids = []
    turns = [
        ["Which scarf for the wedding?", "The blue one, it matches the dress."],
        ["Book a table for two at nine", "Done: Luigi's, nine o'clock."],
    ]
    for i, said in enumerate(turns):
        session = await sessions.create_session(app_name=APP, user_id=USER, state={"n": i})
        for j, text in enumerate(said):
            event = Event(
                author="user" if j == 0 else "agent",
                timestamp=1_700_000_000 + 10 * i + j,
                content=Content(role="user", parts=[Part(text=text)]),
            )
            await sessions.append_event(session, event)
        await memory.add_session_to_memory(session)
        ids.append(session.id)
    await sessions.create_session(app_name=APP, user_id=OTHER, session_id="other")
    for said in ("I drink tea", "I drink coffee now"):
        await learner.add_events_to_memory(
            app_name=APP,
            user_id=LEARNER,
            session_id="s",
            events=[Event(author="user", content=Content(parts=[Part(text=said)]))],
        )
    [fact] = await memory.list_facts(app_name=APP, user_id=LEARNER)
    try:
        yield Store(url, cluster, prefix, sessions, memory, ids, fact.id)
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await client.delete(*keys)
        await client.aclose()


def answer(result: Any) -> Any:
    """A successful tool call's JSON."""
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def error(result: Any) -> str:
    """A failed tool call's one line."""
    assert result.is_error, result.content
    [content] = result.content
    assert "Traceback" not in content.text, content.text
    assert "\n" not in content.text, content.text
    return str(content.text)


def stdio(store: Store, *args: str) -> Client:
    # The whole environment: the SDK passes a child only a few variables by default, and the
    # suite's may say where the package is (PYTHONPATH).
    command, *argv = store.argv(*args)
    return Client(StdioServerParameters(command=command, args=argv, env=dict(os.environ)))


# A cluster keeps no app-wide by-update index (each user's keys are in a slot of their own):
# list_sessions without a user takes the listing's other path there.
@pytest.mark.parametrize(
    "store",
    ["REDIS_URL", pytest.param("REDIS_CLUSTER_URL", marks=pytest.mark.cluster)],
    indirect=True,
)
async def test_every_tool_over_stdio_answers_as_the_library(store: Store) -> None:
    async with stdio(store, "--allow-writes") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert sorted(tools) == sorted(READS + WRITES)
        assert tools["search_memory"].annotations.read_only_hint
        assert tools["delete_memory"].annotations.destructive_hint
        assert tools["search_memory"].input_schema["required"] == ["user_id", "query"]

        found = answer(await client.call_tool("search_memory", {"user_id": USER, "query": "scarf"}))
        expected = await store.memory.search_memory(app_name=APP, user_id=USER, query="scarf")
        assert found["memories"] == [
            m.model_dump(mode="json", exclude_none=True) for m in expected.memories
        ]
        assert found["memories"][0]["content"]["parts"][0]["text"].startswith("Which scarf")
        # The filters reach the library's search as they are: an ISO time (UTC when it has
        # no offset) or epoch seconds.
        within = {"author": ["agent"], "session_ids": [store.session_ids[0]], "kind": "event"}
        filtered = answer(
            await client.call_tool(
                "search_memory",
                {"user_id": USER, "query": "scarf blue table", "since": "2023-11-14T22:13:20"}
                | within,
            )
        )
        expected = await store.memory.search_memory(
            app_name=APP, user_id=USER, query="scarf blue table", since=1_700_000_000, **within
        )
        assert filtered["memories"] == [
            m.model_dump(mode="json", exclude_none=True) for m in expected.memories
        ]
        assert [m["author"] for m in filtered["memories"]] == ["agent"]

        facts = answer(await client.call_tool("list_facts", {"user_id": LEARNER}))
        expected_facts = await store.memory.list_facts(app_name=APP, user_id=LEARNER)
        assert facts["facts"] == [f.model_dump(mode="json") for f in expected_facts]
        assert facts["facts"][0]["text"] == "I drink coffee now"
        history = answer(
            await client.call_tool("fact_history", {"user_id": LEARNER, "fact_id": store.fact_id})
        )
        revisions = await store.memory.fact_history(
            app_name=APP, user_id=LEARNER, fact_id=store.fact_id
        )
        assert history["revisions"] == [r.model_dump(mode="json") for r in revisions]
        assert [r["text"] for r in history["revisions"]] == ["I drink tea"]

        listed = answer(await client.call_tool("list_sessions", {"user_id": USER}))
        page = await store.sessions.list_sessions_page(app_name=APP, user_id=USER, page_size=20)
        assert [s["session_id"] for s in listed["sessions"]] == [s.id for s in page.sessions]
        assert [s["state"] for s in listed["sessions"]] == [s.state for s in page.sessions]
        everyone = answer(await client.call_tool("list_sessions", {"limit": 1}))
        assert len(everyone["sessions"]) == 1
        assert everyone["next_page_token"]
        rest = answer(
            await client.call_tool(
                "list_sessions", {"limit": 10, "page_token": everyone["next_page_token"]}
            )
        )
        seen = {s["user_id"] for s in everyone["sessions"] + rest["sessions"]}
        assert seen == {USER, OTHER}

        sid = store.session_ids[0]
        events = answer(
            await client.call_tool(
                "recent_events", {"user_id": USER, "session_id": sid, "limit": 1}
            )
        )
        newest = await store.sessions.list_events(
            app_name=APP, user_id=USER, session_id=sid, limit=1, newest_first=True
        )
        assert events["events"] == [
            e.model_dump(mode="json", exclude_none=True) for e in newest.events
        ]

        added = answer(
            await client.call_tool(
                "add_memory",
                {"user_id": USER, "text": "Ada's cat is called Pixel", "metadata": {"k": 1}},
            )
        )
        found_lib = await store.memory.search_memory(app_name=APP, user_id=USER, query="Pixel")
        assert [m.id for m in found_lib.memories] == [added["id"]]
        assert found_lib.memories[0].custom_metadata == {"k": 1}

        other = await store.sessions.create_session(app_name=APP, user_id=OTHER)
        await store.sessions.append_event(
            other, Event(author="user", content=Content(parts=[Part(text="my hovercraft")]))
        )
        stored = answer(
            await client.call_tool(
                "add_session_to_memory", {"user_id": OTHER, "session_id": other.id}
            )
        )
        assert stored == {"session_id": other.id, "events": 1}
        hover = await store.memory.search_memory(app_name=APP, user_id=OTHER, query="hovercraft")
        assert len(hover.memories) == 1

        gone = answer(
            await client.call_tool("delete_memory", {"user_id": USER, "memory_id": added["id"]})
        )
        assert gone == {"deleted": added["id"]}
        after = await store.memory.search_memory(app_name=APP, user_id=USER, query="Pixel")
        assert after.memories == []
        answer(
            await client.call_tool(
                "delete_memory", {"user_id": LEARNER, "memory_id": store.fact_id}
            )
        )
        assert await store.memory.list_facts(app_name=APP, user_id=LEARNER) == []


async def test_bad_calls_get_one_line_naming_the_argument(store: Store) -> None:
    before = await store.memory.search_memory(app_name=APP, user_id=USER, query="scarf")
    async with stdio(store, "--allow-writes") as client:
        missing = error(await client.call_tool("search_memory", {"user_id": USER}))
        assert missing == "search_memory: missing argument 'query'"
        wrong = error(
            await client.call_tool(
                "search_memory", {"user_id": USER, "query": "x", "limit": "many"}
            )
        )
        assert wrong.startswith("search_memory: argument 'limit': ")
        assert "many" not in wrong  # the caller's value is not echoed back
        big = error(
            await client.call_tool("search_memory", {"user_id": USER, "query": "x", "limit": 0})
        )
        assert "'limit'" in big
        unknown = error(
            await client.call_tool("search_memory", {"user_id": USER, "query": "x", "topic": "t"})
        )
        assert unknown.startswith(
            "search_memory: unknown argument 'topic' (it takes user_id, query, limit, author,"
        )
        backwards = error(
            await client.call_tool(
                "search_memory", {"user_id": USER, "query": "x", "since": 20, "until": 10}
            )
        )
        assert backwards.startswith("search_memory: ")
        assert "since" in backwards
        not_a_time = error(
            await client.call_tool(
                "search_memory", {"user_id": USER, "query": "x", "since": "last week"}
            )
        )
        assert not_a_time == (
            "search_memory: since: not an ISO 8601 time or epoch seconds: 'last week'"
        )
        bad_id = error(await client.call_tool("list_facts", {"user_id": ""}))
        assert "user_id" in bad_id
        no_session = error(
            await client.call_tool("recent_events", {"user_id": USER, "session_id": "nope"})
        )
        assert no_session == f"recent_events: no session 'nope' of user '{USER}' in app '{APP}'"
        no_memory = error(
            await client.call_tool("delete_memory", {"user_id": USER, "memory_id": "nope"})
        )
        assert no_memory == f"delete_memory: no memory 'nope' of user '{USER}' in app '{APP}'"
        empty = error(await client.call_tool("add_memory", {"user_id": USER, "text": ""}))
        assert "'text'" in empty
        assert "Unknown tool" in error(await client.call_tool("forget_everything", {}))
        # The server is still there, and nothing was written.
        answer(await client.call_tool("list_facts", {"user_id": USER}))
    after = await store.memory.search_memory(app_name=APP, user_id=USER, query="scarf")
    assert after == before


async def test_read_only_server_lists_no_write_and_refuses_one(store: Store) -> None:
    async with stdio(store, "--user", USER) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert sorted(tools) == sorted(READS)
        # The user is the operator's: no tool takes one, and a call passing one is refused.
        assert all("user_id" not in t.input_schema["properties"] for t in tools.values())
        found = answer(await client.call_tool("search_memory", {"query": "table"}))
        assert "Book a table" in found["memories"][0]["content"]["parts"][0]["text"]
        listed = answer(await client.call_tool("list_sessions", {}))
        assert {s["user_id"] for s in listed["sessions"]} == {USER}
        refused = error(await client.call_tool("add_memory", {"text": "x"}))
        assert refused == (
            "add_memory: this server is read-only, and add_memory writes memory: its operator "
            "allows writes with --allow-writes"
        )
        other = error(await client.call_tool("search_memory", {"user_id": OTHER, "query": "table"}))
        assert "no argument 'user_id': this server serves one user" in other


@asynccontextmanager
async def http_server(
    store: Store, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[str]:
    """The server over HTTP on a free port; yields its URL (from its start line)."""
    proc = await asyncio.create_subprocess_exec(
        *store.argv("--transport", "http", "--port", "0", *args),
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    assert proc.stderr is not None
    try:
        line = (await asyncio.wait_for(proc.stderr.readline(), STARTUP)).decode()
        assert " on http://" in line, line
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


async def test_http_on_loopback_answers_as_over_stdio(store: Store) -> None:
    async with http_server(store) as url, Client(url) as client:
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/mcp")
        assert sorted(t.name for t in (await client.list_tools()).tools) == sorted(READS)
        found = answer(await client.call_tool("search_memory", {"user_id": USER, "query": "dress"}))
        expected = await store.memory.search_memory(app_name=APP, user_id=USER, query="dress")
        assert found["memories"] == [
            m.model_dump(mode="json", exclude_none=True) for m in expected.memories
        ]
        assert "read-only" in error(
            await client.call_tool("delete_memory", {"user_id": USER, "memory_id": "m"})
        )


async def test_http_elsewhere_needs_a_bearer_token(store: Store, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    async with http_server(store, "--host", "0.0.0.0", "--token-file", str(token_file)) as url:
        local = url.replace("0.0.0.0", "127.0.0.1")
        async with httpx2.AsyncClient() as http:
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                response = await http.post(local, json={}, headers=headers)
                assert response.status_code == 401
        async with (
            httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret-token"}) as http,
            Client(streamable_http_client(local, http_client=http)) as client,
        ):
            listed = answer(await client.call_tool("list_sessions", {"user_id": OTHER}))
            assert [s["session_id"] for s in listed["sessions"]] == ["other"]

    async with http_server(store, "--host", "0.0.0.0", env={"RAS_MCP_TOKEN": "from-env"}) as url:
        local = url.replace("0.0.0.0", "127.0.0.1")
        async with (
            httpx2.AsyncClient(headers={"Authorization": "Bearer from-env"}) as http,
            Client(streamable_http_client(local, http_client=http)) as client,
        ):
            assert len((await client.list_tools()).tools) == len(READS)


async def test_a_write_the_acl_refuses_says_why(store: Store) -> None:
    admin = Redis.from_url(store.url)
    name = f"mcp-reader-{uuid.uuid4().hex[:6]}"
    # Every command but writes: the scripts run, and the first write in them is refused.
    await admin.execute_command("ACL", "SETUSER", name, "on", ">pw", "~*", "&*", "+@all", "-@write")
    host_port = store.url.split("://", 1)[1].split("/", 1)[0]
    reader = Store(
        f"redis://{name}:pw@{host_port}/0",
        False,
        store.prefix,
        store.sessions,
        store.memory,
        store.session_ids,
        store.fact_id,
    )
    try:
        async with stdio(reader, "--allow-writes") as client:
            answer(await client.call_tool("search_memory", {"user_id": USER, "query": "scarf"}))
            refused = error(await client.call_tool("add_memory", {"user_id": USER, "text": "x"}))
            assert refused.startswith("add_memory: refused by Redis's ACL: the Redis user may ")
            assert "may not" in refused
    finally:
        await admin.execute_command("ACL", "DELUSER", name)
        await admin.aclose()


async def test_an_adk_agent_uses_the_tools_through_mcp_toolset(store: Store) -> None:
    pytest.importorskip("google.adk", reason="needs the [adk] extra (google.adk is not installed)")
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.adk.tools.mcp_tool import McpToolset, StreamableHTTPConnectionParams
    from google.genai import types

    class Scripted(BaseLlm):
        """Asks search_memory about the user's question, then answers with what came back."""

        model: str = "scripted-mcp"
        offered: list[str] = []  # noqa: RUF012 (pydantic copies it per instance)
        recalled: list[Any] = []  # noqa: RUF012

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> Any:
            self.offered = sorted(llm_request.tools_dict)
            parts = llm_request.contents[-1].parts or []
            results = [p.function_response for p in parts if p.function_response]
            if results:
                self.recalled.append(results[0].response)
                part = types.Part(text="It was the blue one.")
            else:
                question = " ".join(p.text for p in parts if p.text)
                part = types.Part.from_function_call(
                    name="search_memory", args={"query": question, "limit": 3}
                )
            yield LlmResponse(content=types.Content(role="model", parts=[part]))

    async with http_server(store, "--user", USER) as url:
        toolset = McpToolset(connection_params=StreamableHTTPConnectionParams(url=url))
        model = Scripted()
        agent = LlmAgent(name="mcp_agent", model=model, tools=[toolset])
        sessions = InMemorySessionService()  # type: ignore[no-untyped-call]
        runner = Runner(agent=agent, app_name="adk_side", session_service=sessions)
        try:
            session = await sessions.create_session(app_name="adk_side", user_id="someone")
            question = types.Content(role="user", parts=[types.Part(text="which scarf?")])
            replies = [
                e
                async for e in runner.run_async(
                    user_id="someone", session_id=session.id, new_message=question
                )
            ]
        finally:
            await toolset.close()
    assert model.offered == sorted(READS)
    [response] = model.recalled
    expected = await store.memory.search_memory(
        app_name=APP, user_id=USER, query="which scarf?", limit=3
    )
    text = json.dumps(response)
    assert "Which scarf for the wedding?" in text
    for entry in expected.memories:
        assert entry.id is not None
        assert entry.id in text
    assert replies[-1].content.parts[0].text == "It was the blue one."


async def test_the_command_refuses_what_it_cannot_serve_in_one_line(store: Store) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = str(taken.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if k != "RAS_MCP_TOKEN"}
    try:
        for args, said in [
            (("--port", "8765"), "--port: only with --transport http"),
            (
                ("--transport", "http", "--port", port),
                f"cannot listen on 127.0.0.1 port {port}: Address already in use",
            ),
            (
                ("--transport", "http", "--host", "0.0.0.0"),
                "--host 0.0.0.0 may be reached from other machines: give a bearer token "
                "(--token-file FILE, or $RAS_MCP_TOKEN) that clients must send",
            ),
        ]:
            # Forked from a process that imported the CLI (tests/_cli.py): nothing starts.
            done = FORKERS.run(
                store.argv(*args)[3:], stdin="", env=env, preload=("redis_agent_sessions.mcp",)
            )
            assert (done.returncode, done.stderr) == (2, f"redis-agent-sessions: {said}\n")
    finally:
        taken.close()


def test_without_the_extra_the_command_says_which(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from redis_agent_sessions.cli import main

    url = skip_without("REDIS_URL")
    for name in [m for m in sys.modules if m.startswith("redis_agent_sessions.mcp")]:
        monkeypatch.delitem(sys.modules, name)
    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if never installed
    assert main(["mcp", "--url", url, "--app", APP]) == 2
    assert capsys.readouterr().err == (
        "redis-agent-sessions: `mcp` needs the [mcp] extra (mcp is missing): "
        "pip install 'redis-agent-sessions[mcp]'\n"
    )


async def test_serve_http_off_loopback_without_a_token_starts_nothing() -> None:
    import fakeredis

    from redis_agent_sessions.errors import InvalidInputError
    from redis_agent_sessions.mcp import build_server, is_loopback, serve_http

    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "127.1.2.3")] == [True] * 4
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com"))
    redis = fakeredis.FakeAsyncRedis()
    server = build_server(RedisSessionService(redis), RedisMemoryService(redis), app_name=APP)
    with pytest.raises(InvalidInputError, match="needs a bearer token"):
        await serve_http(server, host="0.0.0.0", port=0)
    await redis.aclose()
