"""Client ownership shared by every service: inject a client, or let ``from_url`` make one."""

from __future__ import annotations

from types import TracebackType
from typing import Any, TypeAlias

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from typing_extensions import Self

from .config import SessionServiceConfig

__all__ = ["AnyRedis", "ClientOwner", "is_cluster_client", "make_client"]

AnyRedis: TypeAlias = "Redis | RedisCluster"
"""The clients every service accepts: a single node (or Sentinel primary), or a cluster."""


def is_cluster_client(client: object) -> bool:
    """Whether ``client`` talks to a Redis Cluster (which decides the key layout)."""
    return isinstance(client, RedisCluster)


def make_client(url: str, *, cluster: bool, **redis_kwargs: Any) -> AnyRedis:
    """``RedisCluster.from_url`` when ``cluster``, else ``Redis.from_url``."""
    if cluster:
        return RedisCluster.from_url(url, **redis_kwargs)
    return Redis.from_url(url, **redis_kwargs)


class ClientOwner:
    """``from_url``, ``aclose`` and ``async with`` for a service built as ``cls(client, config=)``.

    A client passed in stays open when the service closes; one made by ``from_url`` is
    closed with it.
    """

    _client: AnyRedis
    _owns_client: bool = False

    def __init__(self, client: AnyRedis, *, config: SessionServiceConfig | None = None) -> None:
        raise NotImplementedError  # each service defines its own; declared for from_url

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        config: SessionServiceConfig | None = None,
        cluster: bool = False,
        **redis_kwargs: Any,
    ) -> Self:
        """A service with its own client, closed by :meth:`aclose`.

        ``cluster=True`` connects to a Redis Cluster (``RedisCluster.from_url``; the URL
        names any node); otherwise ``Redis.from_url`` (``redis://``, ``rediss://``,
        ``unix://``).
        """
        service = cls(make_client(url, cluster=cluster, **redis_kwargs), config=config)
        service._owns_client = True
        return service

    async def aclose(self) -> None:
        """Close the client if this service created it."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
