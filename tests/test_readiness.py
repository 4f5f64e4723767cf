"""Readiness probes: ``check_ready()`` of both services and ``redis-agent-sessions ping``.

A probe says whether the service can work now, never raises for what it finds, and changes
no stored data (its script checks run on a session that does not exist).
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import pytest

from _acl import acl_user
from _cli import FORKERS
from _servers import skip_without
from _snapshot import snapshot
from redis_agent_sessions import (
    Content,
    Event,
    EventActions,
    InvalidInputError,
    MemoryEntry,
    MemoryIndexError,
    Part,
    Readiness,
    RedisMemoryService,
    RedisSessionService,
    SessionServiceConfig,
)


def names(readiness: Readiness) -> list[tuple[str, bool]]:
    return [(c.name, c.ok) for c in readiness.checks]


async def server_version(client: Any) -> str:
    """The server's own version, Valkey's or Redis' (on a cluster, of one node)."""
    from redis.asyncio.cluster import RedisCluster

    node = {"target_nodes": client.get_default_node()} if isinstance(client, RedisCluster) else {}
    info = await client.execute_command("INFO", "server", **node)
    return str(info.get("valkey_version", info["redis_version"]))


async def test_a_working_service_is_ready_and_the_probe_changes_nothing(
    redis_client: Any, worker_client: Any, request: pytest.FixtureRequest
) -> None:
    service = RedisSessionService(worker_client)
    session = await service.create_session(app_name="a", user_id="u", state={"k": 1})
    await service.append_event(
        session, Event(author="a", actions=EventActions(state_delta={"app:x": 1, "user:y": 2}))
    )
    before = await snapshot(redis_client)
    readiness = await service.check_ready()
    assert readiness, readiness
    assert names(readiness) == [("redis", True), ("scripts", True), ("memory", True)]
    assert all(c.detail and c.seconds >= 0 for c in readiness.checks)
    # The server names itself in the same round trip as the PING; a user refused INFO (the
    # documented ACL user is) and fakeredis (no INFO) are ready, the version unknown.
    kind = request.node.callspec.params["redis_client"]
    detail = readiness.checks[0].detail
    product = "Valkey" if kind.startswith("valkey") else "Redis"
    if kind in ("real", "valkey"):
        where = redis_client.connection_pool.connection_kwargs
        version = await server_version(redis_client)
        assert detail == f"{product} {version} answers on {where['host']}:{where['port']}"
    elif kind in ("cluster", "valkey-cluster"):
        primaries = len(redis_client.get_primaries())
        version = await server_version(redis_client)
        assert detail == f"all {primaries} primaries answer: {product} {version}"
    else:
        assert detail.endswith("(version unknown: INFO server refused)"), detail
    assert await snapshot(redis_client) == before
    memory = RedisMemoryService(worker_client, backend="plain")
    found = await memory.check_ready()
    assert names(found) == [
        ("redis", True),
        ("memory backend", True),
        ("search", True),
        ("memory", True),
    ]
    assert found.checks[1].detail == "plain backend"


@pytest.mark.real
@pytest.mark.acl
@pytest.mark.parametrize("missing", ["xadd", "hset", "evalsha"])
async def test_a_user_missing_a_permission_is_not_ready_and_told_which(missing: str) -> None:
    from redis.asyncio import Redis

    async with Redis.from_url(skip_without("REDIS_URL")) as admin:
        async with acl_user(admin) as worker:
            assert await RedisSessionService(worker).check_ready()  # PING refused: an answer
        async with acl_user(admin, without=missing) as worker:
            readiness = await RedisSessionService(worker).check_ready()
    assert not readiness
    assert names(readiness) == [("redis", True), ("scripts", False), ("memory", False)]
    assert missing in readiness.checks[1].detail.lower()
    assert readiness.checks[1].detail.startswith("PermissionDeniedError")


async def test_an_unreachable_server_is_not_ready_and_nothing_else_runs() -> None:
    async with RedisSessionService.from_url("redis://127.0.0.1:1/0") as service:
        readiness = await service.check_ready()
    assert names(readiness) == [("redis", False), ("scripts", False), ("memory", False)]
    assert readiness.checks[0].detail.startswith("ConnectionError")
    assert readiness.checks[1].detail == "not run: redis failed"
    async with RedisMemoryService.from_url("redis://127.0.0.1:1/0") as memory:
        assert not await memory.check_ready()


@pytest.fixture
async def silent_port() -> AsyncIterator[int]:
    """A loopback port that accepts connections and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    for writer in held:
        writer.close()
    server.close()
    await server.wait_closed()


async def test_a_server_that_never_answers_is_not_ready_within_the_timeout(
    silent_port: int,
) -> None:
    url = f"redis://127.0.0.1:{silent_port}/0"
    async with RedisSessionService.from_url(url, socket_timeout=30) as service:
        readiness = await asyncio.wait_for(service.check_ready(timeout=0.3), 5)
    assert names(readiness) == [("redis", False), ("scripts", False), ("memory", False)]
    assert readiness.checks[0].detail == "no answer within 0.3 s"


async def test_a_bad_timeout_is_refused() -> None:
    service = RedisSessionService.from_url("redis://127.0.0.1:1/0")
    for bad in (0, -1, True, "5"):
        with pytest.raises(InvalidInputError, match="timeout"):
            await service.check_ready(timeout=bad)  # type: ignore[arg-type]


@pytest.mark.real
async def test_a_write_concern_without_enough_replicas_is_not_ready() -> None:
    url = skip_without("REDIS_URL")
    skip_without("REDIS_REPLICA_URL")  # the replica of REDIS_URL
    for replicas, ready in ((1, True), (2, False)):
        config = SessionServiceConfig(
            write_concern="replicas", min_replicas=replicas, write_timeout_ms=300
        )
        async with RedisSessionService.from_url(url, config=config) as service:
            readiness = await service.check_ready()
        assert names(readiness)[-2] == ("write concern", ready), readiness
    assert "1 of 2 replicas confirmed within 300 ms" in readiness.checks[-2].detail


@pytest.mark.real
async def test_memory_on_a_server_without_the_search_module_is_not_ready_for_search() -> None:
    from redis.asyncio import Redis

    url = skip_without("REDIS_URL")
    async with Redis.from_url(url) as admin:
        await admin.flushdb()
    async with RedisMemoryService.from_url(url, backend="search") as memory:
        readiness = await memory.check_ready()
    assert names(readiness) == [
        ("redis", True),
        ("memory backend", False),
        ("search", False),
        ("memory", False),
    ]
    assert readiness.checks[1].detail.startswith("MemoryIndexError")
    async with RedisMemoryService.from_url(skip_without("REDIS_SEARCH_URL")) as memory:
        found = await memory.check_ready()
    assert found.checks[1].detail == "search backend", found


@pytest.mark.real
@pytest.mark.cluster
async def test_search_on_a_cluster_without_the_module_is_a_memory_index_error() -> None:
    """As on a single node: the library's error, not the server's "unknown command"."""
    import uuid

    url = skip_without("REDIS_CLUSTER_URL")
    config = SessionServiceConfig(key_prefix=f"nomod-{uuid.uuid4().hex[:8]}")
    async with RedisMemoryService.from_url(
        url, config=config, backend="search", cluster=True
    ) as memory:
        with pytest.raises(MemoryIndexError, match="search module"):
            await memory.add_memory(
                app_name="a",
                user_id="u",
                memories=[MemoryEntry(content=Content(parts=[Part(text="hello")]))],
            )
        with pytest.raises(MemoryIndexError, match="search module"):
            await memory.search_memory(app_name="a", user_id="u", query="hello")


def ping(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m redis_agent_sessions ping ARGS``, forked (``_cli.Forkers``)."""
    return FORKERS.run(["ping", *args], timeout=60)


@pytest.mark.real
@pytest.mark.cli
@pytest.mark.parametrize("variable", ["REDIS_URL", "REDIS_CLUSTER_URL"])
def test_the_ping_command_exits_0_1_or_2(variable: str) -> None:
    url = skip_without(variable) + ("?cluster=true" if "CLUSTER" in variable else "")
    ok = ping("--url", url, "--memory", "--json")
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["ready"] is True
    for service in ("sessions", "memory"):
        redis = report["services"][service][0]
        assert redis["check"] == "redis"
        # The server and its version, as INFO server says them (Redis here).
        assert re.search(r"\bRedis \d+\.\d+\.\d+\b", redis["detail"]), redis
    assert [c["check"] for c in report["services"]["memory"]] == [
        "redis",
        "memory backend",
        "search",
        "memory",
    ]
    table = ping("--url", url)
    assert (table.returncode, table.stdout.strip().splitlines()[-1]) == (0, "ready")
    if "CLUSTER" in variable:
        assert "all 3 primaries answer: Redis " in table.stdout
    else:
        assert re.search(r"Redis \S+ answers on 127\.0\.0\.1:\d+", table.stdout), table.stdout
    down = ping("--url", "redis://127.0.0.1:1/0")
    assert down.returncode == 2
    assert len(down.stderr.strip().splitlines()) == 1
    joiner = "&" if "?" in url else "?"
    unmet = ping(
        "--url", f"{url}{joiner}write_concern=replicas&min_replicas=5&write_timeout_ms=200"
    )
    assert unmet.returncode == 1, unmet.stdout + unmet.stderr
    assert unmet.stdout.strip().splitlines()[-1] == "NOT READY"
    assert "5 replicas" in unmet.stdout or "of 5" in unmet.stdout


@pytest.mark.real
@pytest.mark.cli
def test_the_cli_honours_the_urls_memory_backend() -> None:
    """``?memory_backend=plain`` in the URL is what the services of that URL use: ``ping
    --memory`` readies (and records) that backend, not the one the server could offer."""
    import uuid

    from redis import Redis

    url = skip_without("REDIS_SEARCH_URL")
    prefix = f"ping-{uuid.uuid4().hex[:8]}"
    try:
        ok = ping("--url", f"{url}?memory_backend=plain&key_prefix={prefix}", "--memory", "--json")
        assert ok.returncode == 0, ok.stderr
        checks = {c["check"]: c["detail"] for c in json.loads(ok.stdout)["services"]["memory"]}
        assert checks["memory backend"] == "plain backend"
        bad = ping("--url", f"{url}?memory_backend=nope&key_prefix={prefix}", "--memory")
        assert bad.returncode == 2
        assert "memory_backend" in bad.stderr
    finally:
        with Redis.from_url(url) as admin:
            assert admin.get(f"{prefix}:mem:backend") in (b"plain", None)
            admin.delete(f"{prefix}:mem:backend")


VALKEY_INFO = {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "9.1.2"}
"""What ``INFO server`` of valkey-server 9.1.2 says of its name and versions (redis-py's
parse): it reports Redis 7.2.4 for clients that check ``redis_version``."""


class Answers:
    """A topology whose primaries answer the probe's PING and INFO with ``replies``."""

    def __init__(self, *replies: tuple[str, Any, Any]) -> None:
        self.replies = replies

    async def on_primaries(self, *commands: tuple[Any, ...]) -> list[tuple[str, list[Any]]]:
        assert commands == (("PING",), ("INFO", "server"))  # one round trip to each
        return [(address, [pong, info]) for address, pong, info in self.replies]


async def probed(*replies: tuple[str, Any, Any]) -> Any:
    from redis_agent_sessions._health import redis_probe, run_checks

    readiness = await run_checks([("redis", redis_probe(Answers(*replies)))], 5)  # type: ignore[arg-type]
    [check] = readiness.checks
    return check


async def test_the_redis_check_names_valkey_by_its_own_version() -> None:
    check = await probed(("127.0.0.1:6379", True, VALKEY_INFO))
    assert (check.ok, check.detail) == (True, "Valkey 9.1.2 answers on 127.0.0.1:6379")
    check = await probed(("127.0.0.1:6379", True, {"redis_version": "7.0.15"}))
    assert check.detail == "Redis 7.0.15 answers on 127.0.0.1:6379"


async def test_the_redis_check_says_which_node_runs_what_when_they_differ() -> None:
    from redis.exceptions import NoPermissionError

    refused = NoPermissionError("this user has no permissions to run the 'info' command")
    redis = {"redis_version": "7.2.4"}
    check = await probed(("a:1", True, redis), ("b:2", True, VALKEY_INFO), ("c:3", True, redis))
    assert check.detail == "all 3 primaries answer: Redis 7.2.4 on a:1, c:3; Valkey 9.1.2 on b:2"
    check = await probed(("a:1", refused, refused), ("b:2", refused, refused))
    assert (check.ok, check.detail) == (
        True,
        "all 2 primaries answer (version unknown: INFO server refused)",
    )
    check = await probed(("a:1", True, redis), ("b:2", True, refused))
    assert check.detail == "all 2 primaries answer: Redis 7.2.4 on a:1; version unknown on b:2"


async def test_a_reply_without_the_version_is_unknown_and_a_ping_error_fails() -> None:
    from redis.exceptions import BusyLoadingError

    for info in ({}, {"server_name": "valkey"}, "not the fields", None):
        check = await probed(("h:1", True, info))
        assert check.ok, check
        assert (
            check.detail == "the server answers on h:1 (version unknown: INFO server did not say)"
        )
    loading = BusyLoadingError("Redis is loading the dataset in memory")
    check = await probed(("h:1", loading, VALKEY_INFO))
    assert (check.ok, check.detail) == (False, f"BusyLoadingError: {loading}")


@pytest.mark.real
@pytest.mark.valkey
async def test_a_real_valkey_names_itself() -> None:
    url = skip_without("REDIS_VALKEY_URL")
    async with RedisSessionService.from_url(url) as service:
        readiness = await service.check_ready()
    assert readiness, readiness
    assert readiness.checks[0].detail.startswith("Valkey "), readiness.checks[0].detail
