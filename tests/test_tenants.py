"""Tenants kept apart by Redis itself, played as an attacker would (docs/security.md,
"Tenants"): each app provisioned by an operator (``provision_tenant``, what ``tenant
create`` runs), its Redis user made with exactly the rules the page shows, on plain Redis 7,
RediSearch (single node and cluster) and Valkey. As app1's user, every command that could
reach app2's keys, the shared records or an index is refused, raw and through the library;
after every attack app2's keys are byte-identical and its own work still succeeds; each
tenant's whole feature set (sessions, every scope, keyword and hybrid memory, learned
facts) works."""

from __future__ import annotations

import re
import shlex
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoPermissionError, ResponseError

from _acl import PAGE
from _backends import backend as open_backend
from _embedders import SynonymEmbedder
from _snapshot import Snapshot, snapshot
from facts_generators import likes
from redis_agent_sessions import (
    Content,
    CorruptDataError,
    Event,
    EventActions,
    FactSettings,
    FactWorker,
    MemoryEntry,
    MemoryIndexError,
    Part,
    PermissionDeniedError,
    RedisMemoryService,
    RedisSessionService,
    SessionServiceConfig,
)
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.tenants import (
    acl_setuser_lines,
    check_tenant,
    drop_tenant,
    provision_tenant,
    tenant_acl_rules,
)

pytestmark = [pytest.mark.real, pytest.mark.acl]

CONFIG = SessionServiceConfig(memory_index="per_app")
KEYS = KeySpace()
APPS = ("app1", "app2")
PLANTED = MemoryEntry(content=Content(role="user", parts=[Part(text="planted by app1")]))
_TENANT_LINE = re.compile(r"^ACL SETUSER ras-app1 (.+)$", re.M)


def documented_lines() -> list[str]:
    """The page's tenant lines (shown for app1 on one node with the search backend)."""
    return [f"ACL SETUSER ras-app1 {line}" for line in _TENANT_LINE.findall(PAGE.read_text())]


def test_the_documented_tenant_lines_are_what_tenant_create_prints() -> None:
    rules = tenant_acl_rules(KEYS, "app1", search=True, cluster=False)
    assert documented_lines() == acl_setuser_lines("ras-app1", [">CHANGE-ME", *rules])
    # No command that makes, alters, drops or aliases an index; the shared records read-only.
    assert not [r for r in rules if r.startswith("+ft.") and r[4:] not in ("info", "search")]
    assert "%R~ras:apps" in rules
    assert "~ras:apps" not in rules
    # An app name is escaped, then made literal for the glob.
    assert KEYS.app_acl_keys("a*:b")[0] == "~ras:{a\\*%3Ab}:*"


# (the registry's kind, the memory backend) for each server
SERVERS = [
    pytest.param(("real", "plain"), id="plain"),
    pytest.param(("search", "search"), marks=pytest.mark.search, id="search"),
    pytest.param(
        ("search-cluster", "search"),
        marks=[pytest.mark.search, pytest.mark.cluster],
        id="search-cluster",
    ),
    pytest.param(("valkey", "plain"), marks=pytest.mark.valkey, id="valkey"),
]


@pytest.fixture(params=SERVERS)
async def admin(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Any, str]]:
    kind, backend = request.param
    async with empty(kind, monkeypatch) as client:
        yield client, backend


@asynccontextmanager
async def empty(kind: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """The registry's backend of ``kind``, without search indexes either, before and after:
    indexes outlive FLUSHDB."""
    async with open_backend(kind, monkeypatch) as client:
        await drop_indexes(client)
        try:
            yield client
        finally:
            await drop_indexes(client)


async def drop_indexes(client: Any) -> None:
    nodes = client.get_primaries() if isinstance(client, RedisCluster) else [None]
    for node in nodes:
        options = {} if node is None else {"target_nodes": node}
        try:
            indexes = await client.execute_command("FT._LIST", **options)
        except ResponseError:
            return  # no search module
        for index in indexes:
            await client.execute_command("FT.DROPINDEX", index, **options)


@asynccontextmanager
async def tenant(admin: Any, app: str) -> AsyncIterator[Any]:
    """The app provisioned, and a client logged in as its user made from the rules
    ``tenant create`` prints (on every node of a cluster)."""
    report = await provision_tenant(admin, app, config=CONFIG)
    name, password = f"ras-test-{app}-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    lines = acl_setuser_lines(name, [f">{password}", *report.rules])
    nodes = admin.get_nodes() if isinstance(admin, RedisCluster) else [None]
    for node in nodes:
        options = {} if node is None else {"target_nodes": node}
        for line in lines:
            await admin.execute_command(*shlex.split(line), **options)
    client: Any
    if isinstance(admin, RedisCluster):
        node = admin.get_default_node()
        client = RedisCluster(host=node.host, port=node.port, username=name, password=password)
    else:
        kwargs = admin.connection_pool.connection_kwargs
        client = Redis(host=kwargs["host"], port=kwargs["port"], username=name, password=password)
    try:
        yield client
    finally:
        await client.aclose()
        for node in nodes:
            options = {} if node is None else {"target_nodes": node}
            await admin.execute_command("ACL", "DELUSER", name, **options)


def said(text: str, *, state: dict[str, Any] | None = None) -> Event:
    return Event(
        author="user",
        content=Content(role="user", parts=[Part(text=text)]),
        actions=EventActions(state_delta=state or {}),
    )


async def work_as(worker: Any, app: str, user: str = "u1") -> None:
    """One app's whole feature set: readiness, a session with every state scope, keyword and
    hybrid memory, learned facts."""
    sessions = RedisSessionService(worker, config=CONFIG)
    memory = RedisMemoryService(worker, config=CONFIG, embedder=SynonymEmbedder())
    learner = RedisMemoryService(worker, config=CONFIG, generator=likes())
    for readiness in (
        await sessions.check_ready(app_name=app),
        await memory.check_ready(app_name=app),
    ):
        assert readiness, readiness.checks
    sid = f"s-{uuid.uuid4().hex[:6]}"
    session = await sessions.create_session(app_name=app, user_id=user, session_id=sid)
    await sessions.append_event(
        session,
        said(f"my {app} car password is {app}-secret", state={"user:plan": app, "app:tier": app}),
    )
    await sessions.append_event(session, said(f"I like {app} trains"))
    stored = await sessions.get_session(app_name=app, user_id=user, session_id=sid)
    assert stored is not None
    assert stored.state == {"user:plan": app, "app:tier": app}
    await memory.add_session_to_memory(stored)
    keyword = await memory.search_memory(app_name=app, user_id=user, query="password")
    assert f"{app}-secret" in keyword.memories[0].content.parts[0].text
    hybrid = await memory.search_memory(app_name=app, user_id=user, query="automobile")
    assert f"{app}-secret" in hybrid.memories[0].content.parts[0].text
    await learner.add_session_to_memory(stored)
    facts = await learner.list_facts(app_name=app, user_id=user)
    assert [f.text for f in facts] == [f"The user said: I like {app} trains"]
    # Background generation: the app's queue is in its key space; its worker names its app.
    background = FactSettings(mode="background")
    queued = RedisMemoryService(worker, config=CONFIG, generator=likes(), facts=background)
    await sessions.append_event(stored, said(f"I like {app} boats"))
    await queued.add_session_to_memory(stored)
    async with FactWorker(queued, apps=[app], poll_interval=0.01):
        await queued.wait_for_generation(app_name=app, user_id=user, session_id=sid, timeout=30)
    facts = await learner.list_facts(app_name=app, user_id=user)
    learned = {f"The user said: I like {app} {what}" for what in ("trains", "boats")}
    assert {f.text for f in facts} == learned
    listed = await sessions.list_sessions(app_name=app, user_id=user)
    assert sid in [s.id for s in listed.sessions]


async def app_keys(admin: Any, app: str) -> Snapshot:
    """Every key of one app (its tenant's key patterns), on every primary of a cluster."""
    return await snapshot(admin, match=[r[1:] for r in KEYS.app_acl_keys(app) if r.startswith("~")])


async def test_a_tenant_works_and_reaches_nothing_of_another_app(
    admin: tuple[Any, str],
) -> None:
    client, backend = admin
    # The operator's first worker records the backend and the vectors' model, then the
    # operator provisions the apps (the tenants may only read those records).
    opened = RedisMemoryService(client, config=CONFIG, backend=backend, embedder=SynonymEmbedder())
    assert await opened.backend() == backend
    async with tenant(client, "app1") as one, tenant(client, "app2") as two:
        await work_as(one, "app1")
        await work_as(two, "app2")
        before = await app_keys(client, "app2")
        assert before

        # Raw commands, as the operator's check runs them: every one refused.
        probes = await check_tenant(one, "app1", config=CONFIG)
        assert all(p.ok for p in probes), [p for p in probes if not p.ok]
        assert len(probes) > 20
        await raw_attacks(client, one, search=backend == "search")

        # Through the library: another app is refused, naming the command and key.
        sessions = RedisSessionService(one, config=CONFIG)
        memory = RedisMemoryService(one, config=CONFIG, embedder=SynonymEmbedder())
        refusals = [
            sessions.get_session(app_name="app2", user_id="u1", session_id="s"),
            sessions.create_session(app_name="app2", user_id="u2"),
            sessions.list_sessions(app_name="app2"),
            memory.search_memory(app_name="app2", user_id="u1", query="password"),
            memory.search_memory(app_name="app2", user_id="u1", query="automobile"),
            memory.add_memory(app_name="app2", user_id="u1", memories=[PLANTED]),
            memory.delete_memory(app_name="app2", user_id="u1"),
        ]
        theirs = await RedisSessionService(two, config=CONFIG).list_sessions(app_name="app2")
        refusals.append(memory.add_session_to_memory(theirs.sessions[0]))
        for call in refusals:
            with pytest.raises(PermissionDeniedError):
                await call

        # Nothing of app2 changed, and its own work goes on.
        assert await app_keys(client, "app2") == before
        await work_as(two, "app2", user="u2")


async def raw_attacks(admin: Any, one: Any, *, search: bool) -> None:
    """The attacks the issue found, and their neighbours, as app1's user (the index ones
    where the server has the search module: elsewhere there is no such command)."""
    cluster = isinstance(admin, RedisCluster)
    anywhere: dict[str, Any] = {"target_nodes": one.get_random_node()} if cluster else {}
    prefixes = (KEYS.memory_app_index_prefix("app2"), "ras:{app2", "")
    for prefix in prefixes if search else ():
        with pytest.raises(NoPermissionError):
            await one.execute_command(
                "FT.CREATE", "ras:mem:{app1:}:x", "ON", "HASH", "PREFIX", 1, prefix,
                "SCHEMA", "lower", "TEXT", "SORTABLE", **anywhere,
            )  # fmt: skip
    indexes = (KEYS.memory_index(), KEYS.memory_app_index("app2"), KEYS.memory_app_index("app1"))
    for index in indexes if search else ():
        for command in (
            ("FT.AGGREGATE", index, "*", "GROUPBY", 1, "@lower"),
            ("FT.DROPINDEX", index),
            ("FT.ALTER", index, "SCHEMA", "ADD", "z", "TEXT"),
            ("FT.ALIASADD", "ras:mem:{app1:}:alias", index),
        ):
            with pytest.raises(NoPermissionError):
                await one.execute_command(*command, **anywhere)
    for key in (KEYS.apps(), KEYS.memory_backend(), KEYS.memory_vectors()):
        for command in (("DEL", key), ("SET", key, "x"), ("ZREM", key, "app2")):
            with pytest.raises(NoPermissionError):
                await one.execute_command(*command)
    with pytest.raises(NoPermissionError):
        await one.execute_command("EVAL", "return redis.call('DEL', KEYS[1])", 1, KEYS.apps())
    reader = "return redis.call('GET', KEYS[1])"
    sha = await one.execute_command("SCRIPT", "LOAD", reader, **anywhere)
    with pytest.raises(NoPermissionError):
        await one.execute_command("EVALSHA", sha, 1, KEYS.app_state("app2"))


async def test_the_registry_of_apps_is_only_read_by_tenants(admin: tuple[Any, str]) -> None:
    client, backend = admin
    await RedisMemoryService(client, config=CONFIG, backend=backend).backend()
    async with tenant(client, "app1") as one:
        sessions = RedisSessionService(one, config=CONFIG)
        await sessions.create_session(app_name="app1", user_id="u", session_id="s")
        # An app no operator listed: refused before anything is written, naming how to list it.
        await client.sadd("sentinel", "x")
        before = await app_keys(client, "app3")
        with pytest.raises(PermissionDeniedError, match="tenant create") as refused:
            await sessions.create_session(app_name="app3", user_id="u")
        assert (refused.value.command, refused.value.key) == ("ZADD", KEYS.apps())
        assert await app_keys(client, "app3") == before == {}
    # A registry of a foreign type: a typed error, nothing written, on every topology.
    await client.delete(KEYS.apps())
    await client.set(KEYS.apps(), "x")
    for layout in (SessionServiceConfig(), SessionServiceConfig(cluster=True)):
        with pytest.raises(CorruptDataError, match=re.escape(KEYS.apps())):
            await RedisSessionService(client, config=layout).create_session(
                app_name="app4", user_id="u", session_id="s"
            )
        assert await app_keys(client, "app4") == {}


@pytest.mark.search
@pytest.mark.parametrize("variable", ["REDIS_SEARCH_URL", "REDIS_SEARCH_CLUSTER_URL"])
async def test_a_tenant_without_its_index_is_told_how_to_make_it(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    kind = "search-cluster" if "CLUSTER" in variable else "search"
    async with empty(kind, monkeypatch) as client:
        memory = RedisMemoryService(client, config=CONFIG, backend="search")
        await memory.backend()
        for call in (
            memory.search_memory(app_name="app9", user_id="u", query="anything"),
            memory.add_memory(app_name="app9", user_id="u", memories=[]),
        ):
            with pytest.raises(MemoryIndexError, match="redis-agent-sessions tenant create app9"):
                await call
        readiness = await memory.check_ready(app_name="app9")
        assert not readiness
        assert "tenant create app9" in str(readiness.checks)
        # Once provisioned (on every primary of a cluster), it works.
        report = await provision_tenant(client, "app9", config=CONFIG)
        primaries = len(client.get_primaries()) if isinstance(client, RedisCluster) else 1
        assert len(report.made) == primaries
        assert await RedisMemoryService(client, config=CONFIG).check_ready(app_name="app9")
        again = await provision_tenant(client, "app9", config=CONFIG)
        assert (again.made, len(again.found)) == ([], primaries)


async def test_drop_removes_one_app_and_nothing_else(admin: tuple[Any, str]) -> None:
    client, backend = admin
    embedder = SynonymEmbedder()
    await RedisMemoryService(client, config=CONFIG, backend=backend, embedder=embedder).backend()
    async with tenant(client, "app1") as one, tenant(client, "app2") as two:
        await work_as(one, "app1")
        await work_as(two, "app2")
    theirs = await app_keys(client, "app2")
    report = await drop_tenant(client, "app1", config=CONFIG)
    assert report.keys_deleted > 0
    assert await app_keys(client, "app1") == {}
    assert await app_keys(client, "app2") == theirs
    assert [a.decode() for a in await client.zrange(KEYS.apps(), 0, -1)] == ["app2"]
    if backend == "search":
        assert report.dropped
