"""Tenants kept apart by Redis itself: one Redis user per app, with the documented key rules
(docs/security.md, "Tenants") and the least-privilege commands, on both memory backends,
a single node and a cluster. Each app's worker runs its own sessions, state and memory;
another app's data is refused, through the library and with raw commands, the search
module's included (RediSearch checks a user's key patterns against the index name only)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoPermissionError

from _acl import PAGE, acl_user
from _embedders import SynonymEmbedder
from _servers import skip_without
from _slots import flush_cluster
from redis_agent_sessions import (
    Content,
    Event,
    EventActions,
    Part,
    PermissionDeniedError,
    RedisMemoryService,
    RedisSessionService,
    SessionServiceConfig,
)
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory._search import search_docs

pytestmark = [pytest.mark.real, pytest.mark.acl]

CONFIG = SessionServiceConfig(memory_index="per_app")
KEYS = KeySpace()
APPS = ("app1", "app2")
_TENANT_LINE = re.compile(r"^ACL SETUSER ras-app1 (.+)$", re.M)


def documented_rules(app: str) -> list[str]:
    """The page's tenant lines, for ``app`` (the page shows them for app1)."""
    lines = _TENANT_LINE.findall(PAGE.read_text())
    rules = [rule for line in lines for rule in shlex.split(line)]
    assert rules[0] == "resetkeys", rules  # first: it drops the worker line's ~ras:*
    return [rule.replace("app1", app) for rule in rules[1:]]


def test_the_documented_tenant_line_is_what_the_key_space_builds() -> None:
    assert documented_rules("app1") == KEYS.app_acl_keys("app1")
    # An app name is escaped, then made literal for the glob.
    assert KEYS.app_acl_keys("a*:b")[0] == "~ras:{a\\*%3Ab}:*"


SERVERS = [
    pytest.param(("REDIS_URL", "plain"), id="plain"),
    pytest.param(("REDIS_SEARCH_URL", "search"), marks=pytest.mark.search, id="search"),
    pytest.param(("REDIS_CLUSTER_URL", "plain"), marks=pytest.mark.cluster, id="plain-cluster"),
    pytest.param(
        ("REDIS_SEARCH_CLUSTER_URL", "search"),
        marks=[pytest.mark.search, pytest.mark.cluster],
        id="search-cluster",
    ),
]


@pytest.fixture(params=SERVERS)
async def admin(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, str]]:
    variable, backend = request.param
    url = skip_without(variable)
    client: Any
    if "CLUSTER" in variable:
        client = RedisCluster.from_url(url)
        await flush_cluster(client)
    else:
        client = Redis.from_url(url)  # db 0: the search module indexes nothing else
        await client.flushdb()
    yield client, backend
    if isinstance(client, RedisCluster):
        await flush_cluster(client)
    else:
        await client.flushdb()
    await client.aclose()


def said(text: str, *, state: dict[str, Any] | None = None) -> Event:
    return Event(
        author="user",
        content=Content(role="user", parts=[Part(text=text)]),
        actions=EventActions(state_delta=state or {}),
    )


async def work_as(worker: Any, app: str) -> None:
    """What one app's worker does: readiness, a session with every state scope, memory."""
    sessions = RedisSessionService(worker, config=CONFIG)
    memory = RedisMemoryService(worker, config=CONFIG, embedder=SynonymEmbedder())
    for readiness in (
        await sessions.check_ready(app_name=app),
        await memory.check_ready(app_name=app),
    ):
        assert readiness, readiness.checks
    session = await sessions.create_session(app_name=app, user_id="u1", session_id="s1")
    await sessions.append_event(
        session,
        said(f"my {app} password is {app}-secret", state={"user:plan": app, "app:tier": app}),
    )
    await memory.add_session_to_memory(
        await sessions.get_session(app_name=app, user_id="u1", session_id="s1")
    )
    found = await memory.search_memory(app_name=app, user_id="u1", query="password")
    assert [m.content.parts[0].text for m in found.memories] == [
        f"my {app} password is {app}-secret"
    ]
    again = await sessions.get_session(app_name=app, user_id="u1", session_id="s1")
    assert again is not None
    assert again.state == {"user:plan": app, "app:tier": app}
    listed = await sessions.list_sessions(app_name=app, user_id="u1")
    assert [s.id for s in listed.sessions] == ["s1"]


async def test_one_acl_line_per_app_keeps_tenants_apart(admin: tuple[Any, str]) -> None:
    client, backend = admin
    search = backend == "search"
    # The operator's first worker records the backend and the vectors' model (the tenants
    # may only read them).
    opened = RedisMemoryService(client, config=CONFIG, backend=backend, embedder=SynonymEmbedder())
    assert await opened.backend() == backend
    async with (
        acl_user(client, search=search, keys=KEYS.app_acl_keys("app1")) as one,
        acl_user(client, search=search, keys=KEYS.app_acl_keys("app2")) as two,
    ):
        await work_as(one, "app1")
        await work_as(two, "app2")

        # Through the library: another app is refused, naming what was refused.
        sessions = RedisSessionService(one, config=CONFIG)
        memory = RedisMemoryService(one, config=CONFIG)
        with pytest.raises(PermissionDeniedError):
            await sessions.get_session(app_name="app2", user_id="u1", session_id="s1")
        with pytest.raises(PermissionDeniedError):
            await sessions.create_session(app_name="app2", user_id="u2")
        with pytest.raises(PermissionDeniedError):
            await memory.search_memory(app_name="app2", user_id="u1", query="password")

        # Raw commands: another app's keys, and the shared records, are out of reach.
        with pytest.raises(NoPermissionError):
            await one.hgetall(KEYS.app_state("app2"))
        with pytest.raises(NoPermissionError):
            await one.zrange(KEYS.memory_entries("app2", "u1"), 0, -1)
        with pytest.raises(NoPermissionError):
            await one.set(KEYS.memory_backend(), "plain")
        assert await one.get(KEYS.memory_backend()) == backend.encode()
        if search:
            await raw_searches(client, one)


@pytest.mark.search
async def test_a_tenants_ping_probes_its_app() -> None:
    """The CLI's readiness probe with a tenant's URL: ready in its app, refused elsewhere."""
    pytest.importorskip("rich", reason="needs the [cli] extra (rich is not installed)")
    admin = Redis.from_url(skip_without("REDIS_SEARCH_URL"))
    await admin.flushdb()
    try:
        assert await RedisMemoryService(admin, config=CONFIG, backend="search").backend()
        async with acl_user(admin, search=True, keys=KEYS.app_acl_keys("app1")) as one:
            await ping_as(one)
    finally:
        await admin.flushdb()
        await admin.aclose()


async def ping_as(worker: Redis) -> None:
    kwargs = worker.connection_pool.connection_kwargs
    url = (
        f"redis://{kwargs['username']}:{kwargs['password']}@{kwargs['host']}:{kwargs['port']}"
        "/0?memory_index=per_app"
    )

    def ping(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "redis_agent_sessions", "ping", "--memory", "--url", url]
        return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=120)

    ready = ping("--app", "app1")
    assert ready.returncode == 0, ready.stdout + ready.stderr
    refused = ping()
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "PermissionDeniedError" in refused.stdout
    assert "NOT READY" in refused.stdout


async def raw_searches(admin: Any, one: Any) -> None:
    """A tenant's raw FT.SEARCH reaches its own app's entries and no other's."""
    if isinstance(admin, RedisCluster):
        # A cluster has an index per user, each inside its app's key space.
        own, other = KEYS.memory_user_index("app1", "u1"), KEYS.memory_user_index("app2", "u1")
    else:
        own, other = KEYS.memory_app_index("app1"), KEYS.memory_app_index("app2")
        # No index spans the apps: none was made, and none could be searched.
        indexes = {i.decode() for i in await admin.execute_command("FT._LIST")}
        vectors = {KEYS.memory_app_vector_index(a) for a in APPS}
        assert indexes == {own, other} | vectors
        with pytest.raises(NoPermissionError):
            await ft_search(one, KEYS.memory_app_vector_index("app2"), "*")
        with pytest.raises(NoPermissionError):
            await ft_search(one, KEYS.memory_index(), "password")
    with pytest.raises(NoPermissionError):
        await ft_search(one, other, "password")
    texts = [str(doc) for doc in search_docs(await ft_search(one, own, "@terms:(password)"))]
    assert texts
    assert all("app1" in t and "app2" not in t for t in texts)


async def ft_search(client: Any, index: str, query: str) -> Any:
    """A raw FT.SEARCH, sent on a cluster to the shard the index's name hashes to."""
    options: dict[str, Any] = {}
    if isinstance(client, RedisCluster):
        options["target_nodes"] = client.get_node_from_key(index)
    return await client.execute_command("FT.SEARCH", index, query, "DIALECT", 2, **options)
