"""Backends for the contract suites.

Every test taking ``redis_client`` (or ``service``) runs once on fakeredis and once on
the real server named by REDIS_URL; the real variant is skipped when REDIS_URL is unset.
A real server is flushed before and after each test, so point REDIS_URL at a throwaway
database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis

from _servers import skip_without
from redis_agent_sessions import RedisSessionService, SessionServiceConfig


@pytest.fixture(
    params=[
        pytest.param("fake", marks=pytest.mark.fake),
        pytest.param("real", marks=pytest.mark.real),
    ]
)
async def redis_client(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == "fake":
        # A fresh server per test: a script that leaked a global would break later ones.
        client: Any = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
        yield client
        await client.aclose()
        return
    client = Redis.from_url(skip_without("REDIS_URL"))
    await client.flushdb()
    yield client
    await client.flushdb()
    await client.aclose()


@pytest.fixture
def service(redis_client: Any) -> RedisSessionService:
    return RedisSessionService(redis_client)


@pytest.fixture
def make_service(redis_client: Any) -> Any:
    """A factory for services on the same client with another config."""

    def make(**config: Any) -> RedisSessionService:
        return RedisSessionService(redis_client, config=SessionServiceConfig(**config))

    return make
