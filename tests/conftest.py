"""Backends for the contract suites.

Every test taking ``redis_client`` (or ``service``) runs with the read cache off and on
(``read_cache``), each on these backends: fakeredis; a slot-checking fakeredis that the
services treat as a cluster (the cluster code path, with every script and transaction checked
to stay in one slot); the real server named by REDIS_URL, once as an admin and once (``acl``)
with the services logged in as the documented least-privilege ACL user; the real Redis
Cluster named by REDIS_CLUSTER_URL; and Valkey, one node (REDIS_VALKEY_URL) and a cluster
(REDIS_VALKEY_CLUSTER_URL), except for the suites of ``_backends.LEFT_OFF``. A real
variant is skipped when its variable is unset. Real servers are flushed before and after each
test, so point the variables at throwaway servers.

Tests inspect and corrupt data through ``redis_client`` (an admin); services are built on
``worker_client``, which is that same client except under ``acl``.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from hypothesis import settings

from _backends import (
    BACKENDS,
    CACHE_ON,
    LEFT_OFF,
    SMOKE,
    STORED_DATA,
    VALIDATION,
    backend,
    every_config,
    worker,
)
from _cli import cli, cli_forker  # noqa: F401 - the operator CLI fixtures, for every module
from _processes import processes  # noqa: F401 - helper processes killed at the end, for every module
from _shards import selected
from redis_agent_sessions import RedisSessionService, SessionServiceConfig
from redis_agent_sessions.sessions._cache import ReadCache

CACHE_BYTES = 64 << 20

# CI (HYPOTHESIS_PROFILE=ci, set by .ci/run) draws the same examples on every run, seeded
# from each test's source, and keeps no example database: a red CI means a change broke
# something, not that this run drew an unlucky example. Local runs keep exploring new ones
# (and replay the failures saved in .hypothesis/).
# No deadline there either: an example descheduled on a loaded runner must not fail as flaky.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "explore"))


# Tests that need an extra are marked with it; without the extra installed they skip, as the
# real-server tests do without their server (the core suite runs with no extras at all).
EXTRAS = {"adk": ("google.adk", "[adk]"), "cli": ("rich", "[cli]")}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _this_shard(config, items)
    _leave_off_suites(config, items)
    _leave_off(config, items, _not_needed)
    for item in items:
        if _smoke(item):
            item.add_marker(pytest.mark.smoke)
    for marker, (module, extra) in EXTRAS.items():
        if _installed(module):
            continue
        skip = pytest.mark.skip(reason=f"needs the {extra} extra ({module} is not installed)")
        for item in items:
            # A test of the operator commands takes a `cli` fixture, or is marked.
            if item.get_closest_marker(marker) is not None or marker in item.fixturenames:
                item.add_marker(skip)


def _this_shard(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``RAS_SHARD`` (``k/n``, ``rest:k/n`` or ``waiting``), deselects the modules
    of other shards (_shards.py)."""
    if not os.environ.get("RAS_SHARD"):
        return
    try:
        modules = selected({item.path.stem for item in items}, os.environ["RAS_SHARD"])
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    kept = [item for item in items if item.path.stem in modules]
    config.hook.pytest_deselected(items=[item for item in items if item.path.stem not in modules])
    items[:] = kept


def _leave_off_suites(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselects the suites of LEFT_OFF on the backends named there (why: see there)."""
    kept, left_off = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        kinds = LEFT_OFF.get(item.path.stem, frozenset())
        params = callspec.params.values() if callspec is not None else ()
        off = any(isinstance(p, str) and p in kinds for p in params)
        (left_off if off else kept).append(item)
    if left_off:
        config.hook.pytest_deselected(items=left_off)
        items[:] = kept


def _params(item: pytest.Item) -> dict[str, Any]:
    callspec = getattr(item, "callspec", None)
    return dict(callspec.params) if callspec is not None else {}


def _not_needed(item: pytest.Item) -> bool:
    """A variant that adds no code path (see ``_backends.CACHE_ON`` and ``VALIDATION``)."""
    params = _params(item)
    kind, cache = params.get("redis_client"), params.get("read_cache")
    if kind is None:
        return False
    if cache == "cache" and kind not in CACHE_ON:
        return True
    kinds = VALIDATION.get(item.path.stem)
    if kinds is None or any(part in item.name for part in STORED_DATA):
        return False
    return cache == "cache" or kind not in kinds


def _smoke(item: pytest.Item) -> bool:
    if item.path.stem not in SMOKE:
        return False
    kinds = SMOKE[item.path.stem]
    if kinds is None:
        return True
    params = _params(item)
    kind = params.get("redis_client", params.get("memory_client"))
    if params.get("read_cache", "nocache") != "nocache" or params.get("memory") == "semantic":
        return False
    return kind in kinds


def _leave_off(config: pytest.Config, items: list[pytest.Item], off: Any) -> None:
    left_off = [item for item in items if off(item)]
    if left_off:
        config.hook.pytest_deselected(items=left_off)
        items[:] = [item for item in items if not off(item)]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


@pytest.fixture(params=["nocache", "cache"])
def read_cache(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[bool]:
    """Each contract test runs twice: as configured, and with every session service of the
    test (core, ADK, built by the test or by a fixture) given the verified read cache,
    unless its config sets one itself.

    With the cache, every event it holds is also checked, when the test ends, to be
    exactly as it was decoded: cached events are shared by every session read through the
    cache, so an in-place change by a caller (or by ADK's own flows: the Runner, rewind,
    compaction, ...) would reach later reads. This is the evidence that the ADK extra may
    keep the cache on by default."""
    if request.param == "nocache":
        # Off where the service would take its models' default (the ADK extra's: on).
        every_config(
            monkeypatch,
            lambda config: (
                config
                if "read_cache_bytes" in config.model_fields_set
                else config.model_copy(update={"read_cache_bytes": 0})
            ),
        )
        yield False
        return
    every_config(
        monkeypatch,
        lambda config: (
            config
            if config.read_cache_bytes
            else config.model_copy(update={"read_cache_bytes": CACHE_BYTES})
        ),
    )
    decoded: dict[int, tuple[Any, bytes]] = {}
    put = ReadCache.put

    def recording(self: Any, key: str, entry: Any) -> None:
        for event in entry.events:
            if id(event) not in decoded:
                decoded[id(event)] = (event, event.__pydantic_serializer__.to_json(event))
        put(self, key, entry)

    monkeypatch.setattr(ReadCache, "put", recording)
    yield True
    changed = [
        (event, was)
        for event, was in decoded.values()
        if event.__pydantic_serializer__.to_json(event) != was
    ]
    assert not changed, f"events held by the read cache were changed in place: {changed[:3]}"


@pytest.fixture(params=BACKENDS)
async def redis_client(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, read_cache: bool
) -> AsyncIterator[Any]:
    async with backend(request.param, monkeypatch) as client:
        yield client


@pytest.fixture
async def worker_client(redis_client: Any, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """The client services run on: ``redis_client``, or under ``acl`` the documented ACL user."""
    async with worker(request.node.callspec.params.get("redis_client"), redis_client) as client:
        yield client


@pytest.fixture
def service(worker_client: Any) -> RedisSessionService:
    return RedisSessionService(worker_client)


@pytest.fixture
def make_service(worker_client: Any) -> Any:
    """A factory for services on the same client with another config."""

    def make(**config: Any) -> RedisSessionService:
        return RedisSessionService(worker_client, config=SessionServiceConfig(**config))

    return make
