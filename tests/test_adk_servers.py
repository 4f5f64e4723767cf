"""ADK's own CLI and servers, configured by URI, on our services.

Two real ``adk api_server`` processes serve tests/adk_server_agents (copied to a temporary
agents directory): its ``services.yaml`` is the documented recipe (README, docs/adk.md) that
maps ``redis://`` URIs to our session and memory services, and ``counter_app`` is a
model-free agent writing
session, ``user:``, ``app:`` and ``temp:`` state and adding its session to memory every
turn. One conversation alternates between the two servers over HTTP, and Redis is checked
directly. Needs REDIS_URL; each test has a key prefix of its own and deletes its keys.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from _servers import skip_without

pytest.importorskip("google.adk", reason="needs the [adk] extra (google.adk is not installed)")

import httpx
from redis.asyncio import Redis

from redis_agent_sessions import InvalidInputError
from redis_agent_sessions.adk import RedisMemoryService, RedisSessionService
from redis_agent_sessions.keys import KeySpace

pytestmark = pytest.mark.adk

AGENTS = Path(__file__).parent / "adk_server_agents"
ADK = Path(sys.executable).parent / "adk"
APP = "counter_app"
AGENT = "counter_agent"
STARTUP_SECONDS = 60


@dataclass
class Server:
    """One ``adk api_server`` process."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def agents_dir(tmp_path: Path) -> Path:
    """The checked-in agents directory, copied so the servers write nothing in the tree."""
    target = tmp_path / "agents"
    shutil.copytree(AGENTS, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def spawn(agents: Path, session_uri: str, memory_uri: str, name: str) -> Server:
    """``adk api_server`` on a free loopback port, logging to ``<name>.log`` beside ``agents``."""
    port = free_port()
    log = agents.parent / f"{name}.log"
    with log.open("wb") as out:  # a file, not a pipe: a full pipe would block the server
        proc = subprocess.Popen(
            [
                str(ADK),
                "api_server",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--session_service_uri",
                session_uri,
                "--memory_service_uri",
                memory_uri,
                str(agents),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=agents.parent,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    return Server(f"http://127.0.0.1:{port}", proc, log)


def stop(server: Server) -> None:
    if server.proc.poll() is None:
        server.proc.terminate()
        try:
            server.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait(timeout=10)


def wait_ready(servers: list[Server]) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    pending = list(servers)
    while pending:
        server = pending[0]
        if server.proc.poll() is not None:
            pytest.fail(
                f"adk api_server exited with {server.proc.returncode} before serving:\n"
                + server.output()
            )
        try:
            if httpx.get(f"{server.url}/list-apps", timeout=2).json() == [APP]:
                pending.pop(0)
                continue
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(
                f"adk api_server not ready on {server.url} after {STARTUP_SECONDS}s:\n"
                + server.output()
            )
        time.sleep(0.1)


@pytest.fixture
async def redis_setup() -> AsyncIterator[tuple[str, str, Redis]]:
    """REDIS_URL, a key prefix of this test's own, and an admin client; keys deleted after."""
    redis_url = skip_without("REDIS_URL")
    prefix = f"adk-srv-{uuid.uuid4().hex[:12]}"
    client = Redis.from_url(redis_url)
    yield redis_url, prefix, client
    async for key in client.scan_iter(match=f"{prefix}:*"):
        await client.delete(key)
    await client.aclose()


@pytest.fixture
def start_servers(
    redis_setup: tuple[str, str, Redis], tmp_path: Path
) -> Iterator[Callable[[int], list[Server]]]:
    """Starts ``n`` servers on the test's Redis and prefix; all are stopped afterwards
    (before ``redis_setup`` deletes the keys)."""
    redis_url, prefix, _ = redis_setup
    started: list[Server] = []

    agents = agents_dir(tmp_path)

    def start(n: int) -> list[Server]:
        servers = []
        for _ in range(n):
            server = spawn(
                agents,
                f"{redis_url}?key_prefix={prefix}",
                f"{redis_url}?key_prefix={prefix}&memory_backend=plain",
                f"server{len(started)}",
            )
            started.append(server)
            servers.append(server)
        wait_ready(servers)
        return servers

    yield start
    for server in started:
        stop(server)


async def all_keys(client: Redis, prefix: str) -> list[bytes]:
    return sorted([key async for key in client.scan_iter(match=f"{prefix}:*")])


async def json_hash(client: Redis, key: str) -> dict[str, Any]:
    return {k.decode(): json.loads(v) for k, v in (await client.hgetall(key)).items()}


async def everything_stored(client: Redis, prefix: str) -> bytes:
    """Every key name and value under ``prefix``, concatenated."""
    dump = b""
    for key in await all_keys(client, prefix):
        kind = (await client.type(key)).decode()
        if kind == "hash":
            value = repr(await client.hgetall(key))
        elif kind == "stream":
            value = repr(await client.xrange(key))
        elif kind == "zset":
            value = repr(await client.zrange(key, 0, -1, withscores=True))
        elif kind == "set":
            value = repr(await client.smembers(key))
        elif kind == "string":
            value = repr(await client.get(key))
        else:
            value = kind
        dump += key + b"=" + value.encode() + b"\n"
    return dump


def message(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def texts(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["author"], e["content"]["parts"][0]["text"]) for e in events]


@pytest.mark.real
@pytest.mark.slow
async def test_one_conversation_across_two_servers(
    start_servers: Callable[[int], list[Server]],
    redis_setup: tuple[str, str, Redis],
) -> None:
    redis_url, prefix, client = redis_setup
    a, b = start_servers(2)
    user, sid = "user-1", f"conv-{uuid.uuid4().hex[:8]}"
    keys = KeySpace(prefix).session(APP, user, sid)
    sessions_path = f"/apps/{APP}/users/{user}/sessions"
    words = ["alpha", "bravo", "charlie", "delta"]

    async with httpx.AsyncClient(timeout=30) as http:
        created = await http.post(
            f"{a.url}{sessions_path}",
            json={
                "session_id": sid,
                "state": {"topic": "servers", "user:plan": "pro", "app:version": 7, "temp:x": 1},
                "options": {"ttl": "3600s"},
            },
        )
        assert created.status_code == 200, created.text
        assert created.json()["state"] == {"topic": "servers", "user:plan": "pro", "app:version": 7}
        assert await client.hget(keys.meta, "ttl") == b"3600"

        expected_events: list[tuple[str, str]] = []
        for turn, word in enumerate(words, start=1):
            writer, reader = (a, b) if turn % 2 else (b, a)
            ran = await http.post(
                f"{writer.url}/run",
                json={
                    "app_name": APP,
                    "user_id": user,
                    "session_id": sid,
                    "new_message": message(f"hello {word}"),
                },
            )
            assert ran.status_code == 200, ran.text + writer.output()
            reply = ran.json()
            assert texts(reply) == [(AGENT, f"turn {turn}")]
            # The agent's delta also set temp:scratch, which is neither stored nor served.
            assert reply[0]["actions"]["stateDelta"] == {
                "turns": turn,
                "user:turns_total": turn,
                "app:last_user": user,
            }
            expected_events += [("user", f"hello {word}"), (AGENT, f"turn {turn}")]

            # The other server sees exactly what this one wrote.
            got = await http.get(f"{reader.url}{sessions_path}/{sid}")
            assert got.status_code == 200, got.text
            seen = got.json()
            assert seen["state"] == {
                "topic": "servers",
                "turns": turn,
                "user:plan": "pro",
                "user:turns_total": turn,
                "app:version": 7,
                "app:last_user": user,
            }
            assert len(seen["events"]) == 2 * turn
            assert texts(seen["events"]) == expected_events
            assert seen["events"][-1] == reply[0]

        # Both servers serve the same session, and list it.
        from_a = (await http.get(f"{a.url}{sessions_path}/{sid}")).json()
        from_b = (await http.get(f"{b.url}{sessions_path}/{sid}")).json()
        assert from_a == from_b
        for server in (a, b):
            listed = await http.get(f"{server.url}{sessions_path}")
            assert listed.status_code == 200, listed.text
            assert [(s["id"], s["state"]) for s in listed.json()] == [(sid, from_a["state"])]

        # Redis holds exactly that, under the URI's key prefix.
        assert await json_hash(client, keys.state) == {"topic": "servers", "turns": 4}
        assert await json_hash(client, keys.user_state) == {"plan": "pro", "turns_total": 4}
        assert await json_hash(client, keys.app_state) == {"version": 7, "last_user": user}
        assert await client.xlen(keys.events) == 8
        assert await client.hlen(keys.event_ids) == 8
        assert await client.hget(keys.meta, "ttl") == b"3600"
        for key in (keys.meta, keys.state, keys.events, keys.event_ids):
            assert 3500 < await client.ttl(key) <= 3600, key
        stored = await everything_stored(client, prefix)
        assert b"temp:" not in stored
        assert b"scratch" not in stored
        # Memory by URI: the agent added the session every turn, before its own reply.
        space = KeySpace(prefix)
        entries = await client.zrange(space.memory_entries(APP, user), 0, -1)
        assert {e.decode() for e in entries} == {e["id"] for e in from_a["events"][:7]}
        assert await client.get(space.memory_backend()) == b"plain"
        memory = RedisMemoryService(uri=f"{redis_url}?key_prefix={prefix}&memory_backend=plain")
        try:
            found = await memory.search_memory(app_name=APP, user_id=user, query="charlie")
        finally:
            await memory.aclose()
        # First the turn that says it; the turns around it are found through it.
        said = [m.content.parts[0].text for m in found.memories if m.content.parts]
        assert said[0] == "hello charlie"

        deleted = await http.delete(f"{b.url}{sessions_path}/{sid}")
        assert deleted.status_code == 200, deleted.text
        gone = await http.get(f"{a.url}{sessions_path}/{sid}")
        assert gone.status_code == 404, gone.text
        assert (await http.get(f"{a.url}{sessions_path}")).json() == []

    for key in (keys.meta, keys.state, keys.events, keys.event_ids):
        assert not await client.exists(key), key
    assert await client.zscore(keys.user_sessions, sid) is None
    # User and app state outlive the session, as in ADK.
    assert await json_hash(client, keys.user_state) == {"plan": "pro", "turns_total": 4}
    assert await json_hash(client, keys.app_state) == {"version": 7, "last_user": user}
    for server in (a, b):
        assert server.proc.poll() is None, server.output()
        assert "Traceback" not in server.output(), server.output()


@pytest.mark.real
@pytest.mark.slow
async def test_bad_session_options_are_refused_over_rest(
    start_servers: Callable[[int], list[Server]],
    redis_setup: tuple[str, str, Redis],
) -> None:
    _, prefix, client = redis_setup
    (server,) = start_servers(1)
    user, sid = "user-2", "bad-ttl"
    url = f"{server.url}/apps/{APP}/users/{user}/sessions"
    async with httpx.AsyncClient(timeout=30) as http:
        bad = await http.post(
            url, json={"session_id": sid, "state": {"a": 1}, "options": {"ttl": "soon"}}
        )
        assert bad.status_code == 400, bad.text
        detail = bad.json()["detail"]
        assert "ttl" in detail
        assert "'soon'" in detail
        assert (await http.get(f"{url}/{sid}")).status_code == 404
        assert await all_keys(client, prefix) == []

        # ADK itself refuses options create_session does not take.
        unknown = await http.post(url, json={"session_id": sid, "options": {"expiry": "1h"}})
        assert unknown.status_code == 400, unknown.text
        assert "not supported" in unknown.json()["detail"]
        assert await all_keys(client, prefix) == []

        # The id is still free: a good TTL creates the session with it.
        good = await http.post(url, json={"session_id": sid, "options": {"ttl": 60}})
        assert good.status_code == 200, good.text
    keys = KeySpace(prefix).session(APP, user, sid)
    assert await client.hget(keys.meta, "ttl") == b"60"
    assert 0 < await client.ttl(keys.meta) <= 60


@pytest.mark.parametrize("service", [RedisSessionService, RedisMemoryService])
def test_unknown_uri_parameter_is_refused(service: Any) -> None:
    # No server needed: the URI is refused before any connection is made.
    with pytest.raises(InvalidInputError, match=r"unknown URL parameter 'bogus'.*key_prefix"):
        service(uri="redis://127.0.0.1:1/0?key_prefix=p&bogus=1")


@pytest.mark.slow
def test_cli_refuses_unknown_uri_parameter(tmp_path: Path) -> None:
    bad = "redis://127.0.0.1:1/0?key_prefix=p&bogus=1"
    server = spawn(agents_dir(tmp_path), bad, "redis://127.0.0.1:1/0?key_prefix=p", "bad")
    try:
        server.proc.wait(timeout=STARTUP_SECONDS)
    finally:
        stop(server)
    assert server.proc.returncode != 0, server.output()
    assert "unknown URL parameter 'bogus'" in server.output()
