"""Readiness: whether a service can do its work now, as an orchestrator's probe asks.

Each service runs its checks in order (reaching Redis, running its scripts, what its
configuration needs); a check that fails stops the ones after it, which are reported as not
run. No check changes stored data (the script checks run on a probe session that does not
exist, and the scripts ask for every permission before their first write), except that the
first check of a new deployment's memory records its backend, as its first use would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import NoPermissionError, RedisError, ResponseError

from redis_agent_sessions._redis.codec import check_id
from redis_agent_sessions._redis.identity import UNKNOWN, server_identity
from redis_agent_sessions._redis.lost import lost_connection
from redis_agent_sessions._redis.pressure import fullest, problem, read_policies
from redis_agent_sessions._redis.topology import Topology
from redis_agent_sessions.errors import InvalidInputError, RedisSessionsError

__all__ = [
    "PROBE_ID",
    "Check",
    "NotReady",
    "Probe",
    "Readiness",
    "memory_probe",
    "probe_app",
    "redis_probe",
    "run_checks",
]

PROBE_ID = "readiness-probe"
"""App, user and session id of the session the script checks ask for (never created)."""


def probe_app(app_name: str | None) -> str:
    """The app of the probe's session: its own, or the caller's (a Redis user limited to
    one app's keys reaches no other); a bad name is refused, as every call refuses it."""
    return PROBE_ID if app_name is None else check_id("app_name", app_name)


@dataclass(frozen=True)
class Check:
    """One check of a readiness probe."""

    name: str
    ok: bool
    detail: str
    """What was found (a server version, a backend), or why it failed."""
    seconds: float


@dataclass(frozen=True)
class Readiness:
    """The result of ``check_ready()``: ready when every check passed."""

    checks: list[Check] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def __bool__(self) -> bool:
        return self.ready


Probe = Callable[[], Awaitable[str]]
"""A check: returns what it found, raises why it failed."""


class NotReady(RedisSessionsError):
    """A check found what stops the service (its message is the whole detail)."""


def redis_probe(topology: Topology) -> Probe:
    """The first check: every primary answers ``PING`` (a least-privilege user's refusal is
    an answer too) and names itself by ``INFO server``, in the same round trip. A server
    that does not say (INFO refused to this user, fakeredis) passes, its version unknown."""

    async def probe() -> str:
        found = await topology.on_primaries(("PING",), ("INFO", "server"))
        for _, (pong, _info) in found:
            # An error reply in a pipeline is returned, not raised, whatever its class
            # (LOADING is a ConnectionError to redis-py).
            if isinstance(pong, Exception) and not isinstance(pong, NoPermissionError):
                raise pong
        if len(found) == 1:
            address, (_, info) = found[0]
            if (named := _named(info)) is not None:
                return f"{named} answers on {address}"
            return f"the server answers on {address} ({_unnamed(info)})"
        servers: dict[str | None, list[str]] = {}
        for address, (_, info) in found:
            servers.setdefault(_named(info), []).append(address)
        answer = f"all {len(found)} primaries answer"
        if len(servers) == 1:
            [(named, _)] = servers.items()
            return f"{answer}: {named}" if named else f"{answer} ({_unnamed(found[0][1][1])})"
        # A rolling upgrade, or a node that refuses INFO: say which node runs what.
        return f"{answer}: " + "; ".join(
            f"{named or 'version unknown'} on {', '.join(addresses)}"
            for named, addresses in servers.items()
        )

    return probe


def _named(info: Any) -> str | None:
    """``Valkey 9.1.2``, from a node's ``INFO server`` reply; None when it does not say."""
    if isinstance(info, Exception):
        return None
    name, version = server_identity(info)
    return None if version == UNKNOWN else f"{name} {version}"


def _unnamed(info: Any) -> str:
    why = "INFO server refused" if isinstance(info, Exception) else "INFO server did not say"
    return f"version unknown: {why}"


def memory_probe(topology: Topology, ttl: str | None) -> Probe:
    """The memory check: fails when Redis is full (writes refused) or when its
    ``maxmemory-policy`` may evict the store's keys (``ttl``: what gives sessions a TTL,
    see ``redis_agent_sessions._redis.pressure``). A server that does not tell (INFO
    refused to this user, fakeredis) passes, saying so."""

    async def probe() -> str:
        try:
            policies = await read_policies(topology)
        except ResponseError as exc:
            return f"not checked: INFO memory refused ({_first_line(exc)})"
        if why := problem(policies, ttl):
            raise NotReady(why)
        return fullest(policies).describe()

    return probe


async def run_checks(probes: Sequence[tuple[str, Probe]], timeout: float) -> Readiness:
    """Run ``probes`` in order, each within what is left of ``timeout`` seconds."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidInputError(f"timeout must be a positive number of seconds: {timeout!r}")
    deadline = time.monotonic() + timeout
    checks: list[Check] = []
    failed: str | None = None
    for name, probe in probes:
        if failed is not None:
            checks.append(Check(name, False, f"not run: {failed} failed", 0.0))
            continue
        started = time.monotonic()
        try:
            detail = await asyncio.wait_for(probe(), max(deadline - started, 0.001))
            ok = True
        except (TimeoutError, asyncio.TimeoutError):
            detail, ok = f"no answer within {timeout:g} s", False
        except NotReady as exc:
            detail, ok = str(exc), False
        except (RedisSessionsError, RedisError, OSError) as exc:
            detail, ok = f"{type(exc).__name__}: {_first_line(exc)}", False
        except (AttributeError, TypeError) as exc:
            lost = lost_connection(exc)
            if lost is None:
                raise
            detail, ok = f"{type(lost).__name__}: {_first_line(lost)}", False
        checks.append(Check(name, ok, detail, time.monotonic() - started))
        if not ok:
            failed = name
    return Readiness(checks)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
