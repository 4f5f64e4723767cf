"""As a user with only what the managed services allow (tests/_managed.py, from their
published lists): the services, their readiness and every operator command work, on real
Redis 7 and the real cluster, with every setting in the URL (key prefix, memory backend,
cluster) as a managed deployment passes them."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from _cli import FORKERS
from _managed import managed_user, user_url
from _servers import skip_without
from redis_agent_sessions import (
    CallableGenerator,
    Content,
    Event,
    EventActions,
    MemoryEntry,
    MemoryOperation,
    Part,
    RedisMemoryService,
    RedisSessionService,
)
from redis_agent_sessions.cli import _COMMANDS

pytestmark = [pytest.mark.real, pytest.mark.cli]

TESTS = Path(__file__).parent


@dataclass
class Managed:
    url: str
    """The managed user's URL, carrying key_prefix, memory_backend=plain (and cluster)."""
    admin: Any
    cluster: bool
    prefix: str


@pytest.fixture(params=["REDIS_URL", pytest.param("REDIS_CLUSTER_URL", marks=pytest.mark.cluster)])
async def managed(request: pytest.FixtureRequest) -> AsyncIterator[Managed]:
    url = skip_without(request.param)
    cluster = request.param == "REDIS_CLUSTER_URL"
    prefix = f"managed-{uuid.uuid4().hex[:8]}"
    admin: Any = RedisCluster.from_url(url) if cluster else Redis.from_url(url)
    try:
        async with managed_user(admin, prefix) as (name, password):
            settings = {"key_prefix": prefix, "memory_backend": "plain"}
            settings |= {"cluster": "true"} if cluster else {}
            yield Managed(user_url(url, name, password, **settings), admin, cluster, prefix)
        keys = [k async for k in admin.scan_iter(match=f"{prefix}:*", count=1000)]
        for key in keys:
            await admin.delete(key)
    finally:
        await admin.aclose()


def said(text: str, ts: float, **delta: Any) -> Event:
    return Event(
        author="user",
        timestamp=ts,
        content=Content(role="user", parts=[Part(text=text)]),
        actions=EventActions(state_delta=delta),
    )


async def seed(managed: Managed) -> None:
    """As the managed user: booking (alice a1 and a2, bob b1 ten days old), remembered."""
    now = time.time()
    async with (
        RedisSessionService.from_url(managed.url) as sessions,
        RedisMemoryService.from_url(managed.url) as memory,
    ):
        for user, sid, ts in (
            ("alice", "a1", now),
            ("alice", "a2", now),
            ("bob", "b1", now - 864000),
        ):
            s = await sessions.create_session(
                app_name="booking", user_id=user, session_id=sid, state={"user:lang": "fr"}
            )
            await sessions.append_event(s, said(f"a Paris hotel for {user}", ts, step=1))
            await sessions.append_event(s, said("and a train to Rome", ts + 1, **{"app:n": 1}))
            await memory.add_session_to_memory(s)


async def learn(managed: Managed) -> None:
    """As the managed user: a fact about alice, learned from a1 by a scripted model."""

    def model(request: object) -> list[MemoryOperation]:
        return [MemoryOperation(action="add", fact="The user prefers Paris hotels.")]

    generator = CallableGenerator(model)
    async with (
        RedisSessionService.from_url(managed.url) as sessions,
        RedisMemoryService.from_url(managed.url, generator=generator) as memory,
    ):
        session = await sessions.get_session(app_name="booking", user_id="alice", session_id="a1")
        assert session is not None
        await memory.add_session_to_memory(session)


async def test_the_services_and_their_readiness_work(managed: Managed) -> None:
    await seed(managed)
    async with (
        RedisSessionService.from_url(managed.url) as sessions,
        RedisMemoryService.from_url(managed.url) as memory,
    ):
        assert await sessions.check_ready(), await sessions.check_ready()
        ready = await memory.check_ready()
        assert ready, ready
        got = await sessions.get_session(app_name="booking", user_id="alice", session_id="a1")
        assert got is not None
        assert [e.content.parts[0].text for e in got.events if e.content] == [
            "a Paris hotel for alice",
            "and a train to Rome",
        ]
        assert got.state["app:n"] == 1
        listed = await sessions.list_sessions(app_name="booking", user_id="alice")
        assert sorted(s.id for s in listed.sessions) == ["a1", "a2"]
        note = MemoryEntry(id="m1", content=Content(parts=[Part(text="allergic to peanuts")]))
        await memory.add_memory(app_name="booking", user_id="alice", memories=[note])
        found = await memory.search_memory(app_name="booking", user_id="alice", query="peanuts")
        assert [m.id for m in found.memories] == ["m1"]
        await memory.delete_memory(app_name="booking", user_id="alice", memory_id="m1")
        await sessions.delete_session(app_name="booking", user_id="alice", session_id="a2")
        assert (
            await sessions.get_session(app_name="booking", user_id="alice", session_id="a2") is None
        )
    async with managed.admin as admin:
        assert await admin.get(f"{managed.prefix}:mem:backend") == b"plain"


# Each command with the arguments it needs on the seeded app ({tmp}: a scratch directory),
# and what it must answer: (exit code, a part of stdout or of the one line on stderr).
RUNS: dict[str, list[tuple[tuple[str, ...], int, str]]] = {
    "ls": [((), 0, "booking"), (("booking", "--user", "alice"), 0, "a1")],
    "show": [(("booking", "alice", "a1"), 0, "Paris hotel")],
    "tail": [(("booking", "alice", "a1", "-n", "1"), 0, "Rome")],
    "search": [(("booking", "alice", "paris"), 0, "Paris")],
    "facts": [
        (("booking", "alice", "--history"), 0, "The user prefers Paris hotels."),
        (("booking", "bob"), 1, "no learned facts of user 'bob'"),
    ],
    # MEMORY USAGE and MODULE LIST refused: those figures are "unknown", the rest shown.
    "stats": [((), 0, "unknown"), (("--json",), 0, "MODULE LIST refused")],
    "export": [(("booking", "-o", "{tmp}/out.jsonl"), 0, "")],
    "import": [(("{tmp}/out.jsonl", "--replace"), 0, "")],
    "migrate": [(("--from", "sqlite+aiosqlite:///{tmp}/adk.db"), 0, "")],
    "delete": [(("booking", "alice", "a2", "--yes"), 0, "")],
    "purge": [(("booking", "--older-than", "7d", "--yes"), 0, "deleted 1 session")],
    "expired": [(("booking",), 0, "")],
    "incomplete": [(("booking",), 0, "")],
    "reembed": [(("--embedder", "import:_embedders:SynonymEmbedder"), 0, "")],
    "reindex": [((), 0, "")],
    "sweep": [(("booking",), 0, "")],
    "ping": [((), 0, "ready"), (("--memory",), 0, "plain backend")],
    "tenant": [(("create", "booking"), 0, "ACL SETUSER")],
    # A worker runs until stopped (tests/test_facts_background*.py run it): here, that it
    # starts and says what it needs.
    "facts worker": [((), 2, "name the model: --generator")],
    "facts jobs": [((), 0, "no background generation jobs")],
    "facts dead-letters": [(("booking",), 1, "no dead letters in app 'booking'")],
    # A server runs until its client goes: over stdio, here at once (stdin is empty).
    "mcp": [(("--app", "booking"), 0, "app 'booking', read-only, on stdio")],
}


def test_every_command_is_run_here() -> None:
    assert set(RUNS) == set(_COMMANDS)


async def adk_database(path: Path) -> None:
    from google.adk.sessions import DatabaseSessionService

    adk = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{path}")
    await adk.create_session(app_name="adk_app", user_id="dana", session_id="d1", state={"k": 1})
    await adk.close()


@pytest.mark.parametrize("command", sorted(_COMMANDS))
async def test_every_command_works(managed: Managed, command: str, tmp_path: Path) -> None:
    await seed(managed)
    if command == "migrate":
        await adk_database(tmp_path / "adk.db")
    if command == "facts":
        await learn(managed)
    if command == "import":
        setup = run(managed, "export", "booking", "-o", f"{tmp_path}/out.jsonl")
        assert setup.returncode == 0, setup.stderr
    for args, code, expected in RUNS[command]:
        argv = (a.format(tmp=tmp_path) for a in args)
        # mcp's stdio server ends with its input: an empty one, not the suite's stdin.
        result = run(managed, *command.split(), *argv, stdin="" if command == "mcp" else None)
        assert (result.returncode, command, args) == (code, command, args), result.stderr
        assert expected in result.stdout + result.stderr, (result.stdout, result.stderr)


async def test_without_a_memory_backend_in_the_url_memory_says_what_is_refused(
    managed: Managed,
) -> None:
    """A new deployment whose URL leaves the memory backend to detection (``auto``) needs
    MODULE LIST, which the managed services refuse: the memory commands say so in one line
    (and ping's memory check names it), and the session commands work on."""
    url = managed.url.replace("memory_backend=plain", "memory_backend=auto")
    detect = Managed(url, managed.admin, managed.cluster, managed.prefix)
    probe = run(detect, "ping", "--memory", "--json")
    assert probe.returncode == 1
    assert "may not run MODULE|LIST" in probe.stdout
    assert probe.stderr.startswith("redis-agent-sessions: not ready: memory: memory backend: ")
    assert "may not run MODULE|LIST" in probe.stderr
    refused = run(detect, "reindex")
    assert refused.returncode == 2
    assert "may not run MODULE|LIST" in refused.stderr
    assert run(detect, "ping").returncode == 0


_PYTHONPATH = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def run(managed: Managed, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The command as an operator runs it: every setting in the URL, no other flag (in a
    process of its own, forked from one that imported the CLI: ``_cli.Forkers``)."""
    result = FORKERS.run(
        [*args, "--url", managed.url],
        stdin=stdin,
        # where the reembed test model is, before where the suite found the package if it
        # says (a worktree's src/)
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *_PYTHONPATH])},
    )
    assert "Traceback" not in result.stderr, result.stderr
    if result.returncode:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result
