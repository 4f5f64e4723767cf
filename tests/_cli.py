"""The operator CLI as the tests run it: a subprocess per command under a fresh key prefix,
and the ``cli`` fixture (conftest.py gives it to every module), on real Redis 7 and on the
real cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from _servers import skip_without
from redis_agent_sessions import RedisSessionService, SessionServiceConfig

__all__ = ["Cli", "cli", "drop"]


@dataclass
class Cli:
    url: str
    cluster: bool
    prefix: str = field(default_factory=lambda: f"cli-{uuid.uuid4().hex[:8]}")

    def argv(self, *args: str, prefix: str | None = None) -> list[str]:
        """The command line of ``args`` on this server, under ``prefix`` (default: the test's)."""
        flags = ["--url", self.url, "--key-prefix", prefix or self.prefix]
        cluster = ["--cluster"] if self.cluster else []
        return [sys.executable, "-m", "redis_agent_sessions", *args, *flags, *cluster]

    def run(self, *args: str, stdin: str | None = None, prefix: str | None = None) -> Any:
        result = subprocess.run(
            self.argv(*args, prefix=prefix),
            capture_output=True,
            text=True,
            input=stdin,
            timeout=120,
        )
        assert "Traceback" not in result.stderr, result.stderr
        if result.returncode:
            # Every failure is one clear line on stderr.
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        return result

    def json(self, *args: str) -> Any:
        result = self.run(*args, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def client(self) -> Any:
        return RedisCluster.from_url(self.url) if self.cluster else Redis.from_url(self.url)

    def service(self, prefix: str | None = None) -> RedisSessionService:
        config = SessionServiceConfig(key_prefix=prefix or self.prefix)
        return RedisSessionService.from_url(self.url, config=config, cluster=self.cluster)


@pytest.fixture(
    params=[
        pytest.param("REDIS_URL", marks=pytest.mark.real),
        pytest.param("REDIS_CLUSTER_URL", marks=[pytest.mark.real, pytest.mark.cluster]),
    ]
)
async def cli(request: pytest.FixtureRequest) -> AsyncIterator[Cli]:
    found = Cli(skip_without(request.param), cluster=request.param == "REDIS_CLUSTER_URL")
    yield found
    await drop(found, found.prefix)


async def drop(cli: Cli, prefix: str) -> None:
    """Delete every key under ``prefix`` (a test may scan; the CLI never does)."""
    client = cli.client()
    async with client:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        for key in keys:
            await client.delete(key)
