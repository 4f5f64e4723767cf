"""``check_tenant``: a tenant's Redis user probed as an attacker would, with raw commands,
and its own work run through the services: what it must be able to do, and each thing it
must be refused (every probe either way; a probe that is not refused is reported, never
raised)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import NoPermissionError, RedisError

from redis_agent_sessions._redis.codec import check_id
from redis_agent_sessions._redis.lost import typed_losses
from redis_agent_sessions._redis.topology import Topology
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import RedisSessionsError
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.tenants._provision import tenant_config

__all__ = ["TenantProbe", "check_tenant"]

OTHER_APP = "tenant-check-other-app"
"""An app no tenant owns, whose keys every tenant must be refused."""


@dataclass(frozen=True, slots=True)
class TenantProbe:
    """One probe: ``ok`` when the user behaved as a tenant's must (its own work ran, or an
    attack was refused)."""

    name: str
    ok: bool
    detail: str


@typed_losses
async def check_tenant(
    client: Any, app_name: str, *, config: SessionServiceConfig | None = None
) -> list[TenantProbe]:
    """Probe ``client`` (logged in as the tenant of ``app_name``): the app's sessions and
    memory work (readiness, as the services run it), and every command that could reach
    another app's keys, the shared records or an index is refused by Redis."""
    from redis_agent_sessions.memory import RedisMemoryService  # the services import us not
    from redis_agent_sessions.sessions import RedisSessionService

    app = check_id("app_name", app_name)
    config = tenant_config(config)
    keys = KeySpace(config.key_prefix)
    topology = Topology(client, cluster=config.cluster)
    await topology.ready()
    probes: list[TenantProbe] = []
    for service in (
        RedisSessionService(client, config=config),
        RedisMemoryService(client, config=config),
    ):
        name = "own sessions" if isinstance(service, RedisSessionService) else "own memory"
        try:
            ready = await service.check_ready(app_name=app)
        except RedisSessionsError as exc:
            probes.append(TenantProbe(name, False, str(exc)))
            continue
        failed = [f"{c.name}: {c.detail}" for c in ready.checks if not c.ok]
        probes.append(TenantProbe(name, bool(ready), "; ".join(failed) or "work"))
    for name, attempt in _attacks(client, topology, keys, app):
        probes.append(await _refused(name, attempt))
    return probes


def _attacks(
    client: Any, topology: Topology, keys: KeySpace, app: str
) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    other_state = keys.app_state(OTHER_APP)
    other_user = keys.user_state(OTHER_APP, "u")
    own_index = keys.memory_app_index(app)
    prefix = keys.prefix

    def keyless(*command: Any) -> Callable[[], Awaitable[Any]]:
        return lambda: topology.any_node(*command)

    def keyed(*command: Any) -> Callable[[], Awaitable[Any]]:
        return lambda: client.execute_command(*command)

    async def script_on_other() -> Any:
        sha = await topology.any_node("SCRIPT", "LOAD", "return redis.call('HGETALL', KEYS[1])")
        return await client.execute_command("EVALSHA", sha, 1, other_state)

    return [
        (
            "FT.CREATE of an index in its own name space over every key",
            keyless("FT.CREATE", f"{own_index}-probe", "ON", "HASH", "PREFIX", 1, "",
                    "SCHEMA", "x", "TEXT"),
        ),
        (
            "FT.CREATE over another app's memory",
            keyless("FT.CREATE", f"{own_index}-probe", "ON", "HASH", "PREFIX", 1,
                    keys.memory_app_index_prefix(OTHER_APP), "SCHEMA", "x", "TEXT"),
        ),
        ("FT.ALTER of its own index", keyless("FT.ALTER", own_index, "SCHEMA", "ADD", "y", "TEXT")),
        ("FT.DROPINDEX of its own index", keyless("FT.DROPINDEX", own_index)),
        ("FT.ALIASADD", keyless("FT.ALIASADD", f"{own_index}-alias", own_index)),
        ("FT._LIST of every index", keyless("FT._LIST")),
        ("FT.SEARCH of the shared index", keyless("FT.SEARCH", keys.memory_index(), "*")),
        (
            "FT.SEARCH of another app's index",
            keyless("FT.SEARCH", keys.memory_app_index(OTHER_APP), "*"),
        ),
        ("HGETALL of another app's state", keyed("HGETALL", other_state)),
        ("HGETALL of another app's user state", keyed("HGETALL", other_user)),
        ("ZADD to the registry of apps", keyed("ZADD", keys.apps(), 0, "x")),
        ("DEL of the registry of apps", keyed("DEL", keys.apps())),
        ("SET of the memory backend record", keyed("SET", keys.memory_backend(), "plain")),
        ("SET of the layout version record", keyed("SET", keys.layout(), "2")),
        ("DEL of the memory vector record", keyed("DEL", keys.memory_vectors())),
        ("EVAL of a script", keyed("EVAL", "return 1", 0)),
        ("EVALSHA of its own script on another app's key", script_on_other),
        ("FCALL of a function", keyed("FCALL", "f", 1, other_state)),
        ("KEYS", keyless("KEYS", f"{prefix}:*")),
        ("SCAN", keyless("SCAN", 0, "MATCH", f"{prefix}:*")),
        ("FLUSHDB", keyless("FLUSHDB")),
        ("CONFIG GET", keyless("CONFIG", "GET", "*")),
        ("PUBLISH", keyless("PUBLISH", "ch", "x")),
        ("ACL LIST of every user", keyless("ACL", "LIST")),
        ("CLIENT LIST of every connection", keyless("CLIENT", "LIST")),
    ]  # fmt: skip


async def _refused(name: str, attempt: Callable[[], Awaitable[Any]]) -> TenantProbe:
    try:
        reply = await attempt()
    except NoPermissionError as exc:
        return TenantProbe(name, True, f"refused: {exc}")
    except RedisError as exc:
        if "NOPERM" in str(exc).upper() or "no permissions" in str(exc).lower():
            return TenantProbe(name, True, f"refused: {exc}")
        if "unknown command" in str(exc).lower():  # FT.* without the search module
            return TenantProbe(name, True, f"not a command of this server: {exc}")
        return TenantProbe(name, False, f"not refused by the ACL: {type(exc).__name__}: {exc}")
    return TenantProbe(name, False, f"ran: {str(reply)[:120]}")
